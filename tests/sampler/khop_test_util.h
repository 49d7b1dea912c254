#pragma once
// Helpers shared by the CPU and CUDA k-hop sampler tests.

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "sampler/khop_sampler.h"

namespace sluice::khop_test {

inline CsrGraph PowerLawGraph(uint64_t nodes, uint64_t edges, uint64_t seed) {
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

inline std::vector<int64_t> Seeds(uint64_t nodes, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> s(n);
  for (auto& v : s) v = static_cast<int64_t>(rng() % nodes);
  return s;
}

inline void ExpectInvariants(const CsrGraph& g, const SampledSubgraph& s, const KHopOptions& o) {
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
      if (o.replace && g.degree(gv) > 0 && h == 0) {  // fanout -1 takes every neighbour once
        ASSERT_EQ(n, o.fanouts[0] < 0 ? g.degree(gv) : static_cast<uint64_t>(o.fanouts[0]));
      }
      if (!o.replace && h == 0) {
        ASSERT_EQ(n, std::min<uint64_t>(g.degree(gv), o.fanouts[0] < 0 ? ~0ull : o.fanouts[0]));
      }
    }
  }
}

inline bool Same(const SampledSubgraph& a, const SampledSubgraph& b) {
  if (a.layers != b.layers || a.blocks.size() != b.blocks.size()) return false;
  for (size_t h = 0; h < a.blocks.size(); ++h) {
    if (a.blocks[h].offsets != b.blocks[h].offsets || a.blocks[h].src_local != b.blocks[h].src_local) {
      return false;
    }
  }
  return true;
}

}  // namespace sluice::khop_test
