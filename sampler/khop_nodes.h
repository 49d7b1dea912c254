#pragma once
// KHopNodeSet: the nodes of a k-hop sample without its blocks, sorted: what a step's sample
// will read, for listings that run ahead of the sampler (the feature spill lists a step's rows
// 32 steps before its sampler draws them, and the sample is drawn again then).
//
// The set is exactly KHopSampler::Sample's nodes(): a node's draws depend only on the key, the
// hop and the node, and each node is expanded once, at the hop that first reaches it, so the
// order the sampler visits nodes in does not change which nodes the sample holds. Here the
// visiting order is whatever is cheapest: one thread, a bit per node (1.25 MB for 10M nodes,
// where the sampler's table takes 16 bytes a node), no first-occurrence ranking, no local
// indices, no blocks, and no lock shared with the sampler's thread.

#include <cstdint>
#include <span>
#include <vector>

#include "sampler/csr_graph.h"
#include "sampler/khop_sampler.h"
#include "sluice/sample_key.h"

namespace sluice {

class KHopNodeSet {
 public:
  explicit KHopNodeSet(const CsrGraph& graph);
  // Appends the sample's nodes to `out` in ascending order (the seeds included, each node
  // once). Not thread-safe: one caller at a time.
  void Sample(std::span<const int64_t> seeds, const SampleKey& key, const KHopOptions& options,
              std::vector<uint64_t>& out);
  // Bytes held for a graph of num_nodes nodes, besides two words a node of the largest sample.
  static uint64_t ScratchBytes(uint64_t num_nodes) { return (num_nodes + 63) / 64 * 8; }

 private:
  // Draws hop `hop`'s neighbours of marked_[begin, end) (the nodes the hop before added) and
  // marks them, appending the new ones to marked_.
  template <class Neighbor>
  void ExpandHop(std::span<const Neighbor> all, uint64_t begin, uint64_t end, size_t hop,
                 const KHopOptions& options, const SampleKey& key);
  // Marks v; true when it was not marked.
  bool Mark(uint64_t v) {
    uint64_t& word = bits_[v >> 6];
    const uint64_t bit = uint64_t{1} << (v & 63);
    if ((word & bit) != 0) return false;
    word |= bit;
    return true;
  }

  const CsrGraph& graph_;
  std::vector<uint64_t> bits_;  // zero between calls
  std::vector<uint64_t> marked_;  // the call's nodes as they were first reached, hop by hop
  std::vector<int64_t> positions_;  // draws in flight (a ring of fanout-sized slots)
  std::vector<uint64_t> scratch_;
};

}  // namespace sluice
