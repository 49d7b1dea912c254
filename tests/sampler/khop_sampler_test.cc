#include "sampler/khop_sampler.h"
#include "sampler/random.h"
#include "tests/sampler/khop_test_util.h"

#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <unordered_map>

#include <gtest/gtest.h>

namespace sluice {
namespace {

using khop_test::ExpectInvariants;
using khop_test::PowerLawGraph;
using khop_test::Same;
using khop_test::Seeds;

// An obviously serial reference of the documented semantics: a hash map for local indices,
// one node at a time, the same counter-based draws.
SampledSubgraph ReferenceKHop(const CsrGraph& g, std::span<const int64_t> seeds,
                              const KHopOptions& o, const SampleKey& key) {
  SampledSubgraph s;
  std::unordered_map<int64_t, int64_t> local;
  std::vector<int64_t> layer;
  auto add = [&](int64_t v) {
    if (local.emplace(v, static_cast<int64_t>(layer.size())).second) layer.push_back(v);
  };
  for (int64_t v : seeds) add(v);
  s.layers.push_back(layer);
  std::vector<std::vector<int64_t>> sample_of;  // by local index
  for (size_t h = 0; h < o.fanouts.size(); ++h) {
    const Key hop = Key(key.seed).With(key.epoch).With(key.step).With(h + 1);
    const size_t frontier_begin = sample_of.size(), dst = layer.size();
    for (size_t i = frontier_begin; i < dst; ++i) {
      const int64_t v = layer[i];
      auto n = g.neighbors(v);
      const uint64_t d = n.size();
      std::vector<int64_t> pick;
      const int f = o.fanouts[h];
      if (f < 0 || (!o.replace && d <= static_cast<uint64_t>(f))) {
        pick.assign(n.begin(), n.end());
      } else if (o.replace) {
        for (int j = 0; j < f; ++j) pick.push_back(n[hop.With(v).Below(j, d)]);
      } else {
        std::vector<uint64_t> pos;
        for (uint64_t j = d - f; j < d; ++j) {
          const uint64_t t = hop.With(v).Below(j, j + 1);
          pos.push_back(std::find(pos.begin(), pos.end(), t) != pos.end() ? j : t);
        }
        for (uint64_t p : pos) pick.push_back(n[p]);
      }
      sample_of.push_back(pick);
    }
    for (size_t i = frontier_begin; i < dst; ++i) {
      for (int64_t u : sample_of[i]) add(u);
    }
    SampledBlock b;
    b.num_dst = dst;
    b.num_src = layer.size();
    b.offsets.push_back(0);
    for (size_t i = 0; i < dst; ++i) {
      for (int64_t u : sample_of[i]) b.src_local.push_back(local.at(u));
      b.offsets.push_back(b.src_local.size());
    }
    s.blocks.push_back(b);
    s.layers.push_back(layer);
  }
  return s;
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
  for (bool replace : {false, true}) {  // fanout -1 takes every neighbour once, either way
    KHopOptions all;
    all.fanouts = {-1, 3};
    all.replace = replace;
    SampledSubgraph s = SampleKHop(g, seeds, all, {7, 0, 0});
    ExpectInvariants(g, s, all);
    for (uint64_t v = 0; v < s.blocks[0].num_dst; ++v) {
      EXPECT_EQ(s.blocks[0].offsets[v + 1] - s.blocks[0].offsets[v], g.degree(s.layers[0][v]));
    }
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

TEST(KHopSamplerTest, MatchesASerialReferenceExactlyAtAnyThreadCount) {
  // Big enough that every parallel pass splits (hops of >100k draws), reused across calls so
  // stale stamps from earlier calls must not leak in.
  CsrGraph g = PowerLawGraph(50000, 600000, 11);
  for (bool replace : {true, false}) {
    KHopOptions o;
    o.fanouts = {15, 10, 5};
    o.replace = replace;
    KHopSampler sampler(g, o);
    for (uint64_t step = 0; step < 3; ++step) {
      auto seeds = Seeds(50000, 1024, 100 + step);
      SampledSubgraph want = ReferenceKHop(g, seeds, o, {5, 1, step});
      for (int threads : {1, 2, 4}) {
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
        EXPECT_TRUE(Same(sampler.Sample(seeds, {5, 1, step}), want))
            << "replace " << replace << " step " << step << " threads " << threads;
      }
    }
  }
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
