#include "sampler/khop_sampler.h"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "sampler/random.h"

namespace sluice {
namespace {

uint64_t SampleSize(uint64_t degree, int fanout, bool replace) {
  if (fanout < 0) return degree;
  if (degree == 0) return 0;
  return replace ? static_cast<uint64_t>(fanout) : std::min<uint64_t>(degree, fanout);
}

// Draws node v's sample into out (size SampleSize(...)).
void SampleNode(const CsrGraph& g, int64_t v, int fanout, bool replace, const Key& key,
                std::span<int64_t> out) {
  auto nbrs = g.neighbors(v);
  const uint64_t d = nbrs.size();
  if (fanout < 0 || (!replace && d <= static_cast<uint64_t>(fanout))) {
    std::copy(nbrs.begin(), nbrs.end(), out.begin());
    return;
  }
  const Key k = key.With(static_cast<uint64_t>(v));
  if (replace) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = nbrs[k.Below(i, d)];
    return;
  }
  // Floyd's algorithm: `fanout` distinct positions out of d, in draw order.
  size_t n = 0;
  for (uint64_t j = d - fanout; j < d; ++j) {
    const uint64_t t = k.Below(j, j + 1);
    const bool taken = std::find_if(out.begin(), out.begin() + n, [&](int64_t x) {
                         return x == static_cast<int64_t>(t);
                       }) != out.begin() + n;
    out[n++] = static_cast<int64_t>(taken ? j : t);
  }
  for (size_t i = 0; i < n; ++i) out[i] = nbrs[out[i]];
}

}  // namespace

KHopSampler::KHopSampler(const CsrGraph& graph, KHopOptions options)
    : graph_(graph),
      options_(std::move(options)),
      stamp_(graph.num_nodes(), 0),
      local_(graph.num_nodes(), 0) {}

SampledSubgraph SampleKHop(const CsrGraph& graph, std::span<const int64_t> seeds,
                           const KHopOptions& options, const SampleKey& key) {
  return KHopSampler(graph, options).Sample(seeds, key);
}

SampledSubgraph KHopSampler::Sample(std::span<const int64_t> seeds, const SampleKey& key) {
  const CsrGraph& graph = graph_;
  const KHopOptions& options = options_;
  if (++call_ == 0) {  // the stamp wrapped: clear it once every 2^32 calls
    std::fill(stamp_.begin(), stamp_.end(), 0);
    call_ = 1;
  }
  auto add = [&](int64_t v, std::vector<int64_t>& layer) {
    if (stamp_[v] == call_) return;
    stamp_[v] = call_;
    local_[v] = static_cast<int64_t>(layer.size());
    layer.push_back(v);
  };
  SampledSubgraph s;
  std::vector<int64_t> layer;
  for (int64_t v : seeds) add(v, layer);
  s.layers.push_back(layer);
  // Each node's sample (global ids), by local index, drawn once.
  std::vector<uint64_t> sample_begin;  // by local index; samples are contiguous in that order
  std::vector<int64_t> samples, samples_local;
  uint64_t expanded = 0;  // layer[0, expanded) already have samples
  for (size_t h = 0; h < options.fanouts.size(); ++h) {
    const int fanout = options.fanouts[h];
    const Key hop_key = Key(key.seed).With(key.epoch).With(key.step).With(h + 1);
    const uint64_t frontier = layer.size() - expanded;
    std::vector<uint64_t> offsets(frontier + 1, 0);
    for (uint64_t i = 0; i < frontier; ++i) {
      offsets[i + 1] = offsets[i] + SampleSize(graph.degree(layer[expanded + i]), fanout,
                                               options.replace);
    }
    const uint64_t base = samples.size();
    samples.resize(base + offsets[frontier]);
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, frontier, 256),
                      [&](const tbb::blocked_range<uint64_t>& r) {
                        for (uint64_t i = r.begin(); i < r.end(); ++i) {
                          SampleNode(graph, layer[expanded + i], fanout, options.replace, hop_key,
                                     {samples.data() + base + offsets[i],
                                      offsets[i + 1] - offsets[i]});
                        }
                      });
    for (uint64_t i = 0; i < frontier; ++i) sample_begin.push_back(base + offsets[i]);
    // New nodes in first-occurrence order (frontier order, then draw order).
    const uint64_t dst_count = layer.size();
    for (uint64_t i = base; i < samples.size(); ++i) add(samples[i], layer);
    expanded = dst_count;
    // Local indices of this hop's draws, computed once. The samples of layer h-1's nodes are
    // contiguous and in local order, so the block is a prefix of the samples.
    samples_local.resize(samples.size());
    tbb::parallel_for(tbb::blocked_range<uint64_t>(base, samples.size(), 4096),
                      [&](const tbb::blocked_range<uint64_t>& r) {
                        for (uint64_t i = r.begin(); i < r.end(); ++i) {
                          samples_local[i] = LocalOf(samples[i]);
                        }
                      });
    SampledBlock block;
    block.num_dst = dst_count;
    block.num_src = layer.size();
    block.offsets.assign(sample_begin.begin(), sample_begin.end());
    block.offsets.push_back(samples.size());
    block.src_local.assign(samples_local.begin(), samples_local.end());
    s.blocks.push_back(std::move(block));
    s.layers.push_back(layer);
  }
  return s;
}

}  // namespace sluice
