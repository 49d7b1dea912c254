#pragma once
// One link-prediction training step: sampling (queries, negatives, unique rows) and the step
// itself (gather the rows, loss and gradients, row Adagrad into the rows, the relations'
// optimizer), plus the dense part of the model it trains (relation embeddings and their
// optimizer).
//
// Exactness: rows are gathered in a canonical order (first occurrence: heads, tails, tail
// negatives, head negatives), per-use gradients are summed per row in use order whatever the
// thread count, and every random draw comes from (seed, epoch, step). So the same step on the
// same rows gives the same bits in memory and out of core.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "train/lp/lp_config.h"
#include "train/lp/lp_model.h"
#include "train/lp/lp_schedule.h"
#include "train/lp/node_table.h"

namespace sluice {

// A step's sampled ids: everything that does not need the rows, so it can run a step ahead on
// another thread. head/tail/tail_neg/head_neg index `unique` (first-occurrence order: heads,
// tails, tail negatives, head negatives); rel holds relation ids.
struct LpSampled {
  uint64_t b = 0, q = 0;  // edges, queries (2b when reciprocal)
  uint32_t chunks = 0, per_chunk = 0;
  std::vector<int64_t> head, rel, tail, tail_neg, head_neg, unique;
};

// Seconds per stage. sampler_busy_s: Sample wherever it ran; gather_s includes the row
// addresses.
struct LpStepTimes {
  double sampler_busy_s = 0, gather_s = 0, compute_s = 0, update_s = 0;
};

class LpStepper {
 public:
  // The relations start as a pure function of the seed.
  LpStepper(const LpConfig& config, const NodeTableLayout& layout, uint64_t num_relations);

  torch::Tensor& relations() { return relations_; }
  torch::optim::Optimizer& relation_optimizer() { return *rel_opt_; }
  const LpDecoder& decoder() const { return decoder_; }

  // Samples step `index` of the epoch from its state's edges (the schedule's own edges for the
  // global shuffle) with negatives from `blocks`. One call at a time (a stamp table).
  LpSampled Sample(const LpStep& step, const StateEdges& edges, const LpSchedule& schedule,
                   uint64_t epoch, uint64_t index, const std::vector<BlockId>& blocks);
  // Trains a sampled step on the rows of `block_base` (block k's first row; nullptr for blocks
  // the step does not use); returns the step's mean loss.
  double Train(LpSampled& sampled, const std::vector<std::byte*>& block_base);

  const LpStepTimes& times() const { return times_; }

 private:
  struct StepGrads {
    torch::Tensor rows;       // [u, d], summed per unique row in a fixed order
    torch::Tensor relations;  // [num_relations, d]
    double loss = 0;
  };
  void InitRelations();
  void UniqueIds(LpSampled& out);
  std::vector<float*> RowAddresses(const LpSampled& s, const std::vector<std::byte*>& base) const;
  void GatherUses(LpSampled& s, const std::vector<float*>& rows, LpBatch& batch) const;
  StepGrads BilinearStep(LpSampled& s, LpBatch& batch) const;
  StepGrads AutogradStep(LpSampled& s, const std::vector<float*>& rows);
  double Penalty(const LpBatch& batch, LpGrads& g, double scale) const;
  torch::Tensor SumRowGrads(const LpSampled& s, const LpGrads& g, int64_t u) const;

  LpConfig cfg_;
  NodeTableLayout layout_;
  uint64_t num_relations_ = 0;  // including reciprocal ones
  LpDecoder decoder_;
  torch::Tensor relations_;
  std::unique_ptr<torch::optim::Optimizer> rel_opt_;
  std::vector<uint64_t> stamp_;  // node -> (step stamp << 32) | local index
  uint32_t stamp_call_ = 0;
  LpStepTimes times_;
};

}  // namespace sluice
