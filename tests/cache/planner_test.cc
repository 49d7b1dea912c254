#include "cache/planner.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace sluice {
namespace {

std::vector<BlockId> DistinctOf(std::span<const BlockId> step) {
  std::vector<BlockId> out;
  for (BlockId b : step) {
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  }
  return out;
}

AccessTrace RandomTrace(uint32_t blocks, uint64_t steps, uint32_t max_set, uint64_t seed,
                        double zipf_alpha = 0, double write_prob = 1.0) {
  std::mt19937_64 rng(seed);
  std::vector<double> weights(blocks);
  for (uint32_t b = 0; b < blocks; ++b) weights[b] = zipf_alpha > 0 ? std::pow(b + 1.0, -zipf_alpha) : 1;
  std::discrete_distribution<uint32_t> pick(weights.begin(), weights.end());
  std::bernoulli_distribution writes(write_prob);
  AccessTrace trace(blocks);
  for (uint64_t t = 0; t < steps; ++t) {
    std::vector<BlockId> set(1 + rng() % max_set);
    for (auto& b : set) b = pick(rng);
    trace.AddStep(set, writes(rng));
  }
  return trace;
}

// Exhaustive search: the fewest loads over every choice of evictions (tiny traces only).
uint64_t OptimalLoads(const AccessTrace& trace, uint32_t capacity) {
  std::map<std::pair<uint64_t, uint32_t>, uint64_t> memo;
  std::function<uint64_t(uint64_t, uint32_t)> best = [&](uint64_t t, uint32_t resident) {
    if (t == trace.num_steps()) return uint64_t{0};
    auto key = std::make_pair(t, resident);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    uint32_t need = 0;
    for (BlockId b : trace.step(t)) need |= 1u << b;
    const uint32_t missing = need & ~resident;
    const int over = std::popcount(resident | need) - static_cast<int>(capacity);
    uint64_t result = ~uint64_t{0};
    const uint32_t evictable = resident & ~need;
    // Every subset of evictable blocks of the size that makes room.
    for (uint32_t evict = evictable;; evict = (evict - 1) & evictable) {
      if (std::popcount(evict) == std::max(over, 0)) {
        result = std::min(result, static_cast<uint64_t>(std::popcount(missing)) +
                                      best(t + 1, (resident & ~evict) | need));
      }
      if (evict == 0) break;
    }
    return memo[key] = result;
  };
  return best(0, 0);
}

// Straightforward Belady with the planner's rule, for long traces: on a miss with no free slot,
// scan every resident block not needed now for its next use within the window.
uint64_t ReferenceLoads(const AccessTrace& trace, uint32_t capacity, uint64_t window, bool lru) {
  std::set<BlockId> resident;
  std::map<BlockId, uint64_t> last_use;
  std::map<BlockId, bool> dirty;
  std::map<BlockId, uint64_t> uses;
  uint64_t loads = 0;
  for (uint64_t t = 0; t < trace.num_steps(); ++t) {
    std::vector<BlockId> need = DistinctOf(trace.step(t));
    for (BlockId b : need) {
      if (resident.count(b)) continue;
      if (resident.size() == capacity) {
        std::tuple<uint64_t, int, uint64_t, uint64_t, BlockId> worst{0, 0, 0, 0, 0};
        bool found = false;
        for (BlockId r : resident) {
          if (std::find(need.begin(), need.end(), r) != need.end()) continue;
          uint64_t next = ~uint64_t{0};
          if (!lru) {
            for (uint64_t u = t + 1; u < trace.num_steps() && (window == kWholeTrace || u <= t + window); ++u) {
              auto s = trace.step(u);
              if (std::find(s.begin(), s.end(), r) != s.end()) {
                next = u;
                break;
              }
            }
          }
          auto key = std::make_tuple(lru ? 1 : next, lru ? 0 : (dirty[r] ? 0 : 1),
                                     lru ? 0 : ~uint64_t{0} - uses[r], ~uint64_t{0} - last_use[r],
                                     r);
          if (!found || key > worst) worst = key, found = true;
        }
        resident.erase(std::get<4>(worst));
      }
      resident.insert(b);
      dirty[b] = false;
      ++loads;
    }
    for (BlockId b : need) {
      last_use[b] = t;
      ++uses[b];
      if (trace.writes(t)) dirty[b] = true;
    }
  }
  return loads;
}

struct Resident {
  BlockId block;
  uint32_t slot;
  bool dirty;
};

// Replays a plan from the cache holding `initial` and checks it: every step's blocks resident,
// capacity respected, evictions only of blocks not needed (nor protected), write-back exactly
// when written since loaded. Returns what the cache holds at the end.
std::vector<Resident> ExpectValidPlan(const AccessTrace& trace, const Plan& plan, uint32_t capacity,
                                      uint32_t protect = 0, bool read_through = false,
                                      const std::vector<Resident>& initial = {}) {
  EXPECT_EQ(plan.num_steps(), trace.num_steps());
  std::map<BlockId, uint32_t> slot_of;
  std::map<uint32_t, BlockId> in_slot;
  std::map<BlockId, bool> written;
  std::map<BlockId, uint64_t> last_use;
  for (const Resident& r : initial) {
    slot_of[r.block] = r.slot, in_slot[r.slot] = r.block, written[r.block] = r.dirty;
  }
  std::vector<Resident> end;
  auto check = [&] {
    for (uint64_t t = 0; t < trace.num_steps(); ++t) {
      std::vector<BlockId> need = DistinctOf(trace.step(t));
      for (const EvictOp& e : plan.step_evictions(t)) {
        ASSERT_EQ(slot_of.count(e.block), 1u) << "step " << t;
        ASSERT_EQ(slot_of[e.block], e.slot);
        if (!read_through) {
          ASSERT_EQ(std::count(need.begin(), need.end(), e.block), 0) << "evicted a needed block";
        }
        if (protect && last_use.count(e.block)) {
          ASSERT_LT(last_use[e.block] + protect, t) << "evicted a protected block";
        }
        ASSERT_EQ(e.write_back, written[e.block]) << "block " << e.block << " step " << t;
        in_slot.erase(e.slot);
        slot_of.erase(e.block);
      }
      for (const LoadOp& l : plan.step_loads(t)) {
        ASSERT_EQ(slot_of.count(l.block), 0u);
        ASSERT_LT(l.slot, capacity);
        ASSERT_EQ(in_slot.count(l.slot), 0u) << "slot " << l.slot << " still holds a block";
        slot_of[l.block] = l.slot;
        in_slot[l.slot] = l.block;
        written[l.block] = false;
      }
      for (BlockId b : need) {
        ASSERT_EQ(slot_of.count(b), 1u) << "block " << b << " not resident at step " << t;
        last_use[b] = t;
        if (trace.writes(t)) written[b] = true;
      }
    }
    for (const auto& [b, slot] : slot_of) end.push_back({b, slot, written[b]});
  };
  check();
  return end;
}

TEST(PlannerTest, OracleMatchesExhaustiveSearchOnTinyTraces) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    const uint32_t blocks = 3 + rng() % 6;      // at most 8
    const uint64_t steps = 4 + rng() % 9;       // at most 12
    const uint32_t capacity = 2 + rng() % 3;    // 2..4
    AccessTrace trace = RandomTrace(blocks, steps, capacity, seed * 7 + 1, 0.0, 0.5);
    PlannerOptions options;
    options.capacity_blocks = capacity;
    auto plan = MakePlan(trace, PlannerKind::kOracle, options);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->stats.loads, OptimalLoads(trace, capacity)) << "seed " << seed;
    ExpectValidPlan(trace, plan.value(), capacity);
  }
}

