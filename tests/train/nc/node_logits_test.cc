#include "train/nc/node_logits.h"

#include <gtest/gtest.h>

#include <vector>

namespace sluice {
namespace {

// A pass over nodes 0..9 in steps of 3 (the last of 1), each node's row {10 v, 10 v + 1}: every
// wanted node gets its own row at its place, in any order and as often as it is wanted.
TEST(NodeLogitsTest, EachWantedNodeGetsItsRowAtItsPlace) {
  const std::vector<int64_t> wanted = {7, 2, 9, 2, 0, 5};
  const NodeLogits kept(wanted, 2);
  for (int64_t first = 0; first < 10; first += 3) {
    const int64_t n = std::min<int64_t>(3, 10 - first);
    std::vector<float> rows;
    for (int64_t v = first; v < first + n; ++v) rows.insert(rows.end(), {10.0f * v, 10.0f * v + 1});
    kept.Keep(first, static_cast<size_t>(n), rows.data());
  }
  const torch::Tensor& got = kept.logits();
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{6, 2}));
  for (size_t i = 0; i < wanted.size(); ++i) {
    EXPECT_EQ(got[static_cast<int64_t>(i)][0].item<float>(), 10.0f * wanted[i]) << i;
    EXPECT_EQ(got[static_cast<int64_t>(i)][1].item<float>(), 10.0f * wanted[i] + 1) << i;
  }
}

// A step none of whose nodes is wanted writes nothing.
TEST(NodeLogitsTest, AStepWithoutWantedNodesWritesNothing) {
  const std::vector<int64_t> wanted = {4};
  const NodeLogits kept(wanted, 1);
  kept.logits().fill_(-1.0f);
  const std::vector<float> rows = {1, 2, 3};
  kept.Keep(0, 3, rows.data());
  kept.Keep(5, 3, rows.data());
  EXPECT_EQ(kept.logits()[0][0].item<float>(), -1.0f);
  kept.Keep(3, 3, rows.data());
  EXPECT_EQ(kept.logits()[0][0].item<float>(), 2.0f);
}

}  // namespace
}  // namespace sluice
