#pragma once
// DLRM's out-of-core memory plan: a pure function from the budget and the shapes to how much of
// the budget each part gets. What is not rows is estimated first (the libtorch runtime, the
// dense model and its optimizer, a step's activations, the pipeline's ring of steps, io
// staging, RocksDB's caches); the oracle's window shrinks until its ring fits; what is left
// holds rows: the read-ahead share, the write-back buffer's share, and the cache (rows plus its
// index) with the rest. Fails, naming the numbers, when the budget cannot hold one step.

#include <cstdint>
#include <string>

#include "common/status.h"

namespace sluice {

// Memory the engine needs besides the rows and the per-step buffers: the libtorch runtime (its
// code and allocator: `sluice version` alone has a resident set of 172 MB here).
inline constexpr uint64_t kDlrmBaseBytes = 192ull << 20;

struct DlrmPlanInput {
  uint64_t budget_bytes = 0;
  uint64_t batch = 0;          // samples per step
  uint32_t tables = 0;
  uint32_t width = 0;          // floats trained per row
  uint32_t row_bytes = 0;
  uint64_t record_bytes = 0;   // one sample record
  uint64_t dense_params = 0;   // parameters of the dense model
  uint64_t layer_widths = 0;   // dim + the bottom and top MLPs' hidden widths
  uint64_t total_rows = 0;     // rows of the dense tables (0: raw ids)
  bool raw_ids = false;
  bool rocksdb = false;
  bool oracle = true;
  uint32_t window = 16;        // the oracle's lookahead (configured)
  uint32_t run_ahead = 2;
  uint64_t io_queue_depth = 32;
  uint64_t io_merge_max_bytes = 0;
  uint64_t kv_bytes = 0;       // RocksDB's block cache and memtables (rocksdb only)
  uint64_t sampled_rows_per_step = 0;  // the most distinct rows of the first steps
  uint64_t cache_rows = 0;     // override (0: from the budget)
  double write_back_share = 0.5;
  uint64_t write_back_rows = 0;  // override (0: from the share)
  double preload_share = 0;
  uint32_t preload_horizon = 32;
};

struct DlrmMemoryPlan {
  uint64_t dense_bytes = 0, activation_bytes = 0, io_bytes = 0, kv_bytes = 0;
  uint64_t pipeline_bytes = 0;  // the ring of steps in flight and io staging
  uint32_t window = 0, run_ahead = 0;
  uint64_t step_rows = 0;       // distinct rows per step assumed (with a margin)
  uint64_t window_rows = 0;     // rows the index may hold for the window
  uint64_t min_rows = 0;        // rows of the steps in flight
  uint64_t cache_rows = 0, cache_bytes = 0;     // with its index
  uint64_t staging_rows = 0, staging_bytes = 0;  // the write-back buffer
  uint64_t preload_rows = 0, preload_bytes = 0;  // read-ahead
  // The bytes the plan accounts for; the process should peak near it.
  uint64_t predicted_bytes = 0;
};

Result<DlrmMemoryPlan> PlanDlrmMemory(const DlrmPlanInput& in);

}  // namespace sluice
