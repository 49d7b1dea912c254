#pragma once
// Public API. The model seam: where a model, built in or a user's own torch::nn::Module, meets
// the engine (sluice/run.h plugs a user's model in).
//
// Per step the engine gathers every use of every learnable table's rows into a tensor (the
// rows come from the cache or RAM), hands the model a ModelInput, and takes back the loss and
// each use's gradient. It then sums the gradients of each distinct row in a fixed order (use
// order, whatever the thread count) and applies the row optimizer to the rows in place; the
// model's own parameters are stepped by the task's dense optimizer. So a model never sees the
// storage, and the same model trains in memory and out of core to the same bits.
//
// A model is an encoder (identity by default; Encode runs before Loss and FusedLoss, and before
// Predict in recommendation and node classification) and a head whose Loss runs through autograd;
// a model may instead implement FusedLoss, computing the loss and the per-use gradients (and
// its parameters' .grad) directly, which the engine then uses (link prediction's bilinear
// decoders do). A model says how many bytes one step's working set takes, for the memory plan.
//
// Ownership: the engine holds the model (a shared_ptr from the factory given to Run::SetModel)
// for the run's life; it steps the model's parameters with the task's dense optimizer and saves
// them in every checkpoint (torch::save of the module: its registered parameters and buffers).
// Exceptions: a model may throw (libtorch does); the engine catches the exception and returns a
// Status naming the step, so no public call throws.
//
// What each task hands a model:
//   recommendation: dense [B, D], labels [B], table 0's uses [B * C, row_width] sample-major.
//   node classification: tables (features, embeddings) of every sampled node, blocks, labels.
//   link prediction, training (Loss): table 0's uses are the step's heads [q], tails [q], tail
//     negatives [C * n] and, when sizes["head_negatives"] is 1, head negatives [C * n], end to
//     end; ids["relation"] [q] each query's relation; sizes "queries" (q), "chunks" (C),
//     "per_chunk" (n), "head_negatives". Query i belongs to chunk c when q*c/C <= i < q*(c+1)/C
//     and is scored against that chunk's negatives. The model owns the relation parameters.
//   link prediction, ranking (Predict): table 0's uses are anchors [b, d], table 1's the
//     candidates [c, d]; ids["relation"] [b]; sizes["corrupt_head"] 0 scores the candidates as
//     tails of (anchor, relation, ?), 1 as heads of (?, relation, anchor) (never 1 with
//     model.reciprocal: head queries become tail queries of relation r + relations / 2).
//     Returns [b, c] scores, higher meaning more plausible. Candidates come in chunks of at
//     most 65,536 (a score must not depend on the call's other candidates).
//
// Thread safety: a model is used by one thread at a time (the compute thread); it may run
// data-parallel work on the TBB pool and libtorch's intra-op threads.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/sample_key.h"

namespace sluice {

// One learnable table's rows in a step.
struct TableInput {
  // [m, d] float32: the row of every use, in the step's canonical order (first-occurrence
  // order of the rows, uses as the task lays them out). A leaf that requires grad when the
  // model trains through autograd.
  torch::Tensor uses;
  // [m] int64: each use's distinct row, 0 .. rows - 1 (first-occurrence order).
  torch::Tensor inverse;
  int64_t rows = 0;  // distinct rows
};

// One layer of a sampled subgraph (graph tasks), innermost last: destination node i's sampled
// sources are src_local[offsets[i] .. offsets[i + 1]), local indices into the next layer.
struct BlockInput {
  torch::Tensor offsets;    // [num_dst + 1] int64
  torch::Tensor src_local;  // [edges] int64
  int64_t num_dst = 0, num_src = 0;
};

struct ModelInput {
  torch::Tensor dense;   // [B, D] float32 dense features (undefined when the task has none)
  torch::Tensor labels;  // [B] (undefined when the task has none)
  std::vector<TableInput> tables;
  std::vector<BlockInput> blocks;
  // The task's own index tensors and sizes, named (link prediction: "relation" [queries];
  // sizes "queries", "chunks", "per_chunk", "head_negatives" (0 or 1)).
  std::map<std::string, torch::Tensor> ids;
  std::map<std::string, int64_t> sizes;
  // Every random draw of a step (dropout masks) is keyed on these, never a global generator.
  SampleKey key;
  bool training = true;
};

// What FusedLoss returns.
struct FusedOutput {
  double loss = 0;  // the step's loss (as Loss would return it)
  // Per table: the uses' gradients as pieces that cover the uses in order ([k, ...] tensors
  // whose leading rows are uses; each piece viewable as [k, d]).
  std::vector<std::vector<torch::Tensor>> use_grads;
};

class Model : public torch::nn::Module {
 public:
  ~Model() override = default;
  // Transforms a step's input before the head (identity by default), in training and in
  // evaluation (not in link prediction's rankings, whose input Predict gets as described above).
  // The tables' uses it returns may be new tensors: the engine takes each use's gradient at the
  // rows it gathered, through the encoder.
  virtual ModelInput Encode(ModelInput input) { return input; }
  // The step's loss, a scalar tensor; the engine runs backward through it.
  virtual torch::Tensor Loss(const ModelInput& input) = 0;
  // The model's outputs for evaluation and prediction (no gradients are taken): recommendation,
  // one logit per sample [B]; node classification, [seeds, classes] logits; link prediction,
  // [anchors, candidates] scores. The default throws
  // (a model a task evaluates must override it).
  virtual torch::Tensor Predict(const ModelInput& /*input*/) {
    throw std::logic_error("this model does not implement Predict (evaluation needs it)");
  }
  // The fused alternative: fills `out` and the .grad of the model's parameters, returns true;
  // false (the default) means the model has none and Loss is used.
  virtual bool FusedLoss(const ModelInput& /*input*/, FusedOutput& /*out*/) { return false; }
  // Bytes one step's working set takes (activations, gradients, scratch).
  virtual uint64_t StepBytes() const = 0;
  // Bytes of the model's dense state: parameters, gradients, two optimizer moments.
  virtual uint64_t StateBytes() const {
    uint64_t n = 0;
    for (const auto& p : parameters()) n += static_cast<uint64_t>(p.numel());
    return n * 4 * 4;
  }
};

// A user's encoder in front of a task's built-in model (Run::SetEncoder; recommendation and
// node classification): each step's input passes through Encode before the built-in model
// sees it, in training and in evaluation, and the encoder's parameters train with the model's
// (the task's dense optimizer, saved in every checkpoint). Encode must return what the built-in
// model expects: the same tables with the same row widths and use counts, dense features of the
// same width (e.g. a learned projection of the node features, or of the gathered embedding
// rows). Gradients reach learnable rows through it.
class Encoder : public torch::nn::Module {
 public:
  ~Encoder() override = default;
  virtual ModelInput Encode(ModelInput input) = 0;
  // Bytes one step's encoding takes (added to the model's for the memory plan).
  virtual uint64_t StepBytes() const { return 0; }
};

}  // namespace sluice