TEST(PlannerTest, OracleEqualsStraightforwardBeladyOnLongTraces) {
  for (double alpha : {0.0, 1.0}) {
    AccessTrace trace = RandomTrace(300, 1500, 12, 42 + static_cast<uint64_t>(alpha), alpha, 0.7);
    for (uint32_t capacity : {12u, 30u, 90u}) {
      PlannerOptions options;
      options.capacity_blocks = capacity;
      auto plan = MakePlan(trace, PlannerKind::kOracle, options);
      ASSERT_TRUE(plan.ok());
      EXPECT_EQ(plan->stats.loads, ReferenceLoads(trace, capacity, kWholeTrace, false))
          << "alpha " << alpha << " capacity " << capacity;
      ExpectValidPlan(trace, plan.value(), capacity);
    }
  }
}

TEST(PlannerTest, WindowedOracleAndLruEqualTheirReferences) {
  AccessTrace trace = RandomTrace(200, 1200, 10, 5, 0.9, 0.6);
  for (uint64_t window : {0ull, 1ull, 5ull, 40ull}) {
    PlannerOptions options;
    options.capacity_blocks = 25;
    options.window_steps = window;
    auto plan = MakePlan(trace, PlannerKind::kOracle, options);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->stats.loads, ReferenceLoads(trace, 25, window, false)) << "window " << window;
    ExpectValidPlan(trace, plan.value(), 25);
  }
  PlannerOptions options;
  options.capacity_blocks = 25;
  auto lru = MakePlan(trace, PlannerKind::kLru, options);
  ASSERT_TRUE(lru.ok());
  EXPECT_EQ(lru->stats.loads, ReferenceLoads(trace, 25, 0, true));
  ExpectValidPlan(trace, lru.value(), 25);
}

TEST(PlannerTest, IncrementalPlanningEqualsWholeTracePlanning) {
  AccessTrace trace = RandomTrace(500, 3000, 20, 11, 1.0, 0.8);
  PlannerOptions options;
  options.capacity_blocks = 60;
  options.window_steps = 30;
  auto whole = MakePlan(trace, PlannerKind::kOracle, options);
  ASSERT_TRUE(whole.ok());
  HeapPlanner planner(PlannerKind::kOracle, trace.num_blocks(), options);
  Plan incremental;
  for (uint64_t t = 0; t < trace.num_steps(); ++t) {
    planner.Append(trace.step(t), trace.writes(t));
    while (planner.Ready()) ASSERT_TRUE(planner.PlanNext(incremental).ok());
  }
  planner.Finish();
  while (planner.Ready()) ASSERT_TRUE(planner.PlanNext(incremental).ok());
  ASSERT_EQ(incremental.num_steps(), trace.num_steps());
  ASSERT_EQ(incremental.loads.size(), whole->loads.size());
  for (size_t i = 0; i < whole->loads.size(); ++i) {
    ASSERT_EQ(incremental.loads[i].block, whole->loads[i].block);
    ASSERT_EQ(incremental.loads[i].slot, whole->loads[i].slot);
  }
}

