#include "sampler/link_batch.h"

#include <algorithm>

#include "sampler/negatives.h"

namespace sluice {

uint64_t LinkBatchBytes(uint64_t edges, const LinkBatchOptions& options) {
  const uint64_t queries = options.reciprocal ? 2 * edges : edges;
  const uint64_t chunks = options.shards == 0 ? options.chunks : uint64_t{options.shards} * options.ShardChunks();
  const uint64_t per_side = options.all_negatives ? options.max_candidates : chunks * options.negatives;
  const uint64_t negatives = per_side * (options.reciprocal ? 1 : 2);
  const uint64_t cols = options.all_negatives ? 2 * queries : 0;
  // head, rel, tail, then unique: as many as the uses at most.
  return (3 * queries + negatives + 2 * queries + negatives + cols) * sizeof(int64_t);
}

LinkBatchSampler::LinkBatchSampler(uint64_t num_nodes, LinkBatchOptions options)
    : options_(options), stamp_(num_nodes, 0) {}

void LinkBatchSampler::Sample(const EdgeColumns& edges, uint64_t begin, uint64_t end,
                              uint64_t epoch, uint64_t index,
                              std::span<const std::pair<int64_t, int64_t>> ranges,
                              LinkBatch& out) {
  out.shards.clear();
  if (options_.shards > 0) return SampleShards(edges, begin, end, epoch, index, ranges, out);
  out.head.clear(), out.rel.clear(), out.tail.clear();
  AppendQueries(edges, begin, end, out);
  out.edges = end - begin, out.queries = out.head.size();
  const bool reciprocal = options_.reciprocal;
  const uint64_t q = out.queries;
  out.tail_col.clear(), out.head_col.clear();
  if (options_.all_negatives) {
    AllNegatives(ranges, out);
    UniqueIds(out);
    return;
  }
  out.chunks = static_cast<uint32_t>(std::min<uint64_t>(options_.chunks, q));
  out.per_chunk = options_.negatives;
  std::vector<NodeRange> node_ranges;
  for (const auto& [lo, hi] : ranges) node_ranges.push_back({lo, hi});
  const NegativeSampler negatives = NegativeSampler::Uniform(node_ranges);
  out.tail_neg = negatives.Sample({options_.seed, epoch, 2 * index}, out.chunks, out.per_chunk);
  out.head_neg.clear();
  if (!reciprocal) {
    out.head_neg = negatives.Sample({options_.seed, epoch, 2 * index + 1}, out.chunks, out.per_chunk);
  }
  UniqueIds(out);
}

void LinkBatchSampler::AppendQueries(const EdgeColumns& edges, uint64_t begin, uint64_t end,
                                     LinkBatch& out) const {
  for (int pass = 0; pass < (options_.reciprocal ? 2 : 1); ++pass) {
    for (uint64_t i = begin; i < end; ++i) {
      const int64_t e = edges.order[i];
      if (pass == 0) {
        out.head.push_back(edges.src[e]), out.rel.push_back(edges.rel[e]), out.tail.push_back(edges.dst[e]);
      } else {
        out.head.push_back(edges.dst[e]);
        out.rel.push_back(edges.rel[e] + static_cast<int64_t>(options_.base_relations));
        out.tail.push_back(edges.src[e]);
      }
    }
  }
}

// Shard v: edges [begin + n v / V, begin + n (v + 1) / V), its queries (then their reciprocals)
// after the shards before it, its own chunks of negatives.
void LinkBatchSampler::SampleShards(const EdgeColumns& edges, uint64_t begin, uint64_t end, uint64_t epoch,
                                    uint64_t index, std::span<const std::pair<int64_t, int64_t>> ranges,
                                    LinkBatch& out) {
  const uint64_t n = end - begin, shards = options_.shards;
  out.edges = n, out.chunks = 0, out.per_chunk = 0;
  out.head.clear(), out.rel.clear(), out.tail.clear(), out.tail_neg.clear(), out.head_neg.clear();
  out.tail_col.clear(), out.head_col.clear();
  std::vector<NodeRange> node_ranges;
  for (const auto& [lo, hi] : ranges) node_ranges.push_back({lo, hi});
  const NegativeSampler negatives = NegativeSampler::Uniform(node_ranges);
  out.shards.assign(shards, LinkShard{});
  for (uint64_t v = 0; v < shards; ++v) {
    LinkShard& s = out.shards[v];
    const uint64_t lo = begin + n * v / shards, hi = begin + n * (v + 1) / shards;
    s.query_begin = out.head.size();
    AppendQueries(edges, lo, hi, out);
    s.edges = hi - lo, s.queries = out.head.size() - s.query_begin;
    s.chunks = static_cast<uint32_t>(std::min<uint64_t>(options_.ShardChunks(), s.queries));
    s.per_chunk = s.chunks == 0 ? 0 : options_.negatives;
    const uint64_t key = 2 * (index * shards + v);
    s.tail_neg_begin = out.tail_neg.size();
    if (s.chunks > 0) {
      const std::vector<int64_t> t = negatives.Sample({options_.seed, epoch, key}, s.chunks, s.per_chunk);
      out.tail_neg.insert(out.tail_neg.end(), t.begin(), t.end());
    }
    s.tail_neg_end = out.tail_neg.size();
    s.head_neg_begin = out.head_neg.size();
    if (s.chunks > 0 && !options_.reciprocal) {
      const std::vector<int64_t> h = negatives.Sample({options_.seed, epoch, key + 1}, s.chunks, s.per_chunk);
      out.head_neg.insert(out.head_neg.end(), h.begin(), h.end());
    }
    s.head_neg_end = out.head_neg.size();
  }
  out.queries = out.head.size();
  UniqueIds(out);
}

// Every node of `ranges` in order, as one chunk shared by all queries (both sides when heads are
// corrupted too), and each query's true candidate's column: the node's offset in that list.
void LinkBatchSampler::AllNegatives(std::span<const std::pair<int64_t, int64_t>> ranges,
                                    LinkBatch& out) const {
  out.chunks = 1;
  out.tail_neg.clear();
  for (const auto& [lo, hi] : ranges) {
    for (int64_t v = lo; v < hi; ++v) out.tail_neg.push_back(v);
  }
  out.per_chunk = static_cast<uint32_t>(out.tail_neg.size());
  auto column = [&](int64_t v) {
    int64_t before = 0;
    for (const auto& [lo, hi] : ranges) {
      if (v >= lo && v < hi) return before + (v - lo);
      before += hi - lo;
    }
    return int64_t{-1};
  };
  out.tail_col.resize(out.queries);
  for (uint64_t i = 0; i < out.queries; ++i) out.tail_col[i] = column(out.tail[i]);
  out.head_neg.clear();
  if (!options_.reciprocal) {
    out.head_neg = out.tail_neg;
    out.head_col.resize(out.queries);
    for (uint64_t i = 0; i < out.queries; ++i) out.head_col[i] = column(out.head[i]);
  }
}

void LinkBatchSampler::UniqueIds(LinkBatch& out) {
  if (++call_ == 0) {  // the stamp wrapped: clear it once every 2^32 steps
    std::fill(stamp_.begin(), stamp_.end(), 0);
    call_ = 1;
  }
  const uint64_t call = uint64_t{call_} << 32;
  std::vector<int64_t>& unique = out.unique;
  unique.clear();
  unique.reserve(2 * out.queries + out.tail_neg.size() + out.head_neg.size());
  auto local = [&](std::vector<int64_t>& ids) {
    for (int64_t& v : ids) {
      uint64_t& s = stamp_[v];
      if ((s & ~0xFFFFFFFFull) != call) {
        s = call | unique.size();
        unique.push_back(v);
      }
      v = static_cast<int64_t>(s & 0xFFFFFFFFull);
    }
  };
  local(out.head);
  local(out.tail);
  local(out.tail_neg);
  local(out.head_neg);
}

}  // namespace sluice
