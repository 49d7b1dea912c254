#include "sampler/khop_sampler.h"

#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace sluice {
namespace {

CsrGraph PowerLawGraph(uint64_t nodes, uint64_t edges, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> from(edges), to(edges);
  for (uint64_t i = 0; i < edges; ++i) {
    from[i] = static_cast<int64_t>(rng() % nodes);
    to[i] = std::min<int64_t>(static_cast<int64_t>(nodes * std::pow(u(rng), 3)), nodes - 1);
  }
  // No parallel edges, so "distinct positions" means "distinct neighbours".
  std::set<std::pair<int64_t, int64_t>> unique;
  for (uint64_t i = 0; i < edges; ++i) unique.insert({from[i], to[i]});
  from.clear();
  to.clear();
  for (auto [a, b] : unique) from.push_back(a), to.push_back(b);
  return CsrGraph::FromEdges(nodes, from, to);
}

std::vector<int64_t> Seeds(uint64_t nodes, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> s(n);
  for (auto& v : s) v = static_cast<int64_t>(rng() % nodes);
  return s;
}

void ExpectInvariants(const CsrGraph& g, const SampledSubgraph& s, const KHopOptions& o) {
  ASSERT_EQ(s.layers.size(), o.fanouts.size() + 1);
  for (size_t h = 0; h < s.layers.size(); ++h) {
    std::set<int64_t> unique(s.layers[h].begin(), s.layers[h].end());
    ASSERT_EQ(unique.size(), s.layers[h].size()) << "duplicates in layer " << h;
    if (h > 0) {
      ASSERT_TRUE(std::equal(s.layers[h - 1].begin(), s.layers[h - 1].end(), s.layers[h].begin()))
          << "layer " << h - 1 << " is not a prefix of layer " << h;
    }
  }
  for (size_t h = 0; h < s.blocks.size(); ++h) {
    const SampledBlock& b = s.blocks[h];
    ASSERT_EQ(b.num_dst, s.layers[h].size());
    ASSERT_EQ(b.num_src, s.layers[h + 1].size());
    for (uint64_t v = 0; v < b.num_dst; ++v) {
      const int64_t gv = s.layers[h][v];
      const uint64_t n = b.offsets[v + 1] - b.offsets[v];
      std::set<int64_t> distinct;
      for (uint64_t i = b.offsets[v]; i < b.offsets[v + 1]; ++i) {
        ASSERT_LT(static_cast<uint64_t>(b.src_local[i]), b.num_src);
        const int64_t gu = s.layers[h + 1][b.src_local[i]];
        ASSERT_TRUE(g.HasEdge(gv, gu)) << "sampled edge " << gv << "->" << gu << " does not exist";
        distinct.insert(gu);
      }
      // A node's sample was drawn with the fanout of the hop that expanded it: <= max fanout.
      const int most = *std::max_element(o.fanouts.begin(), o.fanouts.end());
      const bool bounded = *std::min_element(o.fanouts.begin(), o.fanouts.end()) >= 0;
      if (bounded) {
        ASSERT_LE(n, static_cast<uint64_t>(most));
      }
      if (!o.replace) {
        ASSERT_EQ(distinct.size(), n) << "a sample without replacement repeats a neighbour";
      }
      if (o.replace && g.degree(gv) > 0 && h == 0) {
        ASSERT_EQ(n, static_cast<uint64_t>(o.fanouts[0]));
      }
      if (!o.replace && h == 0) {
        ASSERT_EQ(n, std::min<uint64_t>(g.degree(gv), o.fanouts[0] < 0 ? ~0ull : o.fanouts[0]));
      }
    }
  }
}

bool Same(const SampledSubgraph& a, const SampledSubgraph& b) {
  if (a.layers != b.layers || a.blocks.size() != b.blocks.size()) return false;
  for (size_t h = 0; h < a.blocks.size(); ++h) {
    if (a.blocks[h].offsets != b.blocks[h].offsets || a.blocks[h].src_local != b.blocks[h].src_local) {
      return false;
    }
  }
  return true;
}

TEST(KHopSamplerTest, SamplesValidDeduplicatedLayeredBlocks) {
  CsrGraph g = PowerLawGraph(5000, 60000, 1);
  auto seeds = Seeds(5000, 300, 2);
  for (bool replace : {false, true}) {
    KHopOptions o;
    o.fanouts = {15, 10, 5};
    o.replace = replace;
    SampledSubgraph s = SampleKHop(g, seeds, o, {7, 0, 0});
    ExpectInvariants(g, s, o);
  }
  KHopOptions all;
  all.fanouts = {-1, 3};
  SampledSubgraph s = SampleKHop(g, seeds, all, {7, 0, 0});
  ExpectInvariants(g, s, all);
  for (uint64_t v = 0; v < s.blocks[0].num_dst; ++v) {
    EXPECT_EQ(s.blocks[0].offsets[v + 1] - s.blocks[0].offsets[v], g.degree(s.layers[0][v]));
  }
}

TEST(KHopSamplerTest, OutputIsIdenticalForOneAndManyThreadsAndReplayable) {
  CsrGraph g = PowerLawGraph(20000, 200000, 3);
  auto seeds = Seeds(20000, 1024, 4);
  KHopOptions o;
  SampledSubgraph many = SampleKHop(g, seeds, o, {1, 2, 3});
  SampledSubgraph one;
  {
    tbb::global_control single(tbb::global_control::max_allowed_parallelism, 1);
    one = SampleKHop(g, seeds, o, {1, 2, 3});
  }
  EXPECT_TRUE(Same(many, one));
  EXPECT_TRUE(Same(many, SampleKHop(g, seeds, o, {1, 2, 3})));
  EXPECT_FALSE(Same(many, SampleKHop(g, seeds, o, {1, 2, 4}))) << "another step, another sample";
}

TEST(KHopSamplerTest, NeighboursAreDrawnUniformly) {
  // Node 0 has 10 neighbours; with fanout 3 without replacement each appears with p = 0.3.
  std::vector<int64_t> from(10, 0), to(10);
  for (int i = 0; i < 10; ++i) to[i] = i + 1;
  CsrGraph g = CsrGraph::FromEdges(11, from, to);
  KHopOptions o;
  o.fanouts = {3};
  std::vector<int> count(11, 0);
  const int trials = 20000;
  std::vector<int64_t> seed = {0};
  for (int t = 0; t < trials; ++t) {
    SampledSubgraph s = SampleKHop(g, seed, o, {9, 0, static_cast<uint64_t>(t)});
    for (size_t i = 1; i < s.layers[1].size(); ++i) ++count[s.layers[1][i]];
  }
  // Binomial(20000, 0.3): sd = 65; allow 5 sd.
  for (int v = 1; v <= 10; ++v) EXPECT_NEAR(count[v], 0.3 * trials, 5 * 65) << "neighbour " << v;
}

}  // namespace
}  // namespace sluice
