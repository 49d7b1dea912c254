// RowCache: plans of random Zipf-skewed steps are replayed against a plain model of the arena
// and the backing store: every step's rows are resident in distinct slots, loads land in free
// slots, only dirty rows are written back, evictions respect run-ahead protection and (oracle)
// never touch a row used within the window, and after a final flush the store holds exactly
// what training every row in RAM gives. Also: the oracle loads fewer rows than LRU on a skewed
// trace, and a cache too small for the window fails with a clear error.

#include "cache/row_cache.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <functional>
#include <map>
#include <set>
#include <random>

#include <gtest/gtest.h>

namespace sluice {
namespace {

using Steps = std::vector<std::vector<RowKey>>;

Steps ZipfSteps(int steps, int per_step, uint32_t tables, uint64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> cdf(vocab);
  double sum = 0;
  for (uint64_t r = 0; r < vocab; ++r) cdf[r] = sum += 1.0 / std::pow(double(r + 1), 1.05);
  std::uniform_real_distribution<double> u(0, sum);
  Steps out;
  for (int t = 0; t < steps; ++t) {
    std::vector<RowKey> rows;
    for (int i = 0; i < per_step; ++i) {
      const uint64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      const RowKey k{rank * 7919 % vocab, static_cast<uint32_t>(rng() % tables)};
      if (std::find(rows.begin(), rows.end(), k) == rows.end()) rows.push_back(k);
    }
    out.push_back(rows);
  }
  return out;
}

uint64_t Init(const RowKey& k) { return k.id * 1000 + k.table; }

struct Replay {
  RowCacheStats stats;
  std::vector<uint64_t> loads;  // per step
};

// Replays `steps` (every third step reads only) and checks every invariant on the way.
Replay RunModel(const Steps& steps, PlannerKind kind, uint32_t window, uint32_t protect,
                uint64_t capacity, const std::vector<uint64_t>* pinned = nullptr, uint64_t total_rows = 0,
                const std::function<void(RowCacheOptions&)>& more = {}) {
  RowCacheOptions o;
  o.kind = kind;
  o.capacity_rows = capacity;
  o.window_steps = window;
  o.protect_steps = protect;
  o.pinned = pinned;
  o.total_rows = total_rows;
  if (more) more(o);
  RowCache cache(o);
  Replay replay;
  if (total_rows != 0 && total_rows <= 2 * cache.index_slots()) {
    EXPECT_EQ(cache.index_slots(), total_rows);
  }
  const uint32_t w = kind == PlannerKind::kOracle ? window : 0;
  uint64_t max_rows = 0;
  for (const auto& s : steps) max_rows = std::max<uint64_t>(max_rows, s.size());
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> disk, truth;
  std::vector<uint64_t> arena(capacity, 0);
  std::vector<int64_t> owner(capacity, -1);  // index into keys_seen, -1 = free
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> slot_of;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> last_use;
  auto id = [](const RowKey& k) { return std::make_pair(k.table, k.id); };
  uint64_t appended = 0;
  RowStepPlan plan;
  for (uint64_t t = 0; t < steps.size(); ++t) {
    while (appended < steps.size() && appended <= t + w) cache.Append(steps[appended++]);
    const bool writes = t % 3 != 2;
    Status s = cache.Plan(steps[t], writes, plan);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return {};
    replay.loads.push_back(plan.load_keys.size());
    for (size_t i = 0; i < plan.write_keys.size(); ++i) {
      const auto k = id(plan.write_keys[i]);
      EXPECT_EQ(slot_of.count(k), 1u);
      EXPECT_EQ(slot_of[k], plan.write_slots[i]);
      disk[k] = arena[plan.write_slots[i]];
    }
    // Evicted rows: all rows that lost their slot (loads reuse their slots).
    std::set<uint32_t> loaded(plan.load_slots.begin(), plan.load_slots.end());
    for (auto it = slot_of.begin(); it != slot_of.end();) {
      if (loaded.count(it->second) != 0) {
        const auto k = it->first;
        EXPECT_LE(last_use[k] + protect + 1, t) << "evicted a protected row at step " << t;
        if (kind == PlannerKind::kOracle && capacity >= MinCapacityRows(w, protect, max_rows)) {
          for (uint64_t u = t + 1; u <= t + w && u < steps.size(); ++u) {
            for (const RowKey& r : steps[u]) EXPECT_FALSE(id(r) == k) << "evicted a row used within the window";
          }
        }
        // A dirty row must have been written back now: its disk value equals the arena's.
        auto d = disk.find(k);
        const uint64_t on_disk = d == disk.end() ? Init(RowKey{k.second, k.first}) : d->second;
        EXPECT_EQ(on_disk, arena[it->second]) << "evicted a dirty row without writing it back";
        owner[it->second] = -1;
        it = slot_of.erase(it);
      } else {
        ++it;
      }
    }
    for (size_t i = 0; i < plan.load_keys.size(); ++i) {
      const uint32_t slot = plan.load_slots[i];
      EXPECT_EQ(owner[slot], -1) << "load into an occupied slot";
      const auto k = id(plan.load_keys[i]);
      auto d = disk.find(k);
      arena[slot] = d == disk.end() ? Init(plan.load_keys[i]) : d->second;
      slot_of[k] = slot;
      owner[slot] = 1;
    }
    std::set<uint32_t> used;
    for (size_t i = 0; i < steps[t].size(); ++i) {
      const auto k = id(steps[t][i]);
      EXPECT_EQ(slot_of.at(k), plan.slots[i]);
      EXPECT_TRUE(used.insert(plan.slots[i]).second) << "two rows in one slot";
      if (!truth.count(k)) truth[k] = Init(steps[t][i]);
      EXPECT_EQ(arena[plan.slots[i]], truth[k]) << "stale row at step " << t;
      if (writes) {
        arena[plan.slots[i]] += t + 1;
        truth[k] += t + 1;
      }
      last_use[k] = t;
    }
  }
  std::vector<RowKey> keys;
  std::vector<uint32_t> slots;
  size_t cursor = 0;
  while (cache.DirtyRows(cursor, 7, keys, slots)) {  // in small batches: each must be whole
    EXPECT_LE(keys.size(), 7u);
    for (size_t i = 0; i < keys.size(); ++i) disk[id(keys[i])] = arena[slots[i]];
  }
  EXPECT_FALSE(cache.DirtyRows(cursor, 7, keys, slots));
  cache.MarkAllClean();
  for (const auto& [k, v] : truth) {
    auto d = disk.find(k);
    EXPECT_EQ(d == disk.end() ? Init(RowKey{k.second, k.first}) : d->second, v);
  }
  replay.stats = cache.stats();
  return replay;
}

TEST(RowCache, OracleReplayMatchesModel) {
  const Steps steps = ZipfSteps(400, 60, 3, 500, 1);
  for (uint32_t protect : {0u, 1u, 4u}) {
    for (uint32_t window : {0u, 3u, 16u}) {
      RunModel(steps, PlannerKind::kOracle, window, protect,
               MinCapacityRows(window, protect, 60) + 37);
    }
  }
}

TEST(RowCache, OracleWithAWindowLargerThanTheCacheStaysExact) {
  const Steps steps = ZipfSteps(300, 60, 3, 2000, 4);
  for (uint32_t protect : {0u, 2u}) {
    const Replay r = RunModel(steps, PlannerKind::kOracle, 32, protect, MinCapacityRows(0, protect, 60) + 20);
    EXPECT_GT(r.stats.window_evictions, 0u);
  }
}

TEST(RowCache, StaticNeverEvictsAPinnedRowAndReplaysTheModel) {
  const Steps steps = ZipfSteps(300, 60, 3, 500, 2);
  std::vector<uint64_t> pinned(500 / 64 + 1, 0);
  for (uint64_t id : {0, 1, 2, 3, 5, 8, 13, 21}) pinned[id / 64] |= uint64_t{1} << id;
  RowCacheOptions o;
  o.kind = PlannerKind::kStatic;
  o.capacity_rows = MinCapacityRows(0, 1, 60) + 8;
  o.protect_steps = 1;
  o.pinned = &pinned;
  RowCache cache(o);
  std::map<uint64_t, int> pinned_loads;
  RowStepPlan plan;
  uint64_t loads = 0;
  for (const auto& step : steps) {
    ASSERT_TRUE(cache.Plan(step, /*writes=*/false, plan).ok());
    for (const RowKey& k : plan.load_keys) {
      if (k.table == 0 && k.id < 64 && (pinned[0] >> k.id & 1)) ++pinned_loads[k.id];
    }
    loads += plan.load_keys.size();
  }
  EXPECT_FALSE(pinned_loads.empty());
  for (const auto& [id, n] : pinned_loads) EXPECT_EQ(n, 1) << "pinned row " << id << " loaded again";
  EXPECT_GT(cache.stats().evictions, 0u);  // the other rows pass through
  // The replay with writes keeps every row's value (write-backs before reuse).
  RunModel(steps, PlannerKind::kStatic, 0, 2, MinCapacityRows(0, 2, 60) + 8, &pinned);
}

// The static planner's pins leave room for training's steps only. A pass with larger steps
// (evaluation's) fails while they stay; with pinning off it evicts them instead, and with
// pinning on again the pinned rows stay resident once a step has loaded them back.
TEST(RowCache, StaticPinsYieldToALargerPassAndComeBack) {
  std::vector<uint64_t> pinned(1000 / 64 + 1, 0);
  for (uint64_t id = 0; id < 40; ++id) pinned[id / 64] |= uint64_t{1} << (id % 64);
  auto ids = [](uint64_t first, uint64_t n, std::vector<RowKey> keys = {}) {
    for (uint64_t i = 0; i < n; ++i) keys.push_back(RowKey{first + i, 0});
    return keys;
  };
  const std::vector<RowKey> a = ids(100, 20, ids(0, 40)), b = ids(200, 60), c = ids(300, 90), d = ids(400, 60),
                            e = ids(500, 60);
  RowCacheOptions o;
  o.kind = PlannerKind::kStatic;
  o.capacity_rows = 100;
  o.pinned = &pinned;
  RowStepPlan plan;
  auto pinned_loads = [&]() {
    uint64_t n = 0;
    for (const RowKey& k : plan.load_keys) n += k.id < 40;
    return n;
  };
  // With the hashed index and with the slim index by id (ids below 1000).
  for (uint64_t total : {uint64_t{0}, uint64_t{1000}}) {
    SCOPED_TRACE("total_rows " + std::to_string(total));
    o.total_rows = total;
    {
      RowCache cache(o);
      ASSERT_TRUE(cache.Plan(a, false, plan).ok());
      ASSERT_TRUE(cache.Plan(b, false, plan).ok());
      const Status full = cache.Plan(c, false, plan);  // 40 pinned + 90 > 100
      ASSERT_FALSE(full.ok());
      EXPECT_NE(full.ToString().find("is full"), std::string::npos) << full.ToString();
    }
    RowCache cache(o);
    ASSERT_TRUE(cache.Plan(a, false, plan).ok());
    EXPECT_EQ(pinned_loads(), 40u);
    ASSERT_TRUE(cache.Plan(b, false, plan).ok());
    cache.ReleaseProtected();
    cache.SetPinning(false);
    ASSERT_TRUE(cache.Plan(c, false, plan).ok());
    EXPECT_EQ(plan.load_keys.size(), 90u);
    cache.ReleaseProtected();
    cache.SetPinning(true);
    ASSERT_TRUE(cache.Plan(a, false, plan).ok());
    const uint64_t reloaded = pinned_loads();
    EXPECT_GT(reloaded, 0u);  // evicted by the larger pass, loaded again
    EXPECT_LT(reloaded, 40u);  // the oldest went first: some stayed
    ASSERT_TRUE(cache.Plan(d, false, plan).ok());
    ASSERT_TRUE(cache.Plan(e, false, plan).ok());
    ASSERT_TRUE(cache.Plan(a, false, plan).ok());
    EXPECT_EQ(pinned_loads(), 0u);  // pinned again: 120 other rows passed through without evicting one
    EXPECT_EQ(plan.load_keys.size(), 20u);
  }
}

TEST(RowCache, LruReplayMatchesModel) {
  const Steps steps = ZipfSteps(400, 60, 3, 500, 2);
  for (uint32_t protect : {0u, 2u}) {
    RunModel(steps, PlannerKind::kLru, 0, protect, MinCapacityRows(0, protect, 60) + 5);
  }
}

// Keys of one table below total_rows: an index by id (when it is at most twice the hashed one)
// replays the same model for every planner, with evictions and write-backs; and a cache that
// holds every row never evicts one and loads each row once.
TEST(RowCache, DenseIndexAndEveryRowFittingReplayTheModel) {
  const uint64_t vocab = 700;
  const Steps steps = ZipfSteps(300, 60, 1, vocab, 5);
  std::vector<uint64_t> pinned(vocab / 64 + 1, 0);
  for (uint64_t id : {0, 7, 70, 77, 700 - 1}) pinned[id / 64] |= uint64_t{1} << (id % 64);
  const uint64_t small = MinCapacityRows(4, 2, 60) + 9;  // 429 rows: 1024 index slots, dense
  EXPECT_LT(small, vocab);
  const Replay lru = RunModel(steps, PlannerKind::kLru, 0, 2, small, nullptr, vocab);
  EXPECT_EQ(lru.stats.loads, RunModel(steps, PlannerKind::kLru, 0, 2, small).stats.loads);
  EXPECT_GT(lru.stats.evictions, 0u);
  RunModel(steps, PlannerKind::kOracle, 4, 2, small, nullptr, vocab);
  RunModel(steps, PlannerKind::kStatic, 0, 2, small, &pinned, vocab);
  std::set<uint64_t> distinct;
  for (const auto& step : steps) {
    for (const RowKey& k : step) distinct.insert(k.id);
  }
  for (PlannerKind kind : {PlannerKind::kLru, PlannerKind::kOracle}) {
    const Replay all = RunModel(steps, kind, kind == PlannerKind::kOracle ? 4 : 0, 2, vocab, nullptr, vocab);
    EXPECT_EQ(all.stats.evictions, 0u);
    EXPECT_EQ(all.stats.loads, distinct.size());
  }
  // The memory plan's figure: no eviction candidates when every row fits.
  EXPECT_LT(RowCacheIndexBytes(PlannerKind::kLru, vocab, 0, vocab), RowCacheIndexBytes(PlannerKind::kLru, vocab, 0));
}

// An index by id takes 8 bytes a row (12 with the oracle's counts), so it serves tables 4 (2.7)
// times larger than the 32-byte entries allow; every kind plans exactly what the hashed index
// plans (the same slots, loads and write-backs, step by step: a row's uses restart when it
// leaves, as an erased hashed entry's do).
TEST(RowCache, SlimIndexByIdPlansAsTheHashedIndex) {
  const uint64_t vocab = 3000;
  const Steps steps = ZipfSteps(400, 60, 1, vocab, 9);
  const uint64_t capacity = MinCapacityRows(0, 2, 60) + 11;  // 1024 hashed slots
  std::vector<uint64_t> pinned(vocab / 64 + 1, 0);
  for (uint64_t id = 0; id < 40; ++id) pinned[id * 13 / 64] |= uint64_t{1} << (id * 13 % 64);
  EXPECT_TRUE(RowCacheUsesDenseIndex(PlannerKind::kLru, capacity, 0, vocab));
  EXPECT_TRUE(RowCacheUsesDenseIndex(PlannerKind::kOracle, capacity, 0, vocab));  // 12 bytes a row
  EXPECT_TRUE(RowCacheUsesDenseIndex(PlannerKind::kLru, capacity, 0, 2 * vocab));
  EXPECT_FALSE(RowCacheUsesDenseIndex(PlannerKind::kOracle, capacity, 0, 2 * vocab));
  for (PlannerKind kind : {PlannerKind::kLru, PlannerKind::kStatic, PlannerKind::kOracle}) {
    const bool oracle = kind == PlannerKind::kOracle;
    RowCacheOptions o;
    o.kind = kind;
    o.capacity_rows = capacity;
    o.protect_steps = 2;
    o.window_steps = oracle ? 3 : 0;  // (the oracle's index grows for the window: not sized for it)
    o.pinned = kind == PlannerKind::kStatic ? &pinned : nullptr;
    RowCache hashed(o);
    o.total_rows = vocab;
    RowCache slim(o);
    const uint64_t entry_bytes = oracle ? 12 : 8;
    EXPECT_EQ(slim.index_bytes(), vocab * entry_bytes);
    EXPECT_EQ(RowCacheIndexBytes(kind, capacity, 0, vocab) - RowCacheIndexBytes(kind, capacity, 0),
              vocab * entry_bytes - hashed.index_bytes());
    RowStepPlan a, b;
    size_t appended = 0;
    for (size_t t = 0; t < steps.size(); ++t) {
      for (; oracle && appended < steps.size() && appended <= t + 3; ++appended) {
        hashed.Append(steps[appended]);
        slim.Append(steps[appended]);
      }
      const bool writes = t % 3 != 2;
      ASSERT_TRUE(hashed.Plan(steps[t], writes, a).ok());
      ASSERT_TRUE(slim.Plan(steps[t], writes, b).ok());
      ASSERT_EQ(a.slots, b.slots) << "step " << t;
      ASSERT_EQ(a.load_keys, b.load_keys) << "step " << t;
      ASSERT_EQ(a.load_slots, b.load_slots) << "step " << t;
      ASSERT_EQ(a.write_keys, b.write_keys) << "step " << t;
      ASSERT_EQ(a.write_slots, b.write_slots) << "step " << t;
    }
    EXPECT_GT(slim.stats().write_backs, 0u);
    // The flush finds the same dirty rows (in id order against the hash's order).
    auto dirty = [](const RowCache& c) {
      std::map<uint64_t, uint32_t> rows;
      std::vector<RowKey> keys;
      std::vector<uint32_t> slots;
      size_t cursor = 0;
      while (c.DirtyRows(cursor, 5, keys, slots)) {
        for (size_t i = 0; i < keys.size(); ++i) rows[keys[i].id] = slots[i];
      }
      return rows;
    };
    EXPECT_FALSE(dirty(slim).empty());
    EXPECT_EQ(dirty(slim), dirty(hashed));
    slim.MarkAllClean();
    EXPECT_TRUE(dirty(slim).empty());
  }
  // The model replay (values, protection, write-backs) through the slim index.
  RunModel(steps, PlannerKind::kLru, 0, 2, capacity, nullptr, vocab);
  RunModel(steps, PlannerKind::kStatic, 0, 2, capacity, &pinned, vocab);
  RunModel(steps, PlannerKind::kOracle, 3, 2, MinCapacityRows(3, 2, 60) + 11, nullptr, vocab);
}

TEST(RowCache, OracleLoadsFewerRowsThanLru) {
  const Steps steps = ZipfSteps(600, 200, 4, 5000, 3);
  const uint64_t capacity = 3000;
  const Replay oracle = RunModel(steps, PlannerKind::kOracle, 8, 1, capacity);
  const Replay lru = RunModel(steps, PlannerKind::kLru, 0, 1, capacity);
  EXPECT_EQ(oracle.stats.accesses, lru.stats.accesses);
  EXPECT_LT(oracle.stats.loads, lru.stats.loads);
  EXPECT_EQ(oracle.stats.hits + oracle.stats.loads, oracle.stats.accesses);
}

// Two passes over the same steps (an epoch read twice in one order): with the first steps'
// rows kept over the others (at most half the cache), the second pass's first steps load far
// fewer rows than with the oracle's usual order, which evicts them for rows used more often;
// the replay's invariants (exact rows, write-backs, window, protection) hold either way.
TEST(RowCache, KeptRowsOfTheFirstStepsSurviveThePass) {
  const Steps pass = ZipfSteps(300, 200, 4, 20000, 5);
  Steps steps = pass;
  steps.insert(steps.end(), pass.begin(), pass.end());
  const uint64_t capacity = 4000;
  const std::vector<uint64_t> offsets = {0, 20000, 40000, 60000};
  std::vector<uint64_t> keep(80000 / 64, 0);
  std::set<std::pair<uint32_t, uint64_t>> kept;
  uint64_t head = 0;  // the first steps whose rows fit half the cache
  for (; head < pass.size(); ++head) {
    std::set<std::pair<uint32_t, uint64_t>> more = kept;
    for (const RowKey& k : pass[head]) more.insert({k.table, k.id});
    if (more.size() > capacity / 2) break;
    kept = std::move(more);
  }
  ASSERT_GE(head, 5u);
  for (const auto& [table, id] : kept) keep[(offsets[table] + id) / 64] |= uint64_t{1} << ((offsets[table] + id) % 64);
  auto with_keep = [&](RowCacheOptions& o) {
    o.keep = &keep;
    o.keep_offsets = &offsets;
  };
  const Replay plain = RunModel(steps, PlannerKind::kOracle, 4, 1, capacity);
  const Replay keeping = RunModel(steps, PlannerKind::kOracle, 4, 1, capacity, nullptr, 0, with_keep);
  auto second_head = [&](const Replay& r) {
    uint64_t n = 0;
    for (uint64_t t = pass.size(); t < pass.size() + head; ++t) n += r.loads.at(t);
    return n;
  };
  RecordProperty("second_pass_head_loads_kept", std::to_string(second_head(keeping)));
  RecordProperty("second_pass_head_loads_plain", std::to_string(second_head(plain)));
  std::cout << "second pass, first " << head << " steps: " << second_head(keeping) << " loads kept, "
            << second_head(plain) << " plain\n";
  EXPECT_LT(2 * second_head(keeping), second_head(plain));
  // Kept rows only change the order of evictions: LRU ignores them.
  const Replay lru = RunModel(steps, PlannerKind::kLru, 0, 1, capacity);
  const Replay lru_keep = RunModel(steps, PlannerKind::kLru, 0, 1, capacity, nullptr, 0, with_keep);
  EXPECT_EQ(lru.loads, lru_keep.loads);
}

// The index is sized once for capacity + window_rows entries: a full cache planning a step of
// new rows inserts them before evicting, so window_rows must cover one step besides the
// window, or the index doubles (memory the plan did not count).
uint64_t IndexSlotsAfter(const Steps& steps, PlannerKind kind, uint32_t window, uint64_t window_rows) {
  RowCacheOptions o;
  o.kind = kind;
  o.capacity_rows = 3000;
  o.window_steps = window;
  o.protect_steps = 1;
  o.window_rows = window_rows;
  RowCache cache(o);
  RowStepPlan plan;
  const uint32_t w = kind == PlannerKind::kOracle ? window : 0;
  size_t appended = 0;
  for (size_t t = 0; t < steps.size(); ++t) {
    while (appended < steps.size() && appended <= t + w) cache.Append(steps[appended++]);
    EXPECT_TRUE(cache.Plan(steps[t], true, plan).ok());
    cache.ReleaseProtected();
  }
  return cache.index_slots();
}

TEST(RowCache, IndexSizedForTheWindowAndOneStepNeverGrows) {
  const Steps steps = ZipfSteps(400, 200, 4, 20000, 5);
  uint64_t most = 0;
  for (const auto& s : steps) most = std::max<uint64_t>(most, s.size());
  for (auto [kind, window] : {std::pair{PlannerKind::kLru, 0u}, std::pair{PlannerKind::kOracle, 4u}}) {
    RowCacheOptions o;
    o.capacity_rows = 3000;
    o.window_rows = (window + 1) * most;
    const uint64_t planned = RowCache(o).index_slots();
    EXPECT_EQ(IndexSlotsAfter(steps, kind, window, (window + 1) * most), planned);
  }
  // Without the step's share the LRU cache's index outgrows its plan.
  RowCacheOptions o;
  o.capacity_rows = 3000;
  EXPECT_GT(IndexSlotsAfter(steps, PlannerKind::kLru, 0, 0), RowCache(o).index_slots());
}

TEST(RowCache, TooSmallForTheWindowFails) {
  RowStepPlan plan;
  RowCache tiny(RowCacheOptions{PlannerKind::kOracle, 10, 2, 0});
  std::vector<RowKey> big;
  for (uint64_t i = 0; i < 11; ++i) big.push_back(RowKey{i, 1});
  tiny.Append(big);
  std::vector<RowKey> later = {RowKey{50, 1}};
  tiny.Append(later);  // a step behind it in the window
  Status s = tiny.Plan(big, true, plan);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("row cache of 10 rows is full"), std::string::npos) << s.message();
  // The failed pass can be dropped (it once left the window out of step and the drop stopped
  // the process on a check) and the cache serves another pass of steps that fit.
  tiny.DropWindow();
  tiny.ReleaseProtected();
  std::vector<RowKey> small = {RowKey{1, 1}, RowKey{60, 1}};
  tiny.Append(small);
  ASSERT_TRUE(tiny.Plan(small, false, plan).ok());
  EXPECT_EQ(plan.slots.size(), 2u);
}

// A step that does not fit beside the steps in flight is left half placed; once they have
// computed, PlaceAfterDrain gives its other rows their slots (evicting those steps' rows, dirty
// ones written back), and the next step plans as usual. With the hashed and the dense index.
TEST(RowCache, HalfPlacedStepTakesTheComputedStepsSlots) {
  auto ids = [](uint64_t first, uint64_t n) {
    std::vector<RowKey> keys;
    for (uint64_t i = 0; i < n; ++i) keys.push_back(RowKey{first + i, 0});
    return keys;
  };
  for (PlannerKind kind : {PlannerKind::kOracle, PlannerKind::kLru}) {
    for (uint64_t total : {uint64_t{0}, uint64_t{1000}}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(kind)) + " total_rows " + std::to_string(total));
      RowCacheOptions o;
      o.kind = kind;
      o.capacity_rows = 100;
      o.protect_steps = 2;
      o.total_rows = total;
      o.window_rows = 200;
      RowCache cache(o);
      const std::vector<RowKey> a = ids(0, 40), b = ids(100, 40), c = ids(200, 70), d = ids(300, 10);
      RowStepPlan plan;
      for (const auto* step : {&a, &b, &c, &d}) cache.Append(*step);
      ASSERT_TRUE(cache.Plan(a, true, plan).ok());
      ASSERT_TRUE(cache.Plan(b, true, plan).ok());
      const Status full = cache.Plan(c, true, plan);  // 40 + 40 + 70 > 100
      ASSERT_FALSE(full.ok());
      EXPECT_NE(full.message().find("is full at step 2"), std::string::npos) << full.message();
      ASSERT_TRUE(cache.step_unplaced());
      EXPECT_EQ(plan.load_keys.size(), 20u);  // the free slots
      std::vector<uint32_t> slots(plan.slots.begin(), plan.slots.begin() + 20);
      ASSERT_TRUE(cache.PlaceAfterDrain(c, /*keep_steps=*/0, plan).ok());
      EXPECT_FALSE(cache.step_unplaced());
      EXPECT_EQ(plan.load_keys.size(), 50u);
      EXPECT_EQ(plan.write_keys.size(), 50u);  // a's and b's dirty rows, evicted
      for (const RowKey& k : plan.write_keys) EXPECT_LT(k.id, 200u);
      EXPECT_TRUE(std::equal(slots.begin(), slots.end(), plan.slots.begin()));
      std::vector<uint32_t> all(plan.slots.begin(), plan.slots.end());
      std::sort(all.begin(), all.end());
      EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a slot given twice";
      EXPECT_LT(all.back(), 100u);
      EXPECT_EQ(cache.stats().drained_steps, 1u);
      ASSERT_TRUE(cache.Plan(d, true, plan).ok());
      EXPECT_EQ(cache.stats().loads, 40u + 40u + 70u + 10u);
    }
  }
  // Keeping the previous step (compute may hold it while reading this one): 50 + 60 rows do not
  // fit 100; releasing it they do. A step larger than the cache fails for good, saying so.
  RowCacheOptions o;
  o.kind = PlannerKind::kLru;
  o.capacity_rows = 100;
  o.protect_steps = 1;
  for (const uint32_t keep : {1u, 0u}) {
    RowCache cache(o);
    RowStepPlan plan;
    ASSERT_TRUE(cache.Plan(ids(0, 50), true, plan).ok());
    ASSERT_FALSE(cache.Plan(ids(100, 60), true, plan).ok());
    const Status s = cache.PlaceAfterDrain(ids(100, 60), keep, plan);
    EXPECT_EQ(s.ok(), keep == 0) << s.message();
    if (keep == 1) {
      EXPECT_NE(s.message().find("the step's own 60 rows do not fit beside the previous step's rows"),
                std::string::npos)
          << s.message();
    }
    EXPECT_FALSE(cache.step_unplaced());
  }
  RowCache cache(o);
  RowStepPlan plan;
  ASSERT_TRUE(cache.Plan(ids(0, 50), true, plan).ok());
  const std::vector<RowKey> big = ids(100, 120);
  ASSERT_FALSE(cache.Plan(big, true, plan).ok());
  const Status s = cache.PlaceAfterDrain(big, 0, plan);
  EXPECT_NE(s.message().find("row cache of 100 rows is full at step 1: the step's own 120 rows do not fit with no "
                             "other step in flight"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(cache.step_unplaced());
}

// static: a half-placed step that does not fit beside the kept steps and the pinned rows takes
// the slots of pinned rows no kept step uses (oldest first), never those of its own or the kept
// step's pinned rows; a pinned row loaded again stays pinned.
TEST(RowCache, HalfPlacedStepTakesPinnedSlotsWhenItMust) {
  std::vector<uint64_t> pinned(1000 / 64 + 1, 0);
  for (uint64_t id = 0; id < 40; ++id) pinned[id / 64] |= uint64_t{1} << (id % 64);
  auto ids = [](uint64_t first, uint64_t n) {
    std::vector<RowKey> keys;
    for (uint64_t i = 0; i < n; ++i) keys.push_back(RowKey{first + i, 0});
    return keys;
  };
  for (uint64_t total : {uint64_t{0}, uint64_t{1000}}) {
    SCOPED_TRACE("total_rows " + std::to_string(total));
    RowCacheOptions o;
    o.kind = PlannerKind::kStatic;
    o.capacity_rows = 100;
    o.protect_steps = 2;
    o.pinned = &pinned;
    o.total_rows = total;
    RowCache cache(o);
    RowStepPlan plan;
    ASSERT_TRUE(cache.Plan(ids(0, 30), true, plan).ok());  // 30 pinned rows
    std::vector<RowKey> b = ids(30, 10);                     // 10 pinned rows, kept
    const std::vector<RowKey> b_rest = ids(100, 20);
    b.insert(b.end(), b_rest.begin(), b_rest.end());
    ASSERT_TRUE(cache.Plan(b, true, plan).ok());
    std::vector<RowKey> c = ids(200, 55);
    c.push_back(RowKey{5, 0});  // a pinned row of the first step, its own now
    ASSERT_FALSE(cache.Plan(c, true, plan).ok());  // 40 free, 30 + 30 resident
    ASSERT_TRUE(cache.PlaceAfterDrain(c, /*keep_steps=*/1, plan).ok());
    // 40 free slots, then 15 of the first step's 29 other pinned rows; row 5 and the kept step's stay.
    EXPECT_EQ(plan.write_keys.size(), 15u);
    for (const RowKey& k : plan.write_keys) EXPECT_TRUE(k.id < 30 && k.id != 5) << k.id;
    EXPECT_EQ(cache.resident_rows(), 100u);
    // The next step (the kept one released) loads an evicted pinned row again: it stays.
    const RowKey evicted = plan.write_keys.front();
    ASSERT_TRUE(cache.Plan(std::vector<RowKey>{evicted}, false, plan).ok());
    ASSERT_EQ(plan.load_keys.size(), 1u);
    cache.ReleaseProtected();
    ASSERT_TRUE(cache.Plan(ids(300, 40), false, plan).ok());
    for (const RowKey& k : plan.write_keys) EXPECT_NE(k.id, evicted.id);
    for (const RowKey& k : plan.load_keys) EXPECT_GE(k.id, 300u);
  }
}

TEST(RowCache, ErasedEntriesKeepLookupsWorking) {
  // Many distinct rows through a small cache: entries are inserted and erased constantly, so
  // the open-addressing table's deletions must keep every probe run intact.
  Steps steps;
  std::mt19937_64 rng(9);
  for (int t = 0; t < 2000; ++t) {
    std::vector<RowKey> rows;
    for (int i = 0; i < 8; ++i) {
      RowKey k{rng() % 300, static_cast<uint32_t>(rng() % 2)};
      if (std::find(rows.begin(), rows.end(), k) == rows.end()) rows.push_back(k);
    }
    steps.push_back(rows);
  }
  RunModel(steps, PlannerKind::kOracle, 2, 1, 40);
  RunModel(steps, PlannerKind::kLru, 0, 1, 40);
}

// A read-only pass whose steps are larger than training's gets less run-ahead, not a failure.
TEST(RowCache, FitPassGivesLargeStepsLessRunAhead) {
  struct Case {
    uint64_t capacity;
    uint32_t window, run_ahead;
    uint64_t step_rows;
    uint32_t want_run_ahead;
    uint64_t want_max_rows;
  };
  const Case cases[] = {
      {1000, 1, 3, 100, 3, 250},    // training's shape fits: nothing changes
      {1000, 1, 3, 200, 3, 250},    // exactly enough: window + 4 steps of 200
      {1000, 1, 3, 201, 2, 333},    // one row over: one step less ahead
      {1000, 1, 3, 400, 0, 1000},   // window + one step
      {1000, 1, 3, 501, 0, 1000},   // a step alone: the window's rows make way
      {1000, 1, 3, 1001, 0, 1000},  // too large for the cache (the caller refuses it)
      {1000, 0, 2, 1000, 0, 1000},  // no window (lru): one whole-cache step
      {0, 1, 3, 10, 0, 1},          // an empty cache
  };
  for (const Case& c : cases) {
    const PassFit f = FitPass(c.capacity, c.window, c.run_ahead, c.step_rows);
    EXPECT_EQ(f.run_ahead, c.want_run_ahead) << c.capacity << " " << c.step_rows;
    EXPECT_EQ(f.max_rows, c.want_max_rows) << c.capacity << " " << c.step_rows;
  }
}

// The run-ahead changes between passes: a step of 6 rows fits a cache of 10 with window 0 only
// once nothing else is protected.
TEST(RowCache, SetProtectStepsBetweenPasses) {
  RowCache cache(RowCacheOptions{PlannerKind::kLru, 10, 0, 1});
  RowStepPlan plan;
  std::vector<RowKey> a, b;
  for (uint64_t i = 0; i < 6; ++i) a.push_back(RowKey{i, 0}), b.push_back(RowKey{100 + i, 0});
  ASSERT_TRUE(cache.Plan(a, false, plan).ok());
  EXPECT_FALSE(cache.Plan(b, false, plan).ok());  // a is protected: 12 rows in 10 slots
  cache.ReleaseProtected();
  cache.SetProtectSteps(0);
  ASSERT_TRUE(cache.Plan(a, false, plan).ok());
  ASSERT_TRUE(cache.Plan(b, false, plan).ok()) << "with run-ahead 0 a's rows may go";
  EXPECT_EQ(cache.options().protect_steps, 0u);
}

}  // namespace
}  // namespace sluice
