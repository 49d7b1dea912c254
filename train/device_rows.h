#pragma once
// DeviceRows: a learnable table's rows on the device (train/accelerator.h), for the tasks that
// train on a GPU. One mechanism for every task: a step's distinct rows (their keys and their
// current rows in the host cache or the in-memory table) and its uses (per use, its distinct
// row) are staged into page-locked host memory and copied to the device on the copy stream
// while the previous step computes; rows already on the device are not copied again (the device
// row cache: slots within device.gpu_budget, planned by cache/RowCache: oracle, lru, static or
// none). With the oracle, the steps after the staged one that the task's pipeline has already
// sampled (at most kDeviceLookahead) are appended to the cache's window first (Lookahead), so a
// row they use stays; among the other rows the least often used goes first.
//
// Per step, in this order (step t + 1 is staged between Update(t) and Finish(t)):
//   Stage(keys, host, parts, extras)  host: plans the device slots, packs what the device lacks
//                                     and starts its copy
//   Begin(training)                   compute: the loaded rows into their slots; the uses
//                                     gathered [m, dim] (a leaf that requires grad in training)
//   Update(use_grads)                 compute: each row's use gradients summed in use order
//                                     (index_add_, deterministic), the row optimizer applied to
//                                     the rows in their slots, the updated rows copied back
//   Finish()                          host: waits for them and writes every updated row into
//                                     its host row: the host cache sees the same rows, in the
//                                     same order, as on the CPU path
//   End()                             instead of Update + Finish when a step only reads rows
//
// Consistency: the device holds a row only as a copy of its host row (every update is written
// back at Finish), and the planner keeps the previous step's rows resident while the next step
// is planned (protect_steps 1), so a row the next step shares with the running one is never
// read from the host before the running step's update of it has been written back. (A step
// too large to fit beside the running one may evict the running step's other rows: its loads
// reach the slots in Begin, on the compute stream after the running step's Update has read
// them, and a row it shares with the running step is found, not loaded.) The rows a
// step reads therefore do not depend on which rows the device holds: device in memory and out
// of core train the same bits.
//
// Thread safety: one thread (the compute thread).

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cache/row_cache.h"
#include "cache/sharded_row_cache.h"
#include "common/status.h"
#include "train/accelerator.h"
#include "train/model.h"
#include "train/model_step.h"
#include "train/row_optimizers.h"

namespace sluice {

// The most steps after the staged one the device cache's oracle looks at (RunDevicePass appends
// those its pipeline has sampled). On Zipf-skewed rows the oracle's gain over lru is mostly its
// ranking by past use; a longer window adds little (docs/benchmarks.md) and costs index room.
inline constexpr uint32_t kDeviceLookahead = 4;

struct DeviceRowsOptions {
  int64_t dim = 0;         // floats of a row the model reads (the embedding)
  int64_t row_floats = 0;  // floats of a row (the embedding, then its optimizer state)
  RowOptimizer optimizer = RowOptimizer::kAdagrad;
  float lr = 0;
  PlannerKind planner = PlannerKind::kLru;
  uint64_t capacity_rows = 0;  // device slots: at least two steps' rows
  // The table's rows, when known (keys are then table 0's ids): never more slots than that, and
  // the cache's index by id.
  uint64_t total_rows = 0;
  // Read-only rows (feature rows) and no device cache (gpu_budget 0 or planner none): each step
  // copies all its rows into its lane's half of the slots, without planning a cache. Rows a
  // step shares with the running one are copied again; they cannot have changed.
  bool direct = false;
  // planner static: the rows that stay once loaded, a bitmap by id (not owned), set by a task
  // that can rank its rows (node classification: by in-degree); PlanDevice refuses static
  // for a task that sets ranked to false.
  const std::vector<uint64_t>* pinned = nullptr;
  bool ranked = false;
  // The most distinct rows a step has (set by PlanDevice): with room to spare, the device cache
  // is planned in shards on the host's cores (cache/sharded_row_cache.h); 0: one cache.
  uint64_t max_step_rows = 0;
};

// How many shards the device cache is planned in (ShardedRowCache::Shards on this process's
// TBB threads; 1 for the direct mode).
uint32_t DeviceCacheShards(const DeviceRowsOptions& options);

// The device memory DeviceRows takes: its slots and two lanes' staging buffers for steps of at
// most `max_uses` uses, `max_rows` distinct rows and `extra_bytes` of extras.
uint64_t DeviceRowsBytes(const DeviceRowsOptions& options, uint64_t max_uses, uint64_t max_rows,
                         uint64_t extra_bytes);
// Page-locked host bytes the staging takes (two lanes, rows in and out).
uint64_t DeviceStagingHostBytes(const DeviceRowsOptions& options, uint64_t max_uses,
                                uint64_t max_rows, uint64_t extra_bytes);

// The device row cache's slots for device.gpu_budget: what the budget holds after two lanes'
// staging and a step's tensors, at least two steps' rows (the running and the staged one); with
// budget 0 or planner none exactly that (no rows kept beyond the steps in flight). Fails naming
// the numbers when a non-zero budget cannot hold two steps.
Result<uint64_t> DeviceCapacityRows(const DeviceConfig& config, const DeviceRowsOptions& options,
                                    uint64_t max_uses, uint64_t max_rows, uint64_t extra_bytes);

// The largest step a task stages: uses, distinct rows, bytes of its other inputs.
struct DeviceStepShape {
  uint64_t uses = 0, rows = 0, extra_bytes = 0;
};

// A device run's memory, from its rows' options, its largest step and its budgets.
struct DevicePlan {
  DeviceRowsOptions options;  // capacity_rows from DeviceCapacityRows
  // Host bytes it adds: page-locked staging and the device cache's index; when the device is
  // the host (emulated), also the device's rows, staging and the model's step.
  uint64_t host_bytes = 0;
};
Result<DevicePlan> PlanDevice(const DeviceConfig& config, DeviceRowsOptions options,
                              const DeviceStepShape& shape, bool device_is_host,
                              uint64_t model_step_bytes);

// A staged step on the device.
struct DeviceStep {
  TableInput table;                   // uses [m, dim] and inverse [m] on the device
  std::vector<torch::Tensor> extras;  // Stage's extras, on the device (same shapes and dtypes)
};

struct DeviceRowsStats {
  uint64_t steps = 0, rows = 0, loads = 0;  // distinct rows per step summed; rows copied in
  // Steps that did not fit the slots beside the running step and took its slots (see Stage).
  uint64_t shared_steps = 0;
  double plan_s = 0, pack_s = 0;            // host seconds staging: the device cache's plan, packing
  uint64_t lookahead_steps = 0;             // oracle: steps appended ahead of the staged one, summed
};

class DeviceRows {
 public:
  DeviceRows(Accelerator* accelerator, const DeviceRowsOptions& options);

