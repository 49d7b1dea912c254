// ShardedRowCache: plans of Zipf-skewed steps replayed against a model of the arena (which key
// each slot holds): every row of a step sits in its own slot of [0, capacity); a row not loaded
// is found where it was left; a load never lands on a row of the step before (run-ahead 1);
// every shard plans in its own slot range. With room for every row it loads exactly what one
// cache loads; the number of shards follows the room each shard has.

#include "cache/sharded_row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

namespace sluice {
namespace {

std::vector<std::vector<RowKey>> ZipfSteps(int steps, int per_step, uint64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> cdf(vocab);
  double sum = 0;
  for (uint64_t r = 0; r < vocab; ++r) cdf[r] = sum += 1.0 / std::pow(static_cast<double>(r + 1), 1.05);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<std::vector<RowKey>> out;
  for (int t = 0; t < steps; ++t) {
    std::set<std::pair<uint32_t, uint64_t>> seen;
    std::vector<RowKey> rows;
    for (int i = 0; i < per_step; ++i) {
      const auto rank = static_cast<uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
      const RowKey k{rank * 7919 % vocab, static_cast<uint32_t>(rng() % 3)};
      if (seen.insert({k.table, k.id}).second) rows.push_back(k);
    }
    out.push_back(rows);
  }
  return out;
}

RowCacheOptions Lru(uint64_t capacity) {
  RowCacheOptions o;
  o.kind = PlannerKind::kLru;
  o.capacity_rows = capacity;
  o.protect_steps = 1;
  return o;
}

TEST(ShardedRowCacheTest, StepsFindTheirRowsWhereTheyWereLeftAndLoadsSpareTheStepBefore) {
  constexpr uint64_t kCapacity = 3000;
  ShardedRowCache cache(Lru(kCapacity), 4);
  ASSERT_EQ(cache.shards(), 4u);
  std::vector<RowKey> arena(kCapacity, RowKey{~uint64_t{0}, ~uint32_t{0}});
  std::vector<RowKey> before;
  RowStepPlan plan;
  uint64_t loads = 0, rows = 0;
  for (const auto& step : ZipfSteps(60, 500, 20000, 7)) {
    ASSERT_TRUE(cache.Plan(step, /*writes=*/false, plan).ok());
    ASSERT_EQ(plan.slots.size(), step.size());
    ASSERT_EQ(plan.load_keys.size(), plan.load_slots.size());
    std::set<uint32_t> loaded(plan.load_slots.begin(), plan.load_slots.end());
    ASSERT_EQ(loaded.size(), plan.load_slots.size()) << "a slot loaded twice";
    for (uint32_t s : plan.load_slots) {
      ASSERT_LT(s, kCapacity);
      for (const RowKey& b : before) ASSERT_FALSE(arena[s] == b) << "a load evicted a row of the step before";
    }
    for (size_t i = 0; i < plan.load_slots.size(); ++i) arena[plan.load_slots[i]] = plan.load_keys[i];
    std::set<uint32_t> slots;
    for (size_t i = 0; i < step.size(); ++i) {
      ASSERT_LT(plan.slots[i], kCapacity);
      ASSERT_TRUE(arena[plan.slots[i]] == step[i]) << "row " << i << " is not where the plan says";
      slots.insert(plan.slots[i]);
    }
    ASSERT_EQ(slots.size(), step.size()) << "two rows of a step share a slot";
    loads += plan.load_slots.size(), rows += step.size();
    before = step;
  }
  const RowCacheStats s = cache.stats();
  EXPECT_EQ(s.loads, loads);
  EXPECT_EQ(s.accesses, rows);
  EXPECT_EQ(s.steps, 60u);
  EXPECT_GT(s.hits, 0u);  // Zipf: the hot rows stay
}

TEST(ShardedRowCacheTest, WithRoomForEveryRowItLoadsWhatOneCacheLoads) {
  const auto steps = ZipfSteps(30, 400, 2000, 3);
  ShardedRowCache one(Lru(8000), 1), four(Lru(8000), 4);
  RowStepPlan a, b;
  for (const auto& step : steps) {
    ASSERT_TRUE(one.Plan(step, false, a).ok());
    ASSERT_TRUE(four.Plan(step, false, b).ok());
    std::vector<std::pair<uint32_t, uint64_t>> la, lb;
    for (const RowKey& k : a.load_keys) la.emplace_back(k.table, k.id);
    for (const RowKey& k : b.load_keys) lb.emplace_back(k.table, k.id);
    std::sort(la.begin(), la.end()), std::sort(lb.begin(), lb.end());
    ASSERT_EQ(la, lb);
  }
  EXPECT_EQ(one.stats().hits, four.stats().hits);
  // Each shard's slots are its own range: four ranges of 2000.
  std::set<uint32_t> ranges;
  for (uint32_t s : b.slots) ranges.insert(s / 2000);
  EXPECT_GT(ranges.size(), 1u);
}

TEST(ShardedRowCacheTest, ShardsLeaveEachARoomySliceOrThereIsOne) {
  // 500K rows a step, 8M slots: 16 cores give 16 shards.
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kLru, 8'000'000, 1, 500'000, 0, 16), 16u);
  // Two steps and no more (gpu_budget 0): no room to spare.
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kLru, 1'000'000, 1, 500'000, 0, 16), 1u);
  // 2.6 steps of room: as many shards as keep a quarter and 256 rows over each share.
  const uint32_t k = ShardedRowCache::Shards(PlannerKind::kLru, 1'300'000, 1, 500'000, 0, 16);
  EXPECT_GT(k, 1u);
  EXPECT_GE(1'300'000 / k, 2 * ((500'000 + k - 1) / k * 5 / 4 + 256));
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kLru, 8'000'000, 1, 500'000, 0, 1), 1u);
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kStatic, 8'000'000, 1, 500'000, 0, 16), 1u);
  // The oracle's window is appended shard by shard.
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kOracle, 8'000'000, 1, 500'000, 0, 16, 2'500'000), 16u);
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kLru, 8'000'000, 1, 0, 0, 16), 1u);
  // Every row fits an index by id: one cache (faster than shards).
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kLru, 8'000'000, 1, 500'000, 9'000'000, 16), 1u);
  // ... the oracle's too (12 bytes a row with its counts); a table too large for that: shards.
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kOracle, 8'000'000, 1, 500'000, 9'000'000, 16, 2'500'000), 1u);
  EXPECT_EQ(ShardedRowCache::Shards(PlannerKind::kOracle, 8'000'000, 1, 500'000, 900'000'000, 16, 2'500'000), 16u);
  EXPECT_EQ(ShardedRowCache::IndexBytes(PlannerKind::kOracle, 8000, 4, 9'000'000, 4000),
            4 * RowCacheIndexBytes(PlannerKind::kOracle, 2000, 1000, 0));
  EXPECT_EQ(ShardedRowCache::IndexBytes(PlannerKind::kLru, 8000, 1, 0), RowCacheIndexBytes(PlannerKind::kLru, 8000, 0, 0));
  EXPECT_GE(ShardedRowCache::IndexBytes(PlannerKind::kLru, 8000, 4, 0), RowCacheIndexBytes(PlannerKind::kLru, 8000, 0, 0));
}

// The oracle in shards: each shard sees its share of every appended step, so a row the next
// steps use is never the one evicted (with room for the window), and on Zipf-skewed steps it
// loads fewer rows than lru in the same slots.
TEST(ShardedRowCacheTest, TheOracleInShardsKeepsTheRowsOfTheStepsAhead) {
  constexpr uint64_t kCapacity = 6000;
  constexpr uint32_t kWindow = 3;
  const auto steps = ZipfSteps(80, 400, 30000, 11);
  RowCacheOptions o = Lru(kCapacity);
  o.kind = PlannerKind::kOracle;
  o.window_steps = kWindow;
  o.window_rows = kWindow * 400;
  ShardedRowCache oracle(o, 4), lru(Lru(kCapacity), 4);
  ASSERT_EQ(oracle.shards(), 4u);
  std::vector<RowKey> arena(kCapacity, RowKey{~uint64_t{0}, ~uint32_t{0}});
  RowStepPlan plan;
  size_t appended = 0;
  for (size_t t = 0; t < steps.size(); ++t) {
    for (; appended < steps.size() && appended <= t + kWindow; ++appended) oracle.Append(steps[appended]);
    ASSERT_EQ(oracle.appended_unplanned(), appended - t);
    ASSERT_TRUE(oracle.Plan(steps[t], /*writes=*/false, plan).ok());
    std::set<std::pair<uint32_t, uint64_t>> ahead;
    for (size_t u = t + 1; u < appended; ++u) {
      for (const RowKey& k : steps[u]) ahead.insert({k.table, k.id});
    }
    for (size_t i = 0; i < plan.load_slots.size(); ++i) {
      const RowKey& old = arena[plan.load_slots[i]];
      ASSERT_EQ(ahead.count({old.table, old.id}), 0u) << "step " << t << " evicted a row a later step uses";
      arena[plan.load_slots[i]] = plan.load_keys[i];
    }
    for (size_t i = 0; i < steps[t].size(); ++i) ASSERT_TRUE(arena[plan.slots[i]] == steps[t][i]);
    ASSERT_TRUE(lru.Plan(steps[t], /*writes=*/false, plan).ok());
  }
  EXPECT_EQ(oracle.stats().window_evictions, 0u);
  EXPECT_LT(oracle.stats().loads, lru.stats().loads);
}

TEST(ShardedRowCacheTest, AShardThatCannotPlaceItsRowsFailsTheStep) {
  ShardedRowCache cache(Lru(40), 4);  // 10 slots a shard, 2 steps protected
  std::vector<RowKey> step;
  for (uint64_t i = 0; i < 60; ++i) step.push_back(RowKey{i, 0});
  RowStepPlan plan;
  const Status s = cache.Plan(step, false, plan);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  // Half placed; with nothing else in flight its shards still cannot hold it: it fails for good.
  ASSERT_TRUE(cache.step_unplaced());
  EXPECT_EQ(cache.PlaceAfterDrain(step, 0, plan).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(cache.step_unplaced());
}

// 1,000 slots in 4 shards of 250, the step before kept (protect 1), in cycles of four steps:
// A, 300 rows over every shard; B, 50 of A's and 200 new rows all in shard 0, which does not
// fit beside A's rows there while the other shards do; C, 200 new rows over every shard, again
// too many for shard 0 beside B's; D, 200 new rows and 50 of C's, which fits. A step left half
// placed takes the step before's slots after PlaceAfterDrain, in the shards that need it only:
// every row is where the plan says, no slot is loaded twice, a row shared with the step before
// is found, not loaded, the drain's loads all land in shard 0's slots, and a step that fits
// never evicts the step before's rows.
TEST(ShardedRowCacheTest, AHalfPlacedStepTakesTheStepBeforesSlotsAfterTheDrain) {
  constexpr uint64_t kCapacity = 1000;
  ShardedRowCache cache(Lru(kCapacity), 4);
  ASSERT_EQ(cache.shards(), 4u);
  auto shard_of = [](const RowKey& k) { return static_cast<uint32_t>((RowCache::Hash(k) & 0xFFFFFFFFull) * 4 >> 32); };
  std::vector<RowKey> arena(kCapacity, RowKey{~uint64_t{0}, ~uint32_t{0}});
  std::vector<RowKey> before;
  RowStepPlan plan;
  uint64_t next_id = 0, drained = 0, fitted = 0;
  auto fresh = [&](std::vector<RowKey>& step, size_t n, bool shard0) {
    for (size_t added = 0; added < n;) {
      const RowKey k{next_id++ * 7919 % 1'000'003, 0};
      if (!shard0 || shard_of(k) == 0) step.push_back(k), ++added;
    }
  };
  for (int t = 0; t < 24; ++t) {
    std::vector<RowKey> step;
    const int kind = t % 4;
    const size_t shared = kind == 1 || kind == 3 ? 50 : 0;
    for (size_t i = 0; i < shared; ++i) step.push_back(before[i * 3 % before.size()]);
    fresh(step, kind == 0 ? 300 : 200, kind == 1);
    Status s = cache.Plan(step, /*writes=*/false, plan);
    std::vector<uint32_t> loads = plan.load_slots;
    std::vector<RowKey> load_keys = plan.load_keys;
    if (!s.ok()) {
      ASSERT_TRUE(cache.step_unplaced()) << s.ToString();
      ASSERT_TRUE(kind == 1 || kind == 2) << "step " << t << " should have fit";
      ++drained;
      s = cache.PlaceAfterDrain(step, /*keep_steps=*/0, plan);
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_FALSE(cache.step_unplaced());
      for (uint32_t slot : plan.load_slots) ASSERT_LT(slot, kCapacity / 4) << "step " << t << ": a drain load outside shard 0";
      loads.insert(loads.end(), plan.load_slots.begin(), plan.load_slots.end());
      load_keys.insert(load_keys.end(), plan.load_keys.begin(), plan.load_keys.end());
    } else {
      ++fitted;
      for (uint32_t slot : loads) {
        ASSERT_LT(slot, kCapacity);
        for (const RowKey& b : before) ASSERT_FALSE(arena[slot] == b) << "step " << t << " evicted a row of the step before";
      }
    }
    ASSERT_EQ(std::set<uint32_t>(loads.begin(), loads.end()).size(), loads.size()) << "step " << t << ": a slot loaded twice";
    ASSERT_EQ(loads.size(), step.size() - shared) << "step " << t;
    for (size_t i = 0; i < loads.size(); ++i) {
      ASSERT_LT(loads[i], kCapacity);
      arena[loads[i]] = load_keys[i];
    }
    std::set<uint32_t> slots;
    for (size_t i = 0; i < step.size(); ++i) {
      ASSERT_LT(plan.slots[i], kCapacity);
      ASSERT_TRUE(arena[plan.slots[i]] == step[i]) << "step " << t << " row " << i << " is not where the plan says";
      slots.insert(plan.slots[i]);
    }
    ASSERT_EQ(slots.size(), step.size()) << "two rows of a step share a slot";
    before = step;
  }
  EXPECT_GE(drained, 8u);
  EXPECT_GE(fitted, 8u);
  EXPECT_EQ(cache.stats().drained_steps, drained);
}

}  // namespace
}  // namespace sluice
