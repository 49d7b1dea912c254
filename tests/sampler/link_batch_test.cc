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

// Virtual shards: shard v holds edges [n v / V, n (v + 1) / V) of the step (then their
// reciprocals), its own chunks of negatives drawn per shard, keyed on the step and the shard;
// a shard's draws do not depend on how many shards a rank computes, and an empty shard has none.
TEST(LinkBatchSamplerTest, VirtualShardsCutTheStepAndDrawTheirOwnNegatives) {
  const Edges e = Make(100);
  LinkBatchOptions o;
  o.base_relations = 3;
  o.reciprocal = true;
  o.chunks = 5;
  o.negatives = 7;
  o.seed = 5;
  o.shards = 4;
  ASSERT_EQ(o.ShardChunks(), 2u);  // ceil(5 / 4)
  LinkBatchSampler sampler(200, o);
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 200}};
  LinkBatch b;
  sampler.Sample(e.columns(), 10, 31, 3, 9, ranges, b);  // 21 edges: shards of 5, 5, 5, 6
  ASSERT_EQ(b.shards.size(), 4u);
  EXPECT_EQ(b.edges, 21u);
  EXPECT_EQ(b.queries, 42u);
  uint64_t edge = 10, negs = 0;
  for (size_t v = 0; v < 4; ++v) {
    const LinkShard& s = b.shards[v];
    EXPECT_EQ(s.edges, v == 3 ? 6u : 5u);
    ASSERT_EQ(s.queries, 2 * s.edges);
    for (uint64_t i = 0; i < s.edges; ++i, ++edge) {
      const int64_t id = e.order[edge];
      EXPECT_EQ(b.unique[b.head[s.query_begin + i]], e.src[id]);
      EXPECT_EQ(b.unique[b.tail[s.query_begin + i]], e.dst[id]);
      EXPECT_EQ(b.unique[b.head[s.query_begin + s.edges + i]], e.dst[id]);  // its reciprocal
      EXPECT_EQ(b.rel[s.query_begin + s.edges + i], e.rel[id] + 3);
    }
    EXPECT_EQ(s.chunks, 2u);
    EXPECT_EQ(s.tail_neg_begin, negs);
    EXPECT_EQ(s.tail_neg_end - s.tail_neg_begin, 14u);
    EXPECT_EQ(s.head_neg_end, s.head_neg_begin);  // reciprocal: tails only
    EXPECT_EQ(s.uses(), 2 * s.queries + 14);
    negs = s.tail_neg_end;
  }
  EXPECT_EQ(b.tail_neg.size(), negs);
  // Shards draw apart: no two shards' negatives are the same list.
  std::set<std::vector<int64_t>> draws;
  for (const LinkShard& s : b.shards) {
    std::vector<int64_t> ids;
    for (uint64_t i = s.tail_neg_begin; i < s.tail_neg_end; ++i) ids.push_back(b.unique[b.tail_neg[i]]);
    draws.insert(ids);
  }
  EXPECT_EQ(draws.size(), 4u);
  // The same step again: the same draws; one more shard than edges leaves a shard empty.
  LinkBatchSampler again(200, o);
  LinkBatch c;
  again.Sample(e.columns(), 10, 31, 3, 9, ranges, c);
  EXPECT_EQ(c.unique, b.unique);
  EXPECT_EQ(c.tail_neg, b.tail_neg);
  o.shards = 3;
  LinkBatchSampler three(200, o);
  three.Sample(e.columns(), 10, 12, 3, 9, ranges, c);  // 2 edges, 3 shards
  ASSERT_EQ(c.shards.size(), 3u);
  EXPECT_EQ(c.shards[0].queries, 0u);
  EXPECT_EQ(c.shards[0].tail_neg_end, c.shards[0].tail_neg_begin);
  EXPECT_EQ(c.shards[1].edges + c.shards[2].edges, 2u);
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
