#include "cache/partition_order.h"

#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

namespace sluice {
namespace {

void ExpectCoversEveryBucketOnce(const PartitionOrder& order, uint32_t p, uint32_t c) {
  std::set<std::pair<uint32_t, uint32_t>> seen;  // buckets trained whole (or all pieces)
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int>> pieces;
  std::vector<uint32_t> previous;
  uint64_t loads = 0;
  for (size_t s = 0; s < order.states.size(); ++s) {
    const BufferState& state = order.states[s];
    ASSERT_LE(state.resident.size(), std::min(c, p));
    ASSERT_TRUE(state.pieces.empty() || state.pieces.size() == state.buckets.size());
    for (size_t k = 0; k < state.buckets.size(); ++k) {
      const auto [i, j] = state.buckets[k];
      if (state.pieces.empty()) {
        ASSERT_TRUE(seen.insert({i, j}).second) << "bucket trained twice";
      } else {  // split: every piece of the bucket exactly once, all with the same count
        const auto [piece, count] = state.pieces[k];
        ASSERT_LT(piece, count);
        auto& got = pieces[{i, j}];
        if (got.empty()) got.assign(count, 0);
        ASSERT_EQ(got.size(), count) << "bucket cut into different piece counts";
        ASSERT_EQ(got[piece]++, 0) << "piece trained twice";
        if (std::count(got.begin(), got.end(), 1) == static_cast<long>(count)) seen.insert({i, j});
      }
      ASSERT_TRUE(std::count(state.resident.begin(), state.resident.end(), i) &&
                  std::count(state.resident.begin(), state.resident.end(), j))
          << "bucket (" << i << "," << j << ") trained without both partitions resident";
    }
    if (s > 0) {
      for (uint32_t x : state.resident) {
        loads += std::count(previous.begin(), previous.end(), x) == 0;
      }
    }
    previous = state.resident;
  }
  EXPECT_EQ(seen.size(), uint64_t{p} * p);
  EXPECT_EQ(loads, order.swaps);
}

TEST(PartitionOrderTest, BetaTrainsEveryBucketWithBothPartitionsResident) {
  for (uint32_t p : {1u, 2u, 3u, 4u, 7u, 16u, 33u}) {
    for (uint32_t c : {2u, 3u, 4u, 8u}) {
      for (OrderingKind kind :
           {OrderingKind::kBeta, OrderingKind::kRandomized, OrderingKind::kSpread,
            OrderingKind::kSplit, OrderingKind::kRolling}) {
        auto order = MakePartitionOrder(p, c, kind, 7);
        ASSERT_TRUE(order.ok());
        ExpectCoversEveryBucketOnce(order.value(), p, c);
        EXPECT_GE(order->swaps, SwapLowerBound(p, c)) << "p " << p << " c " << c;
      }
    }
  }
}

TEST(PartitionOrderTest, BetaStaysCloseToTheLowerBound) {
  // 16 partitions, 4 resident (the configuration of the link-prediction issue).
  auto order = MakePartitionOrder(16, 4, OrderingKind::kBeta, 0);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(SwapLowerBound(16, 4), 38u);  // ceil((120 - 6) / 3)
  EXPECT_LE(order->swaps, 38u + 16u);
  auto big = MakePartitionOrder(64, 8, OrderingKind::kBeta, 0);
  EXPECT_LE(static_cast<double>(big->swaps), 1.25 * static_cast<double>(SwapLowerBound(64, 8)));
}

TEST(PartitionOrderTest, RandomizedOrderDependsOnTheSeedOnly) {
  auto a = MakePartitionOrder(12, 3, OrderingKind::kRandomized, 5);
  auto b = MakePartitionOrder(12, 3, OrderingKind::kRandomized, 5);
  auto c = MakePartitionOrder(12, 3, OrderingKind::kRandomized, 6);
  EXPECT_EQ(a->states[3].buckets, b->states[3].buckets);
  bool differs = false;
  for (size_t s = 0; s < std::min(a->states.size(), c->states.size()); ++s) {
    differs |= a->states[s].resident != c->states[s].resident;
  }
  EXPECT_TRUE(differs);
}

// spread and split deal the buckets anew but keep the randomized ordering's states and swaps.
void ExpectSameStatesAndSwaps(const PartitionOrder& randomized, const PartitionOrder& dealt) {
  ASSERT_EQ(randomized.states.size(), dealt.states.size());
  EXPECT_EQ(randomized.swaps, dealt.swaps);
  for (size_t s = 0; s < dealt.states.size(); ++s) {
    EXPECT_EQ(randomized.states[s].resident, dealt.states[s].resident) << "state " << s;
  }
}

TEST(PartitionOrderTest, SpreadKeepsTheStatesAndMovesBucketsOffTheFirstStateThatCould) {
  const uint32_t p = 16, c = 8;
  auto randomized = MakePartitionOrder(p, c, OrderingKind::kRandomized, 3);
  auto spread = MakePartitionOrder(p, c, OrderingKind::kSpread, 3);
  ASSERT_TRUE(randomized.ok() && spread.ok());
  ExpectSameStatesAndSwaps(*randomized, *spread);
  // The randomized ordering trains all c*c buckets of the first state there; spread moves
  // most of them to later states that also hold both partitions.
  EXPECT_EQ(randomized->states[0].buckets.size(), uint64_t{c} * c);
  EXPECT_LT(spread->states[0].buckets.size(), uint64_t{c} * c / 2);
  // Over seeds, one bucket lands in more than one state.
  std::set<size_t> homes;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto o = MakePartitionOrder(p, c, OrderingKind::kSpread, seed);
    for (size_t s = 0; s < o->states.size(); ++s) {
      for (auto [a, b] : o->states[s].buckets) {
        if (a == 0 && b == 1) homes.insert(s);
      }
    }
  }
  EXPECT_GT(homes.size(), 3u);
}

TEST(PartitionOrderTest, SplitSharesEveryBucketAmongAllStatesThatHoldIt) {
  const uint32_t p = 16, c = 8;
  auto randomized = MakePartitionOrder(p, c, OrderingKind::kRandomized, 4);
  auto split = MakePartitionOrder(p, c, OrderingKind::kSplit, 4);
  ASSERT_TRUE(randomized.ok() && split.ok());
  ExpectSameStatesAndSwaps(*randomized, *split);
  for (size_t s = 0; s < split->states.size(); ++s) {
    const BufferState& state = split->states[s];
    // Every bucket the state can train, a piece of each (the last state may hold fewer than c).
    EXPECT_EQ(state.buckets.size(), state.resident.size() * state.resident.size()) << "state " << s;
    for (size_t k = 0; k < state.buckets.size(); ++k) {
      const auto [i, j] = state.buckets[k];
      uint32_t holders = 0;
      for (const BufferState& other : split->states) {
        holders += std::count(other.resident.begin(), other.resident.end(), i) &&
                   std::count(other.resident.begin(), other.resident.end(), j);
      }
      EXPECT_EQ(state.pieces[k].second, holders);
    }
  }
  // The piece a state gets depends on the seed.
  auto other = MakePartitionOrder(p, c, OrderingKind::kSplit, 5);
  EXPECT_NE(split->states[1].pieces, other->states[1].pieces);
}

// The longest run of consecutive states some partition is absent from (the epoch's start and
// end included), over the states' count.
double LongestAbsence(const PartitionOrder& order, uint32_t p) {
  uint64_t longest = 0;
  for (uint32_t x = 0; x < p; ++x) {
    uint64_t run = 0;
    for (const BufferState& st : order.states) {
      run = std::count(st.resident.begin(), st.resident.end(), x) ? 0 : run + 1;
      longest = std::max(longest, run);
    }
  }
  return static_cast<double>(longest) / static_cast<double>(order.states.size());
}

TEST(PartitionOrderTest, RollingBringsEveryPartitionBackThroughTheEpoch) {
  for (auto [p, c] : {std::pair{16u, 4u}, {8u, 2u}, {12u, 3u}, {16u, 8u}, {32u, 8u}, {64u, 16u}}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      auto rolling = MakePartitionOrder(p, c, OrderingKind::kRolling, seed);
      auto split = MakePartitionOrder(p, c, OrderingKind::kSplit, seed);
      ASSERT_TRUE(rolling.ok() && split.ok());
      // The sweep orderings leave their first fixed group out of the rest of the epoch (more
      // than half of it); rolling brings every partition back sooner.
      const double away = LongestAbsence(*rolling, p);
      EXPECT_GT(LongestAbsence(*split, p), 0.54) << p << "/" << c;
      EXPECT_LT(away, 0.55) << p << "/" << c << " seed " << seed;
      EXPECT_LT(away, LongestAbsence(*split, p) - 0.08) << p << "/" << c << " seed " << seed;
      // At least one partition per state; the price is swaps above the lower bound (most at
      // large c: 64/16 takes about 1.7x).
      EXPECT_GE(rolling->swaps + 1, rolling->states.size());
      EXPECT_LE(static_cast<double>(rolling->swaps), 1.75 * static_cast<double>(SwapLowerBound(p, c)))
          << p << "/" << c;
      auto again = MakePartitionOrder(p, c, OrderingKind::kRolling, seed);
      ASSERT_EQ(again->states.size(), rolling->states.size());
      for (size_t s = 0; s < again->states.size(); ++s) {
        EXPECT_EQ(again->states[s].resident, rolling->states[s].resident);
      }
    }
  }
}