TEST(PlannerTest, AdoptedBlocksCarryOverFromAPreviousPass) {
  // Pass 2 repeats pass 1 (an epoch boundary with the same order): a planner that adopts what
  // pass 1 left resident, dirty bits included, loads nothing for the steps those blocks cover
  // and fewer blocks in all than one that starts empty, and its plan is valid from there.
  AccessTrace trace = RandomTrace(300, 400, 10, 21, 1.0, 0.7);
  AccessTrace again(trace.num_blocks());
  for (uint64_t t = trace.num_steps() - 1; t + 1 > trace.num_steps() - 100; --t) {
    again.AddStep(trace.step(t), trace.writes(t));  // the last 100 steps, backwards
  }
  for (PlannerKind kind : {PlannerKind::kOracle, PlannerKind::kLru}) {
    PlannerOptions options;
    options.capacity_blocks = 40;
    options.window_steps = 25;
    options.protect_steps = 2;
    auto first = MakePlan(trace, kind, options);
    ASSERT_TRUE(first.ok());
    const std::vector<Resident> left = ExpectValidPlan(trace, *first, 40, 2);
    ASSERT_FALSE(left.empty());
    HeapPlanner fresh(kind, trace.num_blocks(), options), adopted(kind, trace.num_blocks(), options);
    for (const Resident& r : left) adopted.Adopt(r.block, r.slot, r.dirty);
    Plan from_empty, carried;
    for (uint64_t t = 0; t < again.num_steps(); ++t) {
      fresh.Append(again.step(t), again.writes(t));
      adopted.Append(again.step(t), again.writes(t));
    }
    fresh.Finish(), adopted.Finish();
    while (fresh.Ready()) ASSERT_TRUE(fresh.PlanNext(from_empty).ok());
    while (adopted.Ready()) ASSERT_TRUE(adopted.PlanNext(carried).ok());
    ExpectValidPlan(again, carried, 40, 2, false, left);
    EXPECT_EQ(carried.step_loads(0).size(), 0u) << "pass 1's last step is resident";
    EXPECT_LT(carried.loads.size(), from_empty.loads.size());
    EXPECT_EQ(from_empty.step_loads(0).size(), DistinctOf(again.step(0)).size());
  }
}

TEST(PlannerTest, ProtectedStepsAreNeverEvicted) {
  AccessTrace trace = RandomTrace(100, 800, 6, 3, 0.8, 1.0);
  for (PlannerKind kind : {PlannerKind::kOracle, PlannerKind::kLru}) {
    PlannerOptions options;
    options.capacity_blocks = 20;
    options.protect_steps = 2;
    auto plan = MakePlan(trace, kind, options);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ExpectValidPlan(trace, plan.value(), 20, 2);
  }
}

TEST(PlannerTest, StaticPinsTheHottestAndNoneReadsThrough) {
  AccessTrace trace = RandomTrace(400, 1000, 8, 9, 1.1, 1.0);
  PlannerOptions options;
  options.capacity_blocks = 48;
  auto fixed = MakePlan(trace, PlannerKind::kStatic, options);
  auto none = MakePlan(trace, PlannerKind::kNone, options);
  ASSERT_TRUE(fixed.ok() && none.ok());
  ExpectValidPlan(trace, fixed.value(), 48);
  ExpectValidPlan(trace, none.value(), 48, 0, /*read_through=*/true);
  EXPECT_EQ(none->stats.loads, none->stats.accesses);  // every access is a load
  EXPECT_LT(fixed->stats.loads, none->stats.loads);
  auto oracle = MakePlan(trace, PlannerKind::kOracle, options);
  EXPECT_LE(oracle->stats.loads, fixed->stats.loads);
  // Block 0 is the hottest (Zipf rank 1): loaded once, never evicted.
  uint64_t loads_of_0 = 0;
  for (const LoadOp& l : fixed->loads) loads_of_0 += l.block == 0;
  EXPECT_EQ(loads_of_0, 1u);
}

TEST(PlannerTest, AStepLargerThanTheCacheIsAClearError) {
  AccessTrace trace(10);
  std::vector<BlockId> big = {0, 1, 2, 3, 4};
  trace.AddStep(big, true);
  PlannerOptions options;
  options.capacity_blocks = 4;
  for (PlannerKind kind : {PlannerKind::kOracle, PlannerKind::kLru, PlannerKind::kStatic,
                           PlannerKind::kNone}) {
    auto plan = MakePlan(trace, kind, options);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(MakePlan(trace, PlannerKind::kOracle, options).status().message(),
            "step 0 needs more blocks than the cache holds (4 slots): raise the memory budget or "
            "shrink the batch");
}

}  // namespace
}  // namespace sluice
