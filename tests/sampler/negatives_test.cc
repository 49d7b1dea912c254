#include "sampler/negatives.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "sampler/batch_order.h"

namespace sluice {
namespace {

TEST(NegativeSamplerTest, UniformOverResidentRangesIsReplayableAndUniform) {
  NegativeSampler s = NegativeSampler::Uniform({{100, 200}, {500, 600}});
  std::vector<int64_t> a = s.Sample({1, 2, 3}, 10, 5000);
  EXPECT_EQ(a, s.Sample({1, 2, 3}, 10, 5000));
  EXPECT_NE(a, s.Sample({1, 2, 4}, 10, 5000));
  std::vector<int> count(600, 0);
  for (int64_t v : a) {
    ASSERT_TRUE((v >= 100 && v < 200) || (v >= 500 && v < 600)) << v;
    ++count[v];
  }
  // 50,000 draws over 200 ids: 250 expected each, sd ~15.8; allow 6 sd.
  for (int v = 100; v < 600; ++v) {
    if ((v >= 100 && v < 200) || v >= 500) {
      EXPECT_NEAR(count[v], 250, 95) << v;
    }
  }
}

TEST(NegativeSamplerTest, WeightedFollowsTheWeights) {
  std::vector<double> w = {0, 1, 2, 7};  // node 0 never, node 3 70% of the time
  NegativeSampler s = NegativeSampler::Weighted(w);
  std::vector<int64_t> draws = s.Sample({5, 0, 0}, 1, 100000);
  std::vector<double> freq(4, 0);
  for (int64_t v : draws) freq[v] += 1.0 / draws.size();
  EXPECT_EQ(freq[0], 0.0);
  EXPECT_NEAR(freq[1], 0.1, 0.006);
  EXPECT_NEAR(freq[2], 0.2, 0.008);
  EXPECT_NEAR(freq[3], 0.7, 0.008);
}

TEST(EdgeFilterTest, KnowsTrueEdges) {
  EdgeFilter f;
  f.Add(1, 2, 3);
  f.Add(1'000'000'000'000, 7, 5);
  EXPECT_TRUE(f.Contains(1, 2, 3));
  EXPECT_FALSE(f.Contains(3, 2, 1));
  EXPECT_TRUE(f.Contains(1'000'000'000'000, 7, 5));
  EXPECT_EQ(f.size(), 2u);
}

TEST(BatchOrderTest, EpochPermutationIsSeededAndComplete) {
  auto a = EpochPermutation(1000, 7, 0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(a, EpochPermutation(1000, 7, 0));
  EXPECT_NE(a, EpochPermutation(1000, 7, 1));
  EXPECT_EQ(Batch(a, 300, 3).size(), 100u);
  EXPECT_EQ(Batch(a, 300, 1)[0], a[300]);
}

TEST(BatchOrderTest, GroupedOrderKeepsGroupsTogether) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> groups = {{{0, 10}, {50, 55}}, {{10, 50}}};
  auto order = GroupedOrder(groups, 3, 0);
  ASSERT_EQ(order.size(), 55u);
  std::set<int64_t> first(order.begin(), order.begin() + 15);
  for (int64_t i = 0; i < 10; ++i) EXPECT_TRUE(first.count(i));
  for (int64_t i = 50; i < 55; ++i) EXPECT_TRUE(first.count(i));
  EXPECT_NE(std::vector<int64_t>(order.begin(), order.begin() + 15),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 50, 51, 52, 53, 54}))
      << "shuffled within the group";
}

}  // namespace
}  // namespace sluice