  // Stages the next step. keys[k] is distinct row k (no key twice), host[k] its current row in
  // host memory (row_floats floats, valid until Finish); parts give each use's distinct row;
  // extras are contiguous host tensors the step also needs on the device. At most one step is
  // staged ahead of the running one. A step that does not fit the slots beside the running one
  // (larger than the steps the plan was sized for) takes the running step's slots too: the
  // loaded rows reach their slots in Begin, on the compute stream after the running step's
  // Update, and a row both steps use stays where it is, so the rows are the same; the running
  // step's other rows are copied in again when a later step uses them. Fails
  // (FailedPrecondition) when the step alone is larger than the slots, or, with the cache
  // planned in shards, a shard's share of it is larger than the shard's slots.
  Status Stage(std::span<const RowKey> keys, std::span<float* const> host, const UseParts& parts,
               const std::vector<torch::Tensor>& extras);
  DeviceStep Begin(bool training);
  // `use_grads`: the uses' gradients as pieces over the uses in order (StepGrads' table 0); none
  // defined (a model that ignored the rows) updates with zero gradients.
  void Update(const std::vector<torch::Tensor>& use_grads);
  Status Finish();
  void End();
  // Forgets every device row and a step staged but not begun (a pass ended or failed).
  void Reset();
  // planner oracle: appends a later step's distinct rows to the device cache's window (the keys
  // Stage will get for it, steps in order; a step Stage gets that was not appended is appended
  // then). At most kDeviceLookahead steps beyond the one staged next. Other planners: nothing.
  void Lookahead(std::span<const RowKey> keys);
  bool wants_lookahead() const { return options_.planner == PlannerKind::kOracle && !options_.direct; }

  const DeviceRowsStats& stats() const { return stats_; }
  uint64_t capacity_rows() const { return options_.capacity_rows; }
  uint32_t cache_shards() const { return cache_->shards(); }
  bool direct() const { return options_.direct; }
  PlannerKind planner() const { return options_.planner; }
  // The row optimizer's learning rate from the next update on (train.lr_decay).
  void set_lr(float lr) { options_.lr = lr; }

 private:
  struct Lane {
    torch::Tensor host_in, dev_in;     // staged bytes
    torch::Tensor host_out;            // updated rows back
    std::vector<float*> host_rows;     // where they go
    int64_t loads = 0, rows = 0, uses = 0;
    std::vector<int64_t> extra_offsets;
    std::vector<torch::Tensor> extra_shapes;  // host extras (for shapes and dtypes)
    int64_t load_off = 0, slot_off = 0, use_off = 0;
    torch::Tensor row_slots, use_rows;  // device, set by Begin
    bool staged = false;
  };
  Status PlanSlots(std::span<const RowKey> keys, Lane& lane);
  void NoteSharedStep(size_t rows);
  void Pack(std::span<float* const> host, const UseParts& parts, const std::vector<torch::Tensor>& extras,
            Lane& lane);
  torch::Tensor DeviceView(const Lane& lane, int64_t offset, int64_t count, torch::ScalarType type) const;

  Accelerator* acc_;
  DeviceRowsOptions options_;
  std::optional<ShardedRowCache> cache_;
  torch::Tensor slots_;  // [capacity, row_floats] on the device
  Lane lanes_[2];
  int staged_lane_ = 0;  // the lane Stage fills next
  int running_ = -1;     // the lane of the step begun and not finished
  RowStepPlan plan_;
  std::vector<uint32_t> first_loads_;  // a step that took the running step's slots: its first loads
  std::vector<uint8_t> loading_;  // by slot: loaded by the step being staged
  std::vector<uint32_t> slots_of_step_;
  DeviceRowsStats stats_;
};

class RunSummary;
// The device's lines and `device` fields of a run's summary: GPU busy time over the device
// passes' wall time, copy time and how much of it hid behind compute, rows copied in and the
// device cache's hits, peak device memory.
void SummarizeDevice(RunSummary& summary, const Accelerator& accelerator, const DeviceRows& rows,
                     double wall_s);

}  // namespace sluice
