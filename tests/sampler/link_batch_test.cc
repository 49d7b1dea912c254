// LinkBatchSampler: a step's queries come from its edges in order (plus reciprocals), its
// negatives from its partitions only, keyed on (seed, epoch, step), and every id list indexes
// the distinct rows, which are in first-occurrence order.

#include "sampler/link_batch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

namespace sluice {
namespace {

struct Edges {
  std::vector<int64_t> src, rel, dst, order;
  EdgeColumns columns() const { return {src.data(), rel.data(), dst.data(), order.data()}; }
};

Edges Make(int n) {
  Edges e;
  for (int i = 0; i < n; ++i) {
    e.src.push_back(i % 50), e.rel.push_back(i % 3), e.dst.push_back((i * 7) % 50);
  }
  e.order.resize(n);
  std::iota(e.order.rbegin(), e.order.rend(), 0);  // reversed
  return e;
}

TEST(LinkBatchSamplerTest, QueriesNegativesAndFirstOccurrenceRows) {
  const Edges e = Make(100);
  LinkBatchOptions o;
  o.base_relations = 3;
  o.chunks = 4;
  o.negatives = 10;
  o.seed = 5;
  LinkBatchSampler sampler(200, o);
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{100, 150}, {180, 200}};
  LinkBatch b;
  sampler.Sample(e.columns(), 10, 30, 2, 7, ranges, b);
  ASSERT_EQ(b.edges, 20u);
  ASSERT_EQ(b.queries, 20u);
  ASSERT_EQ(b.chunks, 4u);
  ASSERT_EQ(b.tail_neg.size(), 40u);
  ASSERT_EQ(b.head_neg.size(), 40u);
  for (uint64_t i = 0; i < 20; ++i) {
    const int64_t edge = e.order[10 + i];
    EXPECT_EQ(b.unique[b.head[i]], e.src[edge]);
    EXPECT_EQ(b.unique[b.tail[i]], e.dst[edge]);
    EXPECT_EQ(b.rel[i], e.rel[edge]);
  }
  for (const auto* negs : {&b.tail_neg, &b.head_neg}) {
    for (int64_t x : *negs) {
      const int64_t v = b.unique[x];
      EXPECT_TRUE((v >= 100 && v < 150) || (v >= 180 && v < 200)) << v;
    }
  }
  // First-occurrence order: walking the uses meets rows 0, 1, 2, ... in order.
  int64_t next = 0;
  for (const auto* ids : {&b.head, &b.tail, &b.tail_neg, &b.head_neg}) {
    for (int64_t x : *ids) {
      ASSERT_LE(x, next);
      if (x == next) ++next;
    }
  }
  EXPECT_EQ(next, static_cast<int64_t>(b.unique.size()));
  EXPECT_EQ(std::set<int64_t>(b.unique.begin(), b.unique.end()).size(), b.unique.size());
  // Replayable: the same step again (another sampler) draws the same; another step does not.
  LinkBatchSampler again(200, o);
  LinkBatch c, d;
  again.Sample(e.columns(), 10, 30, 2, 7, ranges, c);
  EXPECT_EQ(c.unique, b.unique);
  EXPECT_EQ(c.tail_neg, b.tail_neg);
  again.Sample(e.columns(), 10, 30, 2, 8, ranges, d);
  EXPECT_NE(d.tail_neg, b.tail_neg);
}

TEST(LinkBatchSamplerTest, ReciprocalQueriesCorruptTailsOnly) {
  const Edges e = Make(40);
  LinkBatchOptions o;
  o.reciprocal = true;
  o.base_relations = 3;
  o.chunks = 2;
  o.negatives = 5;
  LinkBatchSampler sampler(60, o);
  LinkBatch b;
  const std::vector<std::pair<int64_t, int64_t>> all = {{0, 60}};
  sampler.Sample(e.columns(), 0, 10, 0, 0, all, b);
  ASSERT_EQ(b.queries, 20u);
  EXPECT_TRUE(b.head_neg.empty());
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(b.unique[b.head[10 + i]], b.unique[b.tail[i]]);
    EXPECT_EQ(b.unique[b.tail[10 + i]], b.unique[b.head[i]]);
    EXPECT_EQ(b.rel[10 + i], b.rel[i] + 3);
  }
}

// 1vsAll: one chunk of every node of the step's partitions in partition order, and each
// query's true candidate's column among them (-1 when the node lies outside them).
TEST(LinkBatchSamplerTest, AllNegativesAreThePartitionsNodesWithTheTrueColumns) {
  Edges e = Make(40);
  e.dst[e.order[3]] = 170;  // outside the ranges: no column
  LinkBatchOptions o;
  o.base_relations = 3;
  o.all_negatives = true;
  o.max_candidates = 200;
  LinkBatchSampler sampler(200, o);
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{30, 60}, {0, 20}, {160, 169}};
  LinkBatch b;
  sampler.Sample(e.columns(), 0, 10, 1, 2, ranges, b);
  ASSERT_EQ(b.chunks, 1u);
  ASSERT_EQ(b.per_chunk, 59u);
  ASSERT_EQ(b.tail_neg.size(), 59u);
  ASSERT_EQ(b.head_neg.size(), 59u);
  std::vector<int64_t> want;
  for (const auto& [lo, hi] : ranges) {
    for (int64_t v = lo; v < hi; ++v) want.push_back(v);
  }
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(b.unique[b.tail_neg[j]], want[j]);
    EXPECT_EQ(b.unique[b.head_neg[j]], want[j]);
  }
  ASSERT_EQ(b.tail_col.size(), 10u);
  ASSERT_EQ(b.head_col.size(), 10u);
  for (uint64_t i = 0; i < 10; ++i) {
    for (const auto& [ids, cols] : {std::pair{&b.tail, &b.tail_col}, std::pair{&b.head, &b.head_col}}) {
      const int64_t col = (*cols)[i];
      const int64_t v = b.unique[(*ids)[i]];
      if (col < 0) {
        EXPECT_EQ(std::count(want.begin(), want.end(), v), 0) << v;
      } else {
        EXPECT_EQ(want[static_cast<size_t>(col)], v);
        EXPECT_EQ(b.tail_neg[static_cast<size_t>(col)], (*ids)[i]);  // the same row
      }
    }
  }
  EXPECT_EQ(b.tail_col[3], -1);
  // Reciprocal: tails only.
  o.reciprocal = true;
  LinkBatchSampler recip(200, o);
  recip.Sample(e.columns(), 0, 10, 1, 2, ranges, b);
  EXPECT_EQ(b.queries, 20u);
  EXPECT_TRUE(b.head_neg.empty() && b.head_col.empty());
  EXPECT_EQ(b.tail_col.size(), 20u);
}

}  // namespace
}  // namespace sluice
