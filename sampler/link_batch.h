#pragma once
// One link-prediction step's samples: its queries (head, relation, tail per edge, plus the
// reciprocal (tail, r + R, head) when asked), its negatives (chunks x per_chunk per corrupted
// side, shared by the queries of a chunk, drawn uniformly from the step's partitions and keyed
// on (seed, epoch, 2 * step + side)), and its distinct rows in first-occurrence order (heads,
// tails, tail negatives, head negatives), with every id list rewritten as indices into them.
// With `all_negatives` (1vsAll scoring) a step has one chunk whose negatives are every node of
// its partitions, in partition order, and tail_col / head_col give each query's true
// candidate's column among them (its row in the softmax, which the model leaves out).
// Everything a step needs but its rows, so it can be sampled ahead of compute; torch-free.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice {

// A step cut into virtual shards (LinkBatchOptions::shards; train/data_parallel.h): shard v's
// queries are [query_begin, query_begin + queries) of the step's head, rel and tail, its
// negatives [tail_neg_begin, tail_neg_end) of tail_neg and [head_neg_begin, head_neg_end) of
// head_neg, its own chunks of its own draws.
struct LinkShard {
  uint64_t edges = 0, queries = 0;
  uint32_t chunks = 0, per_chunk = 0;
  uint64_t query_begin = 0, tail_neg_begin = 0, tail_neg_end = 0, head_neg_begin = 0, head_neg_end = 0;
  // Its uses (heads, tails, tail negatives, head negatives).
  uint64_t uses() const { return 2 * queries + (tail_neg_end - tail_neg_begin) + (head_neg_end - head_neg_begin); }
};

struct LinkBatch {
  uint64_t edges = 0, queries = 0;  // queries: 2 * edges when reciprocal
  uint32_t chunks = 0, per_chunk = 0;
  // Indices into `unique` (relation ids in `rel`).
  std::vector<int64_t> head, rel, tail, tail_neg, head_neg;
  std::vector<int64_t> unique;  // node ids, first-occurrence order
  // all_negatives only: per query, the column of its true tail in tail_neg (of its true head in
  // head_neg); -1 where it is not among them.
  std::vector<int64_t> tail_col, head_col;
  // With an encoder (sampler/link_neighbors.h): the first `seeds` rows of `unique` are the
  // step's own; seed i's sampled neighbours are unique[nbr[nbr_offsets[i] .. nbr_offsets[i + 1])]
  // (indices into unique; neighbours that are no seed follow the seeds there).
  uint64_t seeds = 0;
  std::vector<int64_t> nbr_offsets, nbr;
  // With options.shards: the step's virtual shards, in order (chunks and per_chunk above unset).
  std::vector<LinkShard> shards;
};

struct LinkBatchOptions {
  bool reciprocal = false;
  uint64_t base_relations = 1;  // relation r's reciprocal is r + base_relations
  uint32_t chunks = 1;
  uint32_t negatives = 1;  // per chunk and corrupted side
  bool all_negatives = false;  // 1vsAll: every node of the step's partitions, one chunk
  uint64_t max_candidates = 0; // all_negatives: the most nodes a step's partitions hold (sizes)
  uint64_t seed = 1;
  // Virtual shards (0: none): a step's edges cut into this many consecutive ranges, each with
  // ShardChunks() chunks of its own negatives keyed on (seed, epoch, 2 (step x shards + v) + side).
  // Not with all_negatives.
  uint32_t shards = 0;
  uint32_t ShardChunks() const { return shards == 0 ? chunks : std::max(1u, (chunks + shards - 1) / shards); }
};

// The bytes a LinkBatch of `edges` edges holds (its id lists, unique rows at most as many as
// its uses), for the memory plan's count of the sampler ring.
uint64_t LinkBatchBytes(uint64_t edges, const LinkBatchOptions& options);

// The edges a step draws its queries from: the edges of its buffer state, in `order`.
struct EdgeColumns {
  const int64_t* src = nullptr;
  const int64_t* rel = nullptr;
  const int64_t* dst = nullptr;
  const int64_t* order = nullptr;
};

// Samples steps one at a time (a stamp table over the nodes: one thread).
class LinkBatchSampler {
 public:
  LinkBatchSampler(uint64_t num_nodes, LinkBatchOptions options);
  // Step `index` of epoch `epoch`: edges order[begin, end) of `edges`; negatives uniform over
  // the node ranges [begin, end) of `ranges` (the step's partitions, in partition order). With
  // options.shards, in virtual shards (LinkShard).
  void Sample(const EdgeColumns& edges, uint64_t begin, uint64_t end, uint64_t epoch,
              uint64_t index, std::span<const std::pair<int64_t, int64_t>> ranges,
              LinkBatch& out);

 private:
  void AllNegatives(std::span<const std::pair<int64_t, int64_t>> ranges, LinkBatch& out) const;
  // Appends the queries of edges order[begin, end) (then their reciprocals) to out's lists.
  void AppendQueries(const EdgeColumns& edges, uint64_t begin, uint64_t end, LinkBatch& out) const;
  void SampleShards(const EdgeColumns& edges, uint64_t begin, uint64_t end, uint64_t epoch, uint64_t index,
                    std::span<const std::pair<int64_t, int64_t>> ranges, LinkBatch& out);
  void UniqueIds(LinkBatch& out);

  LinkBatchOptions options_;
  std::vector<uint64_t> stamp_;  // node -> (call << 32) | local index
  uint32_t call_ = 0;
};

}  // namespace sluice
