#pragma once
// k-hop uniform neighbour sampling into layered blocks a GraphSage/GAT layer consumes.
//
// Layer 0 is the seeds (deduplicated, first occurrence first). Hop h expands the nodes that
// layer h-1 added: each gets one neighbour sample of at most fanouts[h-1] (-1: all), drawn
// with or without replacement from a counter-based generator keyed on (seed, epoch, step,
// node, hop). A node is sampled once however many seeds reach it (as MariusGNN's DENSE does);
// later blocks reuse its sample. Layer h = layer h-1 followed by the new nodes of hop h in
// first-occurrence order, so every layer's nodes are a prefix of the next, and the output is
// identical for 1 and N threads.

#include <cstdint>
#include <span>
#include <vector>

#include "sampler/csr_graph.h"
#include "sluice/sample_key.h"

namespace sluice {

struct SampledBlock {
  // dst nodes are layer h-1 (local ids [0, num_dst)); src nodes are layer h.
  uint64_t num_dst = 0;
  uint64_t num_src = 0;
  std::vector<uint64_t> offsets;  // num_dst + 1
  std::vector<int64_t> src_local; // sampled neighbours as local indices into layer h
};

struct SampledSubgraph {
  std::vector<std::vector<int64_t>> layers;  // global node ids; layers[h] is a prefix of [h+1]
  std::vector<SampledBlock> blocks;          // blocks[h-1] maps layer h-1 to layer h
  // The rows the step must fetch: the last layer (every node of the sample).
  std::span<const int64_t> nodes() const { return layers.back(); }
};

struct KHopOptions {
  std::vector<int> fanouts{15, 10, 5};  // per hop; -1 = all neighbours
  bool replace = false;
};

// Samples with scratch space sized to the graph (a node -> local index table stamped per
// call), reused across calls: no hashing, no per-call allocation of the table. One sampler per
// thread that calls Sample (the sampling inside a call is parallel).
class KHopSampler {
 public:
  KHopSampler(const CsrGraph& graph, KHopOptions options);
  SampledSubgraph Sample(std::span<const int64_t> seeds, const SampleKey& key) {
    return Sample(seeds, key, options_);
  }
  // With other fanouts (e.g. evaluation's), sharing this sampler's per-node table.
  SampledSubgraph Sample(std::span<const int64_t> seeds, const SampleKey& key, const KHopOptions& options);
  // Bytes of the per-node table (held for the sampler's life).
  static uint64_t ScratchBytes(uint64_t num_nodes) { return num_nodes * sizeof(NodeSlot); }

 private:
  // Appends the nodes of samples[base, end) not yet in `layer` in first-occurrence order
  // (parallel: an atomic min of the first position per node, then a ranked scatter).
  void AddNew(std::span<const int64_t> samples, std::vector<int64_t>& layer);
  // The seeds, deduplicated in first-occurrence order (stamped with this call).
  std::vector<int64_t> SeedLayer(std::span<const int64_t> seeds, uint64_t call);
  // Draws hop `hop`'s neighbours of nodes[0, frontier) and appends them to `samples`; returns
  // the per-node offsets of the draws (relative to the samples' previous end).
  std::vector<uint64_t> DrawHop(const int64_t* nodes, uint64_t frontier, size_t hop,
                                const KHopOptions& options, const SampleKey& key,
                                std::vector<int64_t>& samples);
  // Local indices of samples[base, end) into `local` (resized to the samples).
  void LocalIndices(const std::vector<int64_t>& samples, uint64_t base, std::vector<int64_t>& local);

  const CsrGraph& graph_;
  KHopOptions options_;
  struct alignas(16) NodeSlot {
    uint64_t local = 0;  // (call << 32) | local index when the node is in this call's layer
    uint64_t first = 0;  // (tag << 32) | first position in the hop's draws, during AddNew
  };
  std::vector<NodeSlot> slot_;  // one cache line holds both words of a node
  std::vector<uint8_t> is_first_;  // by sample position, during AddNew
  uint32_t call_ = 0;
  uint32_t tag_ = 0;
};

// One-off convenience: builds a KHopSampler for the call.
SampledSubgraph SampleKHop(const CsrGraph& graph, std::span<const int64_t> seeds,
                           const KHopOptions& options, const SampleKey& key);

}  // namespace sluice
