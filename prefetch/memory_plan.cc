#include "prefetch/memory_plan.h"

#include <algorithm>

#include "cache/block_cache.h"
#include "cache/row_cache.h"
#include "common/units.h"
#include "prefetch/row_preloader.h"
#include "storage/file.h"
#include "storage/write_back_buffer.h"

namespace sluice {

namespace {

// Partition slots from the budget (or storage.slots), and the resident count of a buffer state.
Status PlanSlots(const PartitionPlanInput& in, PartitionMemoryPlan& p) {
  const uint32_t n = in.partitions;
  const std::string budget = FormatBytes(in.budget_bytes);
  const std::string block = FormatBytes(in.block_bytes);
  SLUICE_ASSIGN_OR_RETURN(p.slots, SlotsFromBudget(in.budget_bytes, p.reserved_bytes,
                                                   in.block_bytes, std::min<uint32_t>(2, n)));
  p.slots = std::min(p.slots, n);
  if (in.slots > 0) {
    if (in.slots > p.slots) {
      return FailedPrecondition("storage.slots = " + std::to_string(in.slots) + ", but the budget " +
                                budget + " holds " + std::to_string(p.slots) +
                                " partition slots of " + block);
    }
    p.slots = in.slots;
  }
  if (p.resident == 0) p.resident = p.slots >= n ? n : std::max<uint32_t>(2, p.slots - 1);
  if (p.resident > p.slots && in.shuffle) {
    return FailedPrecondition("train.schedule: shuffle needs all " + std::to_string(n) +
                              " partitions in memory, but the cache has " + std::to_string(p.slots) +
                              " slots of " + block +
                              "; use train.schedule: partitions or a larger storage.budget");
  }
  if (p.resident > p.slots) {
    return FailedPrecondition("storage.resident = " + std::to_string(p.resident) +
                              " partitions, but the budget " + budget + " holds " +
                              std::to_string(p.slots) + " partition slots of " + block);
  }
  return Status::Ok();
}

// The partition schedule holds two buffer states' edges (3 columns and the order as int64,
// and an int32 column's read buffer):
// the current one and the next, read while the current one trains. Slots give way to them.
Status ReserveStateEdges(const PartitionPlanInput& in, PartitionMemoryPlan& p) {
  const uint64_t most = in.largest_state_edges;
  p.edges_bytes = 2 * most * 40;
  p.reserved_bytes += p.edges_bytes;
  auto need = [&] { return p.reserved_bytes + uint64_t{p.slots} * p.slot_bytes; };
  while (need() > in.budget_bytes && in.slots == 0 && p.slots > p.resident) --p.slots;
  if (need() > in.budget_bytes) {
    return FailedPrecondition("the memory budget " + FormatBytes(in.budget_bytes) + " cannot hold " +
                              std::to_string(p.slots) + " partition slots of " +
                              FormatBytes(p.slot_bytes) + " plus the largest buffer state's " +
                              std::to_string(most) + " edges and the rest (" +
                              FormatBytes(need()) + " in all); raise storage.budget or use more "
                              "partitions");
  }
  return Status::Ok();
}

}  // namespace

Result<PartitionMemoryPlan> PlanPartitionMemory(const PartitionPlanInput& in) {
  PartitionMemoryPlan p;
  const uint32_t n = in.partitions;
  p.reserved_bytes = in.runtime_bytes + in.step_bytes + in.ring_bytes + kPartitionSlackBytes;
  p.slot_bytes = AlignUp(in.block_bytes, kDirectAlignBytes);
  p.resident = in.shuffle ? n : (in.resident > 0 ? std::min(in.resident, n) : 0);
  if (in.in_memory) {
    if (p.resident == 0) p.resident = n;
    p.slots = n;
    if (!in.shuffle) p.edges_bytes = 2 * in.largest_state_edges * 40;
    p.reserved_bytes += p.edges_bytes;
    p.predicted_bytes = p.reserved_bytes + in.table_bytes;
    return p;
  }
  SLUICE_RETURN_IF_ERROR(PlanSlots(in, p));
  if (!in.shuffle) SLUICE_RETURN_IF_ERROR(ReserveStateEdges(in, p));
  p.predicted_bytes = p.reserved_bytes + uint64_t{p.slots} * p.slot_bytes;
  return p;
}

namespace {

// Per step in the pipeline's ring: records, keys, inverse, distinct keys and row pointers.
uint64_t PerStepBytes(const RowPlanInput& in) {
  return in.step_record_bytes + in.keys_per_step * (in.distinct_keys ? 16 + 8 + 8 : 16 + 4 + 16 + 8 + 8);
}

// io: the ring's staging slots, a step's loads and write-backs, the written-rows bitmap.
uint64_t IoBytes(const RowPlanInput& in) {
  const uint64_t staging = in.scatter_loads ? 0 : 2 * in.keys_per_step * in.row_bytes;
  return in.io_queue_depth * in.io_merge_max_bytes + staging + in.total_rows / 8;
}

// The bytes of a cache of `rows` rows, its index sized for `window_rows` other rows.
uint64_t CacheBytes(const RowPlanInput& in, uint64_t rows, uint64_t window_rows) {
  return rows * in.row_bytes +
         RowCacheIndexBytes(in.oracle ? PlannerKind::kOracle : PlannerKind::kLru, rows, window_rows, in.index_rows);
}

// The most rows a cache of `bytes` holds (its index grows in steps: searched).
uint64_t RowsIn(const RowPlanInput& in, uint64_t bytes, uint64_t window_rows) {
  uint64_t lo = 0, hi = bytes / in.row_bytes + 1;
  while (lo + 1 < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (CacheBytes(in, mid, window_rows) <= bytes ? lo : hi) = mid;
  }
  return lo;
}

// Reading ahead (row file; with either planner: the horizon lists the coming steps' rows from the
// sample file, whatever the cache plans): its share holds the rows read ahead, the horizon's row
// lists and the bitmap of cached rows.
void PlanPreload(const RowPlanInput& in, uint64_t rows_memory, RowMemoryPlan& p) {
  const bool allowed = !in.rocksdb && !in.raw_ids && in.preload_share > 0 &&
                       in.total_rows < (uint64_t{1} << 32);
  if (!allowed) return;
  const uint64_t fixed = RowPreloader::HorizonBytes(in.preload_horizon, p.step_rows) + in.total_rows / 8;
  // Never the bytes the cache needs for the steps in flight.
  const uint64_t cache_min = CacheBytes(in, p.min_rows, p.window_rows);
  const uint64_t spare = rows_memory > cache_min ? rows_memory - cache_min : 0;
  const auto memory = std::min(spare, static_cast<uint64_t>(static_cast<double>(rows_memory) * in.preload_share));
  if (memory <= fixed) return;
  p.preload_rows = std::min<uint64_t>({(memory - fixed) / RowPreloader::BytesPerRow(in.row_bytes),
                                       in.total_rows, (uint64_t{1} << 31) - 1});
  // Its share, or what its rows take when the tables are smaller than the share.
  if (p.preload_rows > 0) {
    p.preload_bytes = std::min(memory, fixed + p.preload_rows * RowPreloader::BytesPerRow(in.row_bytes));
  }
}

// The cache's rows and, for a row file, the write-back buffer's (its share, once the cache
// holds the steps in flight).
void PlanRows(const RowPlanInput& in, uint64_t rows_left, uint64_t rows_memory, RowMemoryPlan& p) {
  const bool stage = !in.rocksdb && in.write_back_share > 0;
  uint64_t capacity = in.cache_rows;
  if (capacity == 0) {
    const auto staging_memory =
        stage ? static_cast<uint64_t>(static_cast<double>(rows_memory) * in.write_back_share) : 0;
    capacity = std::max(RowsIn(in, rows_left > staging_memory ? rows_left - staging_memory : 0, p.window_rows),
                        std::min(p.min_rows, RowsIn(in, rows_left, p.window_rows)));
  }
  if (!in.raw_ids) capacity = std::min(capacity, std::max(in.total_rows, p.min_rows));
  const uint64_t cache_bytes = CacheBytes(in, capacity, p.window_rows);
  uint64_t staging = 0;
  if (stage && capacity < in.total_rows && rows_left > cache_bytes) {
    staging = (rows_left - cache_bytes) / WriteBackBuffer::BytesPerRow(in.row_bytes);
  }
  if (stage && in.write_back_rows > 0) staging = in.write_back_rows;
  // No more than the tables' rows (nothing to gain) nor than the buffer's 31-bit slots.
  if (stage) staging = std::min({staging, in.total_rows, (uint64_t{1} << 31) - 1});
  p.cache_rows = capacity;
  p.cache_bytes = cache_bytes;
  p.staging_rows = staging;
  p.staging_bytes = staging * WriteBackBuffer::BytesPerRow(in.row_bytes);
}

}  // namespace

Result<RowMemoryPlan> PlanRowMemory(const RowPlanInput& in) {
  RowMemoryPlan p;
  p.io_bytes = IoBytes(in);
  p.kv_bytes = in.rocksdb ? in.kv_bytes : 0;
  p.run_ahead = in.run_ahead;
  p.index_rows = in.index_rows;
  const uint64_t per_step = PerStepBytes(in);
  const uint64_t fixed = in.runtime_bytes + in.model_bytes + in.step_bytes + p.io_bytes + p.kv_bytes;
  const uint32_t d = in.run_ahead;
  p.min_rows = in.in_flight_rows > 0 ? in.in_flight_rows : MinCapacityRows(0, d, in.keys_per_step);
  // Rows pending in the window: measured on the first steps, with a margin (the index grows if
  // later steps have more).
  p.step_rows = std::min(in.keys_per_step, in.sampled_rows_per_step + in.sampled_rows_per_step / 4);
  // The steps in flight's rows with the index sized as the cache will be: for the window's rows
  // and the planned step's ((w + 1) steps), so a window that fits here leaves the cache its rows.
  auto need = [&](uint64_t w) {
    return fixed + (w + d + 2) * per_step + CacheBytes(in, p.min_rows, (w + 1) * p.step_rows);
  };
  if (need(0) > in.budget_bytes && in.cache_rows == 0) {
    return InvalidArgument("storage.budget " + FormatBytes(in.budget_bytes) +
                           " cannot hold one step's working set: a step of " +
                           std::to_string(in.keys_per_step) + " row uses with run_ahead " +
                           std::to_string(d) + " needs at least " +
                           FormatBytes(need(0)) + " (raise the budget or lower train.batch)");
  }
  uint64_t window = in.oracle ? in.window : 0;
  while (window > 0 && need(window) > in.budget_bytes) --window;  // the window's ring must fit too
  p.window = static_cast<uint32_t>(window);
  p.pipeline_bytes = (window + d + 2) * per_step + p.io_bytes;
  const uint64_t reserved = fixed + (window + d + 2) * per_step;
  const uint64_t rows_memory = in.budget_bytes > reserved ? in.budget_bytes - reserved : 0;
  p.window_rows = (window + 1) * p.step_rows;  // the window's and the planned step's
  PlanPreload(in, rows_memory, p);
  PlanRows(in, rows_memory - p.preload_bytes, rows_memory, p);
  // A cache set below the steps in flight still runs (a step that does not fit beside them waits
  // for them: RowCache::PlaceAfterDrain), as long as it holds a step, and with run-ahead the
  // previous one too (compute may read a step ahead while it holds the one before).
  const uint64_t one_step = in.sampled_rows_per_step > 0 ? in.sampled_rows_per_step : in.keys_per_step;
  const uint64_t floor = std::min(d > 0 ? 2 * one_step : one_step, p.min_rows);
  if (floor > p.cache_rows) {
    return InvalidArgument("storage.cache_rows " + std::to_string(p.cache_rows) + " cannot hold " +
                           (d > 0 ? "two steps' " : "one step's ") + std::to_string(floor) + " rows" +
                           (d > 0 ? " (with run-ahead compute may hold one step while it reads the next)" : ""));
  }
  // RocksDB's caches fill only as far as the data: at most the rows the tables can hold (each
  // with its key and block overhead), in the block cache and in the two memtables.
  const uint64_t kv_used = std::min(p.kv_bytes, 3 * in.max_rows * (uint64_t{in.row_bytes} + 32));
  p.predicted_bytes = reserved - p.kv_bytes + kv_used + p.cache_bytes + p.staging_bytes + p.preload_bytes;
  return p;
}

std::string CacheBelowStepsNote(const RowMemoryPlan& plan) {
  if (plan.cache_rows >= plan.min_rows) return "";
  return ", below the " + std::to_string(plan.min_rows) +
         " rows of the steps in flight: a step that does not fit beside them waits for them";
}

RowCacheOptions RowCacheOptionsFor(const RowMemoryPlan& plan, PlannerKind planner) {
  RowCacheOptions co;
  co.kind = planner == PlannerKind::kNone ? PlannerKind::kLru : planner;
  co.capacity_rows = plan.cache_rows;
  co.window_steps = plan.window;
  co.protect_steps = plan.run_ahead;
  co.window_rows = plan.window_rows;
  co.total_rows = plan.index_rows;
  return co;
}

}  // namespace sluice
