#include "sampler/khop_sampler.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <numeric>

#include "common/check.h"
#include "sampler/khop_draw.h"

namespace sluice {
namespace {

constexpr uint64_t kLow32 = 0xFFFFFFFFull;
// Nodes whose neighbour positions are drawn ahead of the loads that use them: the CSR does not
// fit in cache, so the loads of node i + kAhead are in flight while node i is resolved.
constexpr uint64_t kAhead = 6;
// Fixed chunking for the ranked scatter: the grid does not depend on the thread count.
constexpr uint64_t kChunk = 8192;
// Draws ahead whose node slots are prefetched in the deduplication passes.
constexpr uint64_t kPrefetch = 16;

}  // namespace

KHopSampler::KHopSampler(const CsrGraph& graph, KHopOptions options)
    : graph_(graph),
      options_(std::move(options)),
      slot_(graph.num_nodes()) {
  SLUICE_CHECK(graph.num_nodes() < (1ull << 32), "k-hop sampler: %llu nodes, at most 2^32",
               static_cast<unsigned long long>(graph.num_nodes()));
}

SampledSubgraph SampleKHop(const CsrGraph& graph, std::span<const int64_t> seeds,
                           const KHopOptions& options, const SampleKey& key) {
  return KHopSampler(graph, options).Sample(seeds, key);
}

void KHopSampler::AddNew(std::span<const int64_t> samples, std::vector<int64_t>& layer) {
  const uint64_t n = samples.size();
  SLUICE_CHECK(n < (1ull << 32), "k-hop sampler: %llu draws in one hop, at most 2^32",
               static_cast<unsigned long long>(n));
  if (++tag_ == 0) {  // wrapped: clear once every 2^32 hops
    for (NodeSlot& node : slot_) node.first = 0;
    tag_ = 1;
  }
  const uint64_t call = static_cast<uint64_t>(call_) << 32;
  if (tbb::this_task_arena::max_concurrency() == 1) {  // one thread: one pass, same result
    for (uint64_t i = 0; i < samples.size(); ++i) {
      if (i + kPrefetch < samples.size()) __builtin_prefetch(&slot_[samples[i + kPrefetch]]);
      const int64_t v = samples[i];
      if ((slot_[v].local & ~kLow32) == call) continue;
      slot_[v].local = call | layer.size();
      layer.push_back(v);
    }
    SLUICE_CHECK(layer.size() < (1ull << 32), "k-hop sampler: layer over 2^32 nodes");
    return;
  }
  const uint64_t tag = static_cast<uint64_t>(tag_) << 32;
  // 1. The first position of every node not yet in the layer (an atomic min per node).
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, n, 4096), [&](const auto& r) {
    for (uint64_t i = r.begin(); i < r.end(); ++i) {
      // The CAS below is a full barrier: without a prefetch the misses would not overlap.
      if (i + kPrefetch < r.end()) __builtin_prefetch(&slot_[samples[i + kPrefetch]]);
      const int64_t v = samples[i];
      if ((slot_[v].local & ~kLow32) == call) continue;
      std::atomic_ref<uint64_t> first(slot_[v].first);
      const uint64_t mine = tag | i;
      uint64_t seen = first.load(std::memory_order_relaxed);
      while ((seen & ~kLow32) != tag || seen > mine) {
        if (first.compare_exchange_weak(seen, mine, std::memory_order_relaxed)) break;
      }
    }
  });
  // 2. Flag first occurrences and count them per fixed chunk.
  is_first_.resize(n);
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint64_t> rank(chunks + 1, 0);
  tbb::parallel_for(uint64_t{0}, chunks, [&](uint64_t c) {
    uint64_t count = 0;
    for (uint64_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) {
      if (i + kPrefetch < end) __builtin_prefetch(&slot_[samples[i + kPrefetch]]);
      const bool first = slot_[samples[i]].first == (tag | i);
      is_first_[i] = first;
      count += first;
    }
    rank[c + 1] = count;
  });
  std::partial_sum(rank.begin(), rank.end(), rank.begin());
  // 3. Scatter the new nodes to their ranks and give them local indices.
  const uint64_t base = layer.size();
  SLUICE_CHECK(base + rank[chunks] < (1ull << 32), "k-hop sampler: layer over 2^32 nodes");
  layer.resize(base + rank[chunks]);
  tbb::parallel_for(uint64_t{0}, chunks, [&](uint64_t c) {
    uint64_t local = base + rank[c];
    for (uint64_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) {
      if (!is_first_[i]) continue;
      const int64_t v = samples[i];
      layer[local] = v;
      slot_[v].local = call | local;
      ++local;
    }
  });
}

std::vector<int64_t> KHopSampler::SeedLayer(std::span<const int64_t> seeds, uint64_t call) {
  std::vector<int64_t> layer;
  for (int64_t v : seeds) {
    SLUICE_CHECK(v >= 0 && static_cast<uint64_t>(v) < graph_.num_nodes(),
                 "k-hop sampler: seed %lld out of range [0, %llu)", static_cast<long long>(v),
                 static_cast<unsigned long long>(graph_.num_nodes()));
    if ((slot_[v].local & ~kLow32) == call) continue;
    slot_[v].local = call | layer.size();
    layer.push_back(v);
  }
  return layer;
}

