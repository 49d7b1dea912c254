#include "sampler/khop_nodes.h"

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "sampler/khop_sampler.h"
#include "tests/sampler/khop_test_util.h"

namespace sluice {
namespace {

using khop_test::PowerLawGraph;
using khop_test::Seeds;

std::vector<uint64_t> SortedNodes(const SampledSubgraph& s) {
  std::vector<uint64_t> v(s.nodes().begin(), s.nodes().end());
  std::sort(v.begin(), v.end());
  return v;
}

// The node set is the sampler's for every fanout shape (all neighbours, with and without
// replacement, a hop that adds nothing), keys and batch sizes from a few seeds to most of the
// graph (both ways of emitting the set), across calls that reuse the bits.
TEST(KHopNodeSetTest, HoldsExactlyTheSamplersNodes) {
  const CsrGraph g = PowerLawGraph(3000, 24000, 7);
  KHopNodeSet nodes(g);
  const std::vector<KHopOptions> shapes = {
      {{15, 10, 5}, false}, {{3, 3}, true}, {{-1, 2}, false}, {{25}, false}, {{2, 0, 4}, false}, {{1, 1, 1, 1, 1}, true}};
  uint64_t calls = 0;
  for (const KHopOptions& o : shapes) {
    KHopSampler sampler(g, o);
    for (const int batch : {1, 7, 64, 900}) {
      for (uint64_t step = 0; step < 3; ++step) {
        const std::vector<int64_t> seeds = Seeds(g.num_nodes(), batch, step * 31 + static_cast<uint64_t>(batch));
        const SampleKey key{5, 2, step};
        const std::vector<uint64_t> want = SortedNodes(sampler.Sample(seeds, key));
        std::vector<uint64_t> got = {~uint64_t{0}};  // appended after what is there
        nodes.Sample(seeds, key, o, got);
        ASSERT_EQ(got.front(), ~uint64_t{0});
        got.erase(got.begin());
        ASSERT_EQ(got, want) << "fanouts[0] " << o.fanouts[0] << " batch " << batch << " step " << step;
        ++calls;
      }
    }
  }
  EXPECT_EQ(calls, shapes.size() * 12);
}

// Another key draws another sample: the set depends on the key, not on the last call.
TEST(KHopNodeSetTest, FollowsTheKey) {
  const CsrGraph g = PowerLawGraph(5000, 40000, 11);
  const KHopOptions o{{10, 5}, false};
  KHopNodeSet nodes(g);
  KHopSampler sampler(g, o);
  const std::vector<int64_t> seeds = Seeds(g.num_nodes(), 50, 3);
  std::vector<uint64_t> a, b, again;
  nodes.Sample(seeds, {1, 0, 0}, o, a);
  nodes.Sample(seeds, {1, 0, 1}, o, b);
  nodes.Sample(seeds, {1, 0, 0}, o, again);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, again);
  EXPECT_EQ(b, SortedNodes(sampler.Sample(seeds, {1, 0, 1})));
}

}  // namespace
}  // namespace sluice
