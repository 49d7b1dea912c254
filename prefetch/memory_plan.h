#pragma once
// Memory plans: pure functions from one budget (memory.budget: the whole process) and the
// shapes of a run to how much of it each part gets. A plan fails, naming the numbers, when the
// budget cannot hold one step's working set; it says what it predicts the process will peak
// at, and the run prints that beside its measured peak.
//
//   PlanPartitionMemory  block-granular runs (link prediction): the runtime the process holds,
//                        one step's tensors, the sampler ring's payloads, two buffer states'
//                        edges, and partition slots with the rest.
//   PlanRowMemory        row-granular runs (DLRM, node features): the runtime, the dense model,
//                        a step's activations, the pipeline's ring of steps, io staging, RocksDB's
//                        caches; the oracle's window shrinks until its ring fits; what is left
//                        holds rows: a read-ahead share, the write-back buffer's share, and the
//                        cache (rows plus its index) with the rest.

#include <cstdint>
#include <string>

#include "cache/row_cache.h"
#include "common/status.h"

namespace sluice {

// What the process holds before any table: libtorch's code and allocator (`sluice version`
// alone has a resident set of 172 MB here).
inline constexpr uint64_t kRuntimeBytes = 192ull << 20;
// Allocator slack the partition plan keeps free.
inline constexpr uint64_t kPartitionSlackBytes = 32ull << 20;
// What recommendation's row plan keeps free of its budget: 3% of what the budget holds beyond
// the runtime, for the resident set beyond the planned parts (the allocator's free pages,
// BLAS's packing buffers beside a step's matmuls), measured at 1.4-7 MiB over budgets of 300 to
// 500 MiB once the parts were planned as measured (docs/benchmarks.md).
inline uint64_t RowSlackBytes(uint64_t budget_bytes) {
  return budget_bytes > kRuntimeBytes ? (budget_bytes - kRuntimeBytes) * 3 / 100 : 0;
}

struct PartitionPlanInput {
  uint64_t budget_bytes = 0;
  uint64_t runtime_bytes = 0;  // held at set-up (libtorch, the dense model, in-memory edges)
  uint64_t step_bytes = 0;     // one step's tensors (the model's working set)
  uint64_t ring_bytes = 0;     // the sampler ring's payloads
  uint64_t block_bytes = 0;    // one partition's rows in the table
  uint64_t table_bytes = 0;    // every partition (in memory)
  uint32_t partitions = 1;
  bool in_memory = false;
  bool shuffle = false;        // every partition resident at once (the global shuffle)
  uint32_t resident = 0;       // storage.resident (0: from the budget)
  uint32_t slots = 0;          // storage.slots (0: from the budget)
  uint64_t largest_state_edges = 0;  // the partition schedule holds two states' edges
};

struct PartitionMemoryPlan {
  uint32_t slots = 0;     // partitions in memory at once
  uint32_t resident = 0;  // partitions a buffer state trains on
  uint64_t slot_bytes = 0;
  uint64_t edges_bytes = 0;     // two buffer states' edges and their order
  uint64_t reserved_bytes = 0;  // everything but the slots
  uint64_t predicted_bytes = 0;
};

Result<PartitionMemoryPlan> PlanPartitionMemory(const PartitionPlanInput& in);

struct RowPlanInput {
  uint64_t budget_bytes = 0;
  uint64_t runtime_bytes = kRuntimeBytes;
  uint64_t model_bytes = 0;     // dense parameters, gradients and optimizer state
  uint64_t step_bytes = 0;      // one step's activations and gradients (the model's)
  uint64_t keys_per_step = 0;   // row uses per step
  uint64_t step_record_bytes = 0;  // one step's sample records
  uint32_t row_bytes = 0;
  uint64_t total_rows = 0;      // rows of the dense tables (0: raw ids, created on first use)
  uint64_t max_rows = 0;        // rows the tables can come to hold (raw ids: the data's ids)
  bool raw_ids = false;
  bool rocksdb = false;
  bool oracle = true;
  // Keys are one table's ids below this (node classification's rows): the cache may index rows
  // by id (RowCacheUsesDenseIndex). 0: keys of several tables, or raw ids.
  uint64_t index_rows = 0;
  uint32_t window = 16;         // the oracle's lookahead (configured)
  uint32_t run_ahead = 2;
  uint64_t io_queue_depth = 32;
  uint64_t io_merge_max_bytes = 0;
  uint64_t kv_bytes = 0;        // RocksDB's block cache and memtables (rocksdb only)
  uint64_t sampled_rows_per_step = 0;  // the most distinct rows of the first steps
  uint64_t cache_rows = 0;      // override (0: from the budget)
  double write_back_share = 0.5;
  uint64_t write_back_rows = 0;  // override (0: from the share)
  double preload_share = 0;
  uint32_t preload_horizon = 32;
  // Loads go straight into cache slots and nothing is written back (a read-only array through
  // RowBacking::ReadScatter): no io staging for a step's rows.
  bool scatter_loads = false;
  // The source's keys are distinct (a k-hop sample's nodes): a ring slot holds each key once
  // (its row and address), not keys, distinct keys and an inverse.
  bool distinct_keys = false;
  // The distinct rows of the steps in flight (run_ahead + 1 consecutive steps), measured; 0:
  // (run_ahead + 1) x keys_per_step. Steps share rows (hubs), so the sum overstates it.
  uint64_t in_flight_rows = 0;
};

struct RowMemoryPlan {
  uint64_t kv_bytes = 0;
  uint64_t io_bytes = 0;        // io staging, a step's loads and write-backs, the written bitmap
  uint64_t pipeline_bytes = 0;  // the ring of steps in flight and io staging
  uint32_t window = 0, run_ahead = 0;
  uint64_t step_rows = 0;       // distinct rows per step assumed (with a margin)
  uint64_t window_rows = 0;     // rows the index may hold for the window
  uint64_t index_rows = 0;      // RowPlanInput::index_rows (the cache's total_rows)
  uint64_t min_rows = 0;        // rows of the steps in flight
  uint64_t cache_rows = 0, cache_bytes = 0;     // with its index
  uint64_t staging_rows = 0, staging_bytes = 0;  // the write-back buffer
  uint64_t preload_rows = 0, preload_bytes = 0;  // read-ahead
  uint64_t predicted_bytes = 0;
};

Result<RowMemoryPlan> PlanRowMemory(const RowPlanInput& in);

// "" or, for a cache (storage.cache_rows) below the rows of the steps in flight, what that does:
// ", below the N rows of the steps in flight: a step that does not fit beside them waits".
std::string CacheBelowStepsNote(const RowMemoryPlan& plan);

// The row cache a plan made: its capacity, the oracle's window and the index's room for it, the
// steps in flight protected; `planner` none reads through an LRU cache.
RowCacheOptions RowCacheOptionsFor(const RowMemoryPlan& plan, PlannerKind planner);

}  // namespace sluice
