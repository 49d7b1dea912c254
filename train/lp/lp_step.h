#pragma once
// One link-prediction training step on the compute thread, through the model seam: the step's
// rows (addresses in their partitions' blocks) gathered per use, the model's loss and per-use
// gradients (fused for bilinear decoders, autograd otherwise), each row's gradients summed in
// use order, row-wise Adagrad into the rows, and the relations' optimizer. The sampling
// (sampler/link_batch.h) ran ahead in the pipeline's sampler stage.
//
// Exactness: rows are gathered in a canonical order (first occurrence: heads, tails, tail
// negatives, head negatives), per-use gradients are summed per row in use order whatever the
// thread count, and every random draw comes from (seed, epoch, step). So the same step on the
// same rows gives the same bits in memory and out of core.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cache/trace.h"
#include "common/status.h"
#include "sampler/link_batch.h"
#include "train/lp/lp_config.h"
#include "train/lp/lp_encoder.h"
#include "train/lp/lp_model.h"
#include "train/device_rows.h"
#include "train/lp/node_table.h"

namespace sluice {

class DataParallel;
class ShardedRows;

// Seconds per stage of the compute thread; gather_s includes the row addresses.
struct LpStepTimes {
  double gather_s = 0, compute_s = 0, update_s = 0;
};

class LpStepper {
 public:
  // The built-in LinkModel of the config's decoder, or `user` (a user's model, trained through
  // autograd) when given. The dense optimizer (train.relation_optimizer) steps the model's
  // parameters: the built-in model's relations, or every parameter of the user's.
  // `device`: where the model lives (a device run's; its optimizer state follows).
  LpStepper(const LpConfig& config, const NodeTableLayout& layout, uint64_t num_relations,
            std::shared_ptr<Model> user = nullptr, torch::Device device = torch::Device(torch::kCPU));

  Model& model() { return *model_; }
  const std::shared_ptr<Model>& model_ptr() const { return model_; }
  // The built-in model; null when a user's model trains.
  LinkModel* builtin() { return builtin_; }
  // The encoder in front of the built-in model (model.encoder); null without one.
  const std::shared_ptr<SageLinkEncoder>& encoder() const { return encoder_; }
  torch::optim::Optimizer& relation_optimizer() { return *rel_opt_; }

  // Trains a sampled step of epoch `epoch` on the rows of `block_base` (block k's first row;
  // null for blocks the step does not use); returns the step's mean loss.
  Result<double> Train(LinkBatch& batch, const std::vector<std::byte*>& block_base,
                       uint64_t epoch, uint64_t step);

  // The device path (train/device_rows.h): a step staged (its rows and relations copied to the
  // device while the previous step computes), launched through autograd (the fused path is the
  // CPU's), and finished (its rows written back into the blocks); Finish returns its loss.
  void UseDevice(DeviceRows* rows);
  // Every learning rate (rows, relations) is the config's times `scale` from the next step on.
  void SetLrScale(double scale);
  Status Stage(LinkBatch& batch, const std::vector<std::byte*>& block_base);
  Status Launch(LinkBatch& batch, uint64_t epoch, uint64_t step);
  Result<double> Finish();

  // Data parallel (train.virtual_shards; train/data_parallel.h): a step sampled in virtual
  // shards trains this rank's shards on rows from their owners (`rows`); the shards' losses and
  // relation gradients are added in shard order, each row's use gradients by its owner.
  void UseDataParallel(DataParallel* dp, ShardedRows* rows) { dp_ = dp, sharded_ = rows; }
  // Data parallel: whether the next step's rows travel during a step (SendsRowsAhead).
  bool sends_rows_ahead(RowPrefetch setting) const;
  // Data parallel: the rows this process holds, table rows from `first_row` on at `base`.
  void HoldRows(std::byte* base, uint64_t first_row) { held_base_ = base, held_first_ = first_row; }
  // Data parallel out of core: the next step's rows this process owns, in the cache (in the
  // order the step first uses them); null: the held rows.
  void OwnRowsOfStep(const std::vector<std::byte*>* rows) { step_own_ = rows; }
  // Data parallel: the step after the next Train's (`own`: its rows this process owns in the
  // cache, as OwnRowsOfStep; null: the held rows), whose rows that step does not use travel
  // while it computes (dist.prefetch_rows); null batch: none.
  void NextStep(const LinkBatch* batch, const std::vector<std::byte*>* own, uint64_t step) {
    next_batch_ = batch, next_own_ = own, next_step_ = step;
  }
  // A step whose rows travelled ahead will not be trained (the pass stopped): waits for them.
  Status DropPrefetch();

  const LpStepTimes& times() const { return times_; }

 private:
  float* RowAddress(int64_t node, const std::vector<std::byte*>& base) const;
  std::vector<float*> RowAddresses(const LinkBatch& b, const std::vector<std::byte*>& base) const;
  Result<double> TrainSharded(LinkBatch& b, uint64_t epoch, uint64_t step);
  // A step's rows (this rank's addressed), every shard's uses and where each rank's begin.
  struct ShardedStep {
    std::vector<uint64_t> rows, use_begin, own_rows;
    std::vector<int64_t> uses;
    std::vector<float*> own;
  };
  // `own`: this rank's rows of the step in the cache (null: the held rows).
  Status ShardedUses(const LinkBatch& b, const std::vector<std::byte*>* own, ShardedStep& out) const;
  static void AddColumns(LinkBatch& b, ModelInput& in);
  float RowLr() const { return static_cast<float>(cfg_.train.lr * lr_scale_); }

  LpConfig cfg_;
  double lr_scale_ = 1;  // train.lr_decay so far
  NodeTableLayout layout_;
  std::shared_ptr<Model> model_;
  LinkModel* builtin_ = nullptr;
  std::shared_ptr<SageLinkEncoder> encoder_;
  std::vector<int64_t> all_rows_, uses_;  // encoder: every row once; the decoder's uses
  std::unique_ptr<torch::optim::Optimizer> rel_opt_;
  DeviceRows* device_rows_ = nullptr;
  std::vector<RowKey> keys_;  // the staged step's rows, as keys
  torch::Tensor loss_;        // the running step's loss, on the device
  DataParallel* dp_ = nullptr;
  ShardedRows* sharded_ = nullptr;
  ShardedStep cur_, next_;  // data parallel: the step's and the next one's (ShardedUses)
  const LinkBatch* next_batch_ = nullptr;
  const std::vector<std::byte*>* next_own_ = nullptr;
  uint64_t next_step_ = 0;
  std::byte* held_base_ = nullptr;
  uint64_t held_first_ = 0;
  const std::vector<std::byte*>* step_own_ = nullptr;
  LpStepTimes times_;
};

}  // namespace sluice
