#include "cache/sharded_row_cache.h"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "common/check.h"

namespace sluice {

ShardedRowCache::ShardedRowCache(const RowCacheOptions& options, uint32_t shards) {
  SLUICE_CHECK(shards >= 1 && options.capacity_rows >= shards, "sharded row cache: %u shards for %llu rows",
               shards, static_cast<unsigned long long>(options.capacity_rows));
  SLUICE_CHECK(shards == 1 || options.kind != PlannerKind::kStatic,
               "sharded row cache: the static kind plans in one cache");
  uint32_t base = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    RowCacheOptions o = options;
    o.capacity_rows = options.capacity_rows / shards + (s < options.capacity_rows % shards ? 1 : 0);
    o.window_rows = options.window_rows / shards;
    if (shards > 1) o.total_rows = 0;  // a shard's index is hashed (Shards)
    caches_.push_back(std::make_unique<RowCache>(o));
    base_.push_back(base);
    base += static_cast<uint32_t>(o.capacity_rows);
  }
  keys_.resize(shards);
  where_.resize(shards);
  plans_.resize(shards);
  status_.resize(shards);
}

uint32_t ShardedRowCache::Shards(PlannerKind kind, uint64_t capacity_rows, uint32_t protect_steps,
                                 uint64_t max_rows, uint64_t total_rows, uint32_t threads, uint64_t window_rows) {
  if (kind == PlannerKind::kStatic || max_rows == 0 ||
      RowCacheUsesDenseIndex(kind, capacity_rows, window_rows, total_rows)) {
    return 1;
  }
  const uint64_t steps = uint64_t{protect_steps} + 1;
  for (uint32_t k = std::max<uint32_t>(threads, 1); k > 1; --k) {
    const uint64_t share = (max_rows + k - 1) / k;
    if (capacity_rows / k >= steps * (share + share / 4 + 256)) return k;
  }
  return 1;
}

uint64_t ShardedRowCache::IndexBytes(PlannerKind kind, uint64_t capacity_rows, uint32_t shards, uint64_t total_rows,
                                     uint64_t window_rows) {
  uint64_t bytes = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    const uint64_t rows = capacity_rows / shards + (s < capacity_rows % shards ? 1 : 0);
    bytes += RowCacheIndexBytes(kind, rows, window_rows / shards, shards > 1 ? 0 : total_rows);
  }
  return bytes;
}

void ShardedRowCache::MapShard(uint32_t s, RowStepPlan& out) {
  const std::vector<uint32_t>& slots = plans_[s].slots;
  for (size_t j = 0; j < slots.size(); ++j) out.slots[where_[s][j]] = base_[s] + slots[j];
  for (uint32_t& slot : plans_[s].load_slots) slot += base_[s];
  for (uint32_t& slot : plans_[s].write_slots) slot += base_[s];
}

Status ShardedRowCache::Merge(RowStepPlan& out) const {
  Status first_full = Status::Ok();
  for (uint32_t s = 0; s < shards(); ++s) {
    if (!status_[s].ok() && !caches_[s]->step_unplaced()) return status_[s];
    if (!status_[s].ok() && first_full.ok()) first_full = status_[s];
    const RowStepPlan& p = plans_[s];
    out.load_keys.insert(out.load_keys.end(), p.load_keys.begin(), p.load_keys.end());
    out.load_slots.insert(out.load_slots.end(), p.load_slots.begin(), p.load_slots.end());
    out.write_keys.insert(out.write_keys.end(), p.write_keys.begin(), p.write_keys.end());
    out.write_slots.insert(out.write_slots.end(), p.write_slots.begin(), p.write_slots.end());
  }
  return first_full;
}

void ShardedRowCache::Split(std::span<const RowKey> rows) {
  for (uint32_t s = 0; s < shards(); ++s) keys_[s].clear(), where_[s].clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t s = ShardOf(rows[i]);
    keys_[s].push_back(rows[i]);
    where_[s].push_back(static_cast<uint32_t>(i));
  }
}

void ShardedRowCache::Append(std::span<const RowKey> rows) {
  if (caches_[0]->options().kind != PlannerKind::kOracle) return;
  if (caches_.size() == 1) return caches_[0]->Append(rows);
  Split(rows);  // each shard's share in the step's order, as Plan splits it
  tbb::parallel_for(uint32_t{0}, shards(), [&](uint32_t s) { caches_[s]->Append(keys_[s]); });
}

uint64_t ShardedRowCache::appended_unplanned() const { return caches_[0]->appended_unplanned(); }

Status ShardedRowCache::Plan(std::span<const RowKey> rows, bool writes, RowStepPlan& out) {
  out.Clear();
  if (caches_.size() == 1) return caches_[0]->Plan(rows, writes, out);
  Split(rows);
  out.slots.resize(rows.size());
  tbb::parallel_for(uint32_t{0}, shards(), [&](uint32_t s) {
    status_[s] = caches_[s]->Plan(keys_[s], writes, plans_[s]);
    // (a half-placed shard's unplaced rows get their slots from PlaceAfterDrain)
    if (status_[s].ok() || caches_[s]->step_unplaced()) MapShard(s, out);
  });
  return Merge(out);
}

bool ShardedRowCache::step_unplaced() const {
  return std::any_of(caches_.begin(), caches_.end(), [](const auto& c) { return c->step_unplaced(); });
}

Status ShardedRowCache::PlaceAfterDrain(std::span<const RowKey> rows, uint32_t keep_steps, RowStepPlan& out) {
  if (caches_.size() == 1) return caches_[0]->PlaceAfterDrain(rows, keep_steps, out);
  SLUICE_CHECK(step_unplaced(), "sharded row cache: PlaceAfterDrain without a half-placed step (%zu rows)", rows.size());
  SLUICE_CHECK(rows.size() == out.slots.size(), "sharded row cache: PlaceAfterDrain with %zu rows for a plan of %zu",
               rows.size(), out.slots.size());
  out.load_keys.clear(), out.load_slots.clear(), out.write_keys.clear(), out.write_slots.clear();
  tbb::parallel_for(uint32_t{0}, shards(), [&](uint32_t s) {
    if (!caches_[s]->step_unplaced()) {
      status_[s] = Status::Ok();
      plans_[s].load_keys.clear(), plans_[s].load_slots.clear();
      plans_[s].write_keys.clear(), plans_[s].write_slots.clear();
      return;
    }
    // plans_[s] is the shard's half-placed plan: its slots completed in place.
    status_[s] = caches_[s]->PlaceAfterDrain(keys_[s], keep_steps, plans_[s]);
    if (status_[s].ok()) MapShard(s, out);
  });
  Status merged = Merge(out);
  drained_ += merged.ok() ? 1 : 0;
  return merged;
}

void ShardedRowCache::ReleaseProtected() {
  for (auto& c : caches_) c->ReleaseProtected();
}

RowCacheStats ShardedRowCache::stats() const {
  RowCacheStats total;
  for (const auto& c : caches_) {
    const RowCacheStats& s = c->stats();
    total.steps = std::max(total.steps, s.steps);
    total.accesses += s.accesses, total.hits += s.hits, total.loads += s.loads;
    total.evictions += s.evictions, total.write_backs += s.write_backs;
    total.window_evictions += s.window_evictions;
    total.drained_steps = caches_.size() == 1 ? s.drained_steps : drained_;
  }
  return total;
}

}  // namespace sluice
