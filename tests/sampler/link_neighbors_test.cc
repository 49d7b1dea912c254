// LinkNeighborSampler: each of a step's rows draws up to `fanout` distinct neighbour slots from
// its out- and in-edges together, keyed on (seed, epoch, step, node); neighbours that are no
// seed are appended to the rows once; evaluation draws do not depend on the seeds' blocks.

#include "sampler/link_neighbors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace sluice {
namespace {

// A star (node 0 joined to 1..40, half the edges each way), a path 41-42-43 and an isolated 44.
struct Graph {
  std::vector<int64_t> src, dst;
  Graph() {
    for (int64_t v = 1; v <= 40; ++v) {
      src.push_back(v % 2 ? 0 : v), dst.push_back(v % 2 ? v : 0);
    }
    src.push_back(41), dst.push_back(42), src.push_back(42), dst.push_back(43);
  }
  // v's neighbours in either direction, with multiplicity.
  std::multiset<int64_t> Of(int64_t v) const {
    std::multiset<int64_t> n;
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == v) n.insert(dst[i]);
      if (dst[i] == v) n.insert(src[i]);
    }
    return n;
  }
};

LinkBatch Seeds(std::vector<int64_t> ids) {
  LinkBatch b;
  b.unique = std::move(ids);
  return b;
}

TEST(LinkNeighborSamplerTest, DrawsNeighboursFromBothDirectionsAndAppendsNewRowsOnce) {
  const Graph g;
  LinkNeighborSampler s(45, 5, 7);
  s.SetGraph(g.src, g.dst);
  LinkBatch b = Seeds({0, 42, 44, 7});
  s.Sample(2, 3, b);
  ASSERT_EQ(b.seeds, 4u);
  ASSERT_EQ(b.nbr_offsets.size(), 5u);
  const auto count = [&](int i) { return b.nbr_offsets[i + 1] - b.nbr_offsets[i]; };
  EXPECT_EQ(count(0), 5);  // the hub: fanout of its 40
  EXPECT_EQ(count(1), 2);  // 42: both its neighbours, one in and one out
  EXPECT_EQ(count(2), 0);  // isolated
  EXPECT_EQ(count(3), 1);  // 7: the hub
  for (int i = 0; i < 4; ++i) {
    const std::multiset<int64_t> truth = g.Of(b.unique[i]);
    std::set<int64_t> drawn;
    for (int64_t k = b.nbr_offsets[i]; k < b.nbr_offsets[i + 1]; ++k) {
      const int64_t u = b.unique.at(static_cast<size_t>(b.nbr[static_cast<size_t>(k)]));
      EXPECT_TRUE(truth.count(u)) << u << " is no neighbour of " << b.unique[i];
      drawn.insert(u);
    }
    EXPECT_EQ(drawn.size(), static_cast<size_t>(count(i))) << "a neighbour drawn twice";
  }
  EXPECT_EQ(std::set<int64_t>(b.unique.begin(), b.unique.end()).size(), b.unique.size());
  EXPECT_EQ(b.unique[4 + 0], b.unique[static_cast<size_t>(b.nbr[0])]) << "new rows in draw order";
}

TEST(LinkNeighborSamplerTest, TheDrawIsKeyedOnStepAndNodeAndEvaluationOnTheNodeAlone) {
  const Graph g;
  LinkNeighborSampler s(45, 5, 7);
  s.SetGraph(g.src, g.dst);
  const auto hub = [&](uint64_t epoch, uint64_t step, std::vector<int64_t> seeds) {
    LinkBatch b = Seeds(std::move(seeds));
    s.Sample(epoch, step, b);
    std::vector<int64_t> out;
    for (int64_t k = b.nbr_offsets[0]; k < b.nbr_offsets[1]; ++k) out.push_back(b.unique[b.nbr[k]]);
    return out;
  };
  EXPECT_EQ(hub(1, 4, {0}), hub(1, 4, {0, 41}));  // the other seeds do not matter
  EXPECT_NE(hub(1, 4, {0}), hub(1, 5, {0}));
  EXPECT_NE(hub(1, 4, {0}), hub(2, 4, {0}));
  std::vector<int64_t> all(45), offsets, nbr, one_offsets, one_nbr;
  std::iota(all.begin(), all.end(), 0);
  s.SampleIds(all, offsets, nbr);
  const std::vector<int64_t> just_hub = {0};
  s.SampleIds(just_hub, one_offsets, one_nbr);
  EXPECT_EQ(std::vector<int64_t>(nbr.begin(), nbr.begin() + offsets[1]), one_nbr);
  EXPECT_EQ(offsets.back(), static_cast<int64_t>(nbr.size()));
}

TEST(LinkNeighborSamplerTest, TheGraphIsTheOneLastSet) {
  const Graph g;
  LinkNeighborSampler s(45, 10, 7);
  s.SetGraph(g.src, g.dst);
  const std::vector<int64_t> path_src = {41}, path_dst = {43};
  s.SetGraph(path_src, path_dst);
  LinkBatch b = Seeds({0, 41});
  s.Sample(0, 0, b);
  EXPECT_EQ(b.nbr_offsets, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(b.unique, (std::vector<int64_t>{0, 41, 43}));
}

}  // namespace
}  // namespace sluice