TEST(PartitionOrderTest, StartingWithRenamesPartitionsAndKeepsTheOrdering) {
  for (OrderingKind kind : {OrderingKind::kBeta, OrderingKind::kSplit, OrderingKind::kSpread,
                            OrderingKind::kRolling}) {
    auto order = MakePartitionOrder(9, 3, kind, 4);
    ASSERT_TRUE(order.ok());
    // The previous epoch ended with {2, 5, 8}, and before that state it used 4.
    const PartitionOrder moved = StartingWith(*order, {2, 5, 8, 4}, 9);
    std::vector<uint32_t> first = moved.states[0].resident;
    std::sort(first.begin(), first.end());
    EXPECT_EQ(first, (std::vector<uint32_t>{2, 5, 8}));
    // The second state's newcomer is the next most recent partition.
    const std::vector<uint32_t>& second = moved.states[1].resident;
    EXPECT_EQ(std::count(second.begin(), second.end(), 4u), 1);
    ExpectCoversEveryBucketOnce(moved, 9, 3);
    EXPECT_EQ(moved.swaps, order->swaps);
    ASSERT_EQ(moved.states.size(), order->states.size());
    for (size_t s = 0; s < moved.states.size(); ++s) {
      EXPECT_EQ(moved.states[s].buckets.size(), order->states[s].buckets.size());
      EXPECT_EQ(moved.states[s].pieces, order->states[s].pieces);
    }
    // A shorter list (the last state of an epoch may hold fewer): the first state holds it.
    const std::vector<uint32_t> small = StartingWith(*order, {7, 1}, 9).states[0].resident;
    EXPECT_EQ(std::count(small.begin(), small.end(), 7u) + std::count(small.begin(), small.end(), 1u), 2);
    ExpectCoversEveryBucketOnce(StartingWith(*order, {7, 1}, 9), 9, 3);
  }
  // Recency: the last state's partitions, then the earlier states' newcomers.
  std::vector<BufferState> states(3);
  states[0].resident = {0, 1}, states[1].resident = {3, 1}, states[2].resident = {2, 3};
  EXPECT_EQ(RecentFirst(states), (std::vector<uint32_t>{2, 3, 1, 0}));
}

TEST(PartitionOrderTest, ResidentCountComesFromTheBudget) {
  EXPECT_EQ(ResidentPartitions(1000, 200, 100, 16).value(), 8u);
  EXPECT_EQ(ResidentPartitions(100000, 0, 100, 16).value(), 16u);
  auto tight = ResidentPartitions(250, 100, 100, 16);
  ASSERT_FALSE(tight.ok());
  EXPECT_NE(tight.status().message().find("2 must fit at once"), std::string::npos);
  EXPECT_FALSE(MakePartitionOrder(8, 1, OrderingKind::kBeta, 0).ok());
}

}  // namespace
}  // namespace sluice
