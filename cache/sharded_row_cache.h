#pragma once
// ShardedRowCache: a RowCache cut into independent caches by key hash, each with its own range
// of slots, whose plans for a step run in parallel (a TBB task a shard). A step's rows fall
// about evenly among the shards, so planning a step of n rows on K cores takes about n / K of
// one cache's time: the device row cache's plan (one cache, one thread) was most of the host's
// share of a GPU step (DLRM at batch 65536: about half a million distinct rows a step).
//
//   ShardedRowCache cache(options, ShardedRowCache::Shards(capacity, protect, max_rows, total, cores));
//   SLUICE_RETURN_IF_ERROR(cache.Plan(rows, /*writes=*/false, plan));  // slots in [0, capacity)
//
// Each shard evicts its own least recently used rows, so which rows stay can differ from one
// RowCache's choice; what a step is given (every row in a slot, loads named) is the same
// contract. The oracle's window is appended shard by shard (each shard sees its share of every
// step, in the step's order, as Plan splits it), so a shard keeps the rows its share of the next
// steps uses as one oracle would. The static kind's pinned rows would need each shard's share of
// them planned, and are left to one cache.
//
// Thread safety: none (one planner thread; the shards' tasks run inside Plan).

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/row_cache.h"
#include "common/status.h"

namespace sluice {

class ShardedRowCache {
 public:
  // options.capacity_rows cut into `shards` caches (the first capacity % shards take one more).
  ShardedRowCache(const RowCacheOptions& options, uint32_t shards);

  // How many shards a cache may be cut into: at most `threads`, and each shard must hold its
  // share of the protect_steps + 1 steps in flight (steps of at most max_rows rows) a quarter
  // over, plus 256 rows, so that no step fails for the hash's unevenness. 1 for the static
  // kind, with a dense index (total_rows small enough that rows are indexed by id in 8 bytes,
  // 12 with the oracle's counts, which is faster still; window_rows as RowCacheOptions'), and
  // when max_rows is 0 (not known). Shards' indexes are hashed.
  static uint32_t Shards(PlannerKind kind, uint64_t capacity_rows, uint32_t protect_steps, uint64_t max_rows,
                         uint64_t total_rows, uint32_t threads, uint64_t window_rows = 0);
  // The bookkeeping's RAM (RowCacheIndexBytes for each shard, each with its share of window_rows).
  static uint64_t IndexBytes(PlannerKind kind, uint64_t capacity_rows, uint32_t shards, uint64_t total_rows,
                             uint64_t window_rows = 0);

  // RowCache::Append (the oracle; the other kinds ignore it): the next step's distinct rows.
  void Append(std::span<const RowKey> rows);
  uint64_t appended_unplanned() const;

  // RowCache::Plan for a step's distinct rows: out.slots (in the rows' order) in [0, capacity);
  // loads and write-backs shard by shard. A shard that cannot place its rows fails the step;
  // when only for want of a slot (step_unplaced), out holds the loads and write-backs of the
  // rows the shards did place.
  Status Plan(std::span<const RowKey> rows, bool writes, RowStepPlan& out);
  // RowCache::PlaceAfterDrain in every shard that left the step half placed: the same rows and
  // the same out as the failed Plan; out.slots completed, out's loads and write-backs those of
  // the rows placed now.
  bool step_unplaced() const;
  Status PlaceAfterDrain(std::span<const RowKey> rows, uint32_t keep_steps, RowStepPlan& out);
  // Every planned step has computed (RowCache::ReleaseProtected).
  void ReleaseProtected();

  uint32_t shards() const { return static_cast<uint32_t>(caches_.size()); }
  // The shards' statistics added up.
  RowCacheStats stats() const;

 private:
  uint32_t ShardOf(const RowKey& k) const {
    return static_cast<uint32_t>((RowCache::Hash(k) & 0xFFFFFFFFull) * caches_.size() >> 32);
  }

  // A step's rows into keys_ and where_, shard by shard, in the step's order.
  void Split(std::span<const RowKey> rows);
  // Shard s's plan into out: its rows' slots, its loads and write-backs in the shared range.
  void MapShard(uint32_t s, RowStepPlan& out);
  // Appends the shards' loads and write-backs (mapped) to out; the first failure's status.
  Status Merge(RowStepPlan& out) const;

  std::vector<std::unique_ptr<RowCache>> caches_;
  std::vector<uint32_t> base_;                // each shard's first slot
  std::vector<std::vector<RowKey>> keys_;     // a step's rows, by shard
  std::vector<std::vector<uint32_t>> where_;  // and their places in the step
  std::vector<RowStepPlan> plans_;
  std::vector<Status> status_;
  uint64_t drained_ = 0;  // steps PlaceAfterDrain placed (in shards)
};

}  // namespace sluice
