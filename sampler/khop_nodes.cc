#include "sampler/khop_nodes.h"

#include <algorithm>
#include <array>

#include "common/check.h"
#include "common/prefetch.h"
#include "common/radix_sort.h"
#include "sampler/khop_draw.h"

namespace sluice {
namespace {

// Nodes whose draws are in flight: node i + kAhead's neighbour entries are asked for while
// node i's are marked, and node i + 2 kAhead's CSR offsets before that.
constexpr uint64_t kAhead = 8;
// A node that takes all its neighbours has the first lines of them asked for ahead, no more.
constexpr uint64_t kPrefetchLines = 8;

}  // namespace

KHopNodeSet::KHopNodeSet(const CsrGraph& graph) : graph_(graph), bits_((graph.num_nodes() + 63) / 64, 0) {}

template <class Neighbor>
void KHopNodeSet::ExpandHop(std::span<const Neighbor> all, uint64_t begin, uint64_t end, size_t hop,
                            const KHopOptions& options, const SampleKey& key) {
  const int fanout = options.fanouts[hop];
  const bool replace = options.replace;
  const Key hop_key = khop::HopKey(key.seed, key.epoch, key.step, hop + 1);
  const uint64_t* offsets = graph_.offsets().data();
  const uint64_t width = fanout > 0 ? static_cast<uint64_t>(fanout) : 0;
  positions_.resize(kAhead * width);
  // Node i's draws, in slot i % kAhead: neighbours [first, first + count) when it takes them
  // all, else `count` positions in positions_.
  struct Slot {
    uint64_t first = 0, count = 0;
    bool all = false;
  };
  std::array<Slot, kAhead> slots;
  auto draw = [&](uint64_t i) {
    const auto v = static_cast<int64_t>(marked_[i]);
    const uint64_t first = offsets[v], degree = offsets[v + 1] - first;
    Slot& s = slots[i % kAhead];
    s.first = first;
    s.count = khop::SampleSize(degree, fanout, replace);
    s.all = fanout < 0 || (!replace && degree <= static_cast<uint64_t>(fanout));
    if (s.all) {
      PrefetchForRead(&all[first], std::min(kPrefetchLines * 64, s.count * sizeof(Neighbor)));
      return;
    }
    int64_t* p = positions_.data() + (i % kAhead) * width;
    khop::DrawPositions(first, degree, v, fanout, replace, hop_key, p, s.count);
    for (uint64_t j = 0; j < s.count; ++j) __builtin_prefetch(&all[p[j]]);
  };
  auto resolve = [&](uint64_t i) {
    const Slot& s = slots[i % kAhead];
    const int64_t* p = positions_.data() + (i % kAhead) * width;
    for (uint64_t j = 0; j < s.count; ++j) {
      const auto u = static_cast<uint64_t>(all[s.all ? s.first + j : static_cast<uint64_t>(p[j])]);
      if (Mark(u)) marked_.push_back(u);
    }
  };
  for (uint64_t i = begin; i < std::min(end, begin + kAhead); ++i) draw(i);
  for (uint64_t i = begin; i < end; ++i) {
    if (i + 2 * kAhead < end) __builtin_prefetch(&offsets[marked_[i + 2 * kAhead]]);
    resolve(i);
    if (i + kAhead < end) draw(i + kAhead);
  }
}

void KHopNodeSet::Sample(std::span<const int64_t> seeds, const SampleKey& key, const KHopOptions& options,
                         std::vector<uint64_t>& out) {
  marked_.clear();
  for (const int64_t v : seeds) {
    SLUICE_CHECK(v >= 0 && static_cast<uint64_t>(v) < graph_.num_nodes(),
                 "k-hop sampler: seed %lld out of range [0, %llu)", static_cast<long long>(v),
                 static_cast<unsigned long long>(graph_.num_nodes()));
    if (Mark(static_cast<uint64_t>(v))) marked_.push_back(static_cast<uint64_t>(v));
  }
  graph_.VisitNeighbors([&](auto all) {
    uint64_t begin = 0;
    for (size_t h = 0; h < options.fanouts.size() && begin < marked_.size(); ++h) {
      const uint64_t end = marked_.size();
      ExpandHop(all, begin, end, h, options, key);
      begin = end;
    }
  });
  // Out in ascending order, the bits cleared: a scan of the bits when the sample is a fair
  // share of the graph, else a sort of the marked nodes.
  if (bits_.size() <= 4 * marked_.size()) {
    for (uint64_t w = 0; w < bits_.size(); ++w) {
      uint64_t x = bits_[w];
      if (x == 0) continue;
      bits_[w] = 0;
      for (; x != 0; x &= x - 1) out.push_back(w * 64 + static_cast<uint64_t>(__builtin_ctzll(x)));
    }
    return;
  }
  for (const uint64_t v : marked_) bits_[v >> 6] = 0;
  RadixSortBy(marked_, scratch_);
  out.insert(out.end(), marked_.begin(), marked_.end());
}

}  // namespace sluice