std::vector<uint64_t> KHopSampler::DrawHop(const int64_t* nodes, uint64_t frontier, size_t hop,
                                           const KHopOptions& options, const SampleKey& key,
                                           std::vector<int64_t>& samples) {
  const CsrGraph& graph = graph_;
  const int fanout = options.fanouts[hop];
  const bool replace = options.replace;
  const Key hop_key = khop::HopKey(key.seed, key.epoch, key.step, hop + 1);
  // Sample sizes (degree lookups are cache misses: in parallel), then their prefix sum.
  std::vector<uint64_t> offsets(frontier + 1, 0);
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, frontier, 2048), [&](const auto& r) {
    for (uint64_t i = r.begin(); i < r.end(); ++i) {
      offsets[i + 1] = khop::SampleSize(graph.degree(nodes[i]), fanout, replace);
    }
  });
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
  const uint64_t base = samples.size();
  samples.resize(base + offsets[frontier]);
  int64_t* out = samples.data() + base;
  graph.VisitNeighbors([&](auto all) {
    // Draw positions for node i, prefetch them, and resolve node i - kAhead's.
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, frontier, 256), [&](const auto& r) {
      auto resolve = [&](uint64_t i) {
        for (uint64_t j = offsets[i]; j < offsets[i + 1]; ++j) out[j] = all[out[j]];
      };
      for (uint64_t i = r.begin(); i < r.end(); ++i) {
        int64_t* mine = out + offsets[i];
        const uint64_t count = offsets[i + 1] - offsets[i];
        khop::DrawPositions(graph.offset(nodes[i]), graph.degree(nodes[i]), nodes[i], fanout,
                            replace, hop_key, mine, count);
        for (uint64_t j = 0; j < count; ++j) __builtin_prefetch(&all[mine[j]]);
        if (i >= r.begin() + kAhead) resolve(i - kAhead);
      }
      for (uint64_t i = r.end() - std::min<uint64_t>(kAhead, r.size()); i < r.end(); ++i) {
        resolve(i);
      }
    });
  });
  return offsets;
}

void KHopSampler::LocalIndices(const std::vector<int64_t>& samples, uint64_t base,
                               std::vector<int64_t>& local) {
  local.resize(samples.size());
  tbb::parallel_for(tbb::blocked_range<uint64_t>(base, samples.size(), 4096), [&](const auto& r) {
    for (uint64_t i = r.begin(); i < r.end(); ++i) {
      if (i + kPrefetch < r.end()) __builtin_prefetch(&slot_[samples[i + kPrefetch]]);
      local[i] = static_cast<int64_t>(slot_[samples[i]].local & kLow32);
    }
  });
}

SampledSubgraph KHopSampler::Sample(std::span<const int64_t> seeds, const SampleKey& key,
                                    const KHopOptions& options) {
  if (++call_ == 0) {  // the stamp wrapped: clear it once every 2^32 calls
    for (NodeSlot& n : slot_) n.local = 0;
    call_ = 1;
  }
  const uint64_t call = static_cast<uint64_t>(call_) << 32;
  SampledSubgraph s;
  s.layers.reserve(options.fanouts.size() + 1);
  s.blocks.reserve(options.fanouts.size());
  std::vector<int64_t> layer = SeedLayer(seeds, call);
  s.layers.push_back(layer);
  std::vector<uint64_t> sample_begin;  // by local index; samples are contiguous in that order
  std::vector<int64_t> samples, samples_local;
  uint64_t expanded = 0;  // layer[0, expanded) already have samples
  for (size_t h = 0; h < options.fanouts.size(); ++h) {
    const bool last = h + 1 == options.fanouts.size();
    const uint64_t frontier = layer.size() - expanded;
    const uint64_t base = samples.size();
    const std::vector<uint64_t> offsets = DrawHop(layer.data() + expanded, frontier, h, options, key, samples);
    for (uint64_t i = 0; i < frontier; ++i) sample_begin.push_back(base + offsets[i]);
    // New nodes in first-occurrence order (frontier order, then draw order).
    const uint64_t dst_count = layer.size();
    AddNew({samples.data() + base, samples.size() - base}, layer);
    expanded = dst_count;
    // Local indices of this hop's draws, computed once. The samples of layer h-1's nodes are
    // contiguous and in local order, so the block is a prefix of the samples.
    LocalIndices(samples, base, samples_local);
    SampledBlock block;
    block.num_dst = dst_count;
    block.num_src = layer.size();
    block.offsets.reserve(sample_begin.size() + 1);
    block.offsets.assign(sample_begin.begin(), sample_begin.end());
    block.offsets.push_back(samples.size());
    if (last) {
      block.src_local = std::move(samples_local);
      s.blocks.push_back(std::move(block));
      s.layers.push_back(std::move(layer));
    } else {
      block.src_local.assign(samples_local.begin(), samples_local.end());
      s.blocks.push_back(std::move(block));
      s.layers.push_back(layer);
    }
  }
  return s;
}

}  // namespace sluice
