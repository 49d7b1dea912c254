#pragma once
// The 1-hop neighbourhoods of a link-prediction step's rows, for an encoder in front of the
// decoder (model.encoder: graphsage). Every distinct row of the step (its seeds: heads, tails
// and negatives alike) draws up to `fanout` neighbours from its out- and in-neighbours taken
// together, without replacement, keyed on (seed, epoch, step, node), so the draw is the same
// in memory and out of core and whatever the thread count. The graph is every training edge
// among the step's resident partitions (the whole training graph under the global shuffle), so
// every neighbour's row is resident with the step's partitions. Neighbours not yet among the step's
// rows are appended to them (LinkBatch::unique), after the seeds. Torch-free.

#include <cstdint>
#include <span>
#include <vector>

#include "sampler/csr_graph.h"
#include "sampler/link_batch.h"

namespace sluice {

class LinkNeighborSampler {
 public:
  LinkNeighborSampler(uint64_t num_nodes, int fanout, uint64_t seed);

  // The graph neighbours are drawn from: edge i joins src[i] and dst[i] (both directions).
  void SetGraph(std::span<const int64_t> src, std::span<const int64_t> dst);
  // Draws the neighbourhoods of every row of `b` (b.unique as the sampler left it) for step
  // `step` of epoch `epoch`: sets b.seeds, b.nbr_offsets and b.nbr and appends new rows.
  void Sample(uint64_t epoch, uint64_t step, LinkBatch& b);
  // The same draw for nodes `seeds` of an evaluation pass (keyed on the node alone, so it does
  // not depend on how the nodes are split into blocks): offsets [seeds + 1] and neighbour ids
  // (global) out.
  void SampleIds(std::span<const int64_t> seeds, std::vector<int64_t>& offsets,
                 std::vector<int64_t>& neighbors) const;

  // Memory the graph takes (both directions).
  uint64_t MemoryBytes() const { return out_.MemoryBytes() + in_.MemoryBytes(); }

 private:
  // Node v's draw: its neighbours (global ids) appended to `out`.
  void Draw(int64_t v, uint64_t epoch, uint64_t step, std::vector<int64_t>& out) const;

  uint64_t num_nodes_;
  int fanout_;
  uint64_t seed_;
  CsrGraph out_, in_;
  std::vector<uint64_t> stamp_;  // node -> (call << 32) | local index
  uint32_t call_ = 0;
};

// The key epoch of evaluation draws (training epochs are far below it).
inline constexpr uint64_t kEvalNeighborEpoch = ~uint64_t{0};

}  // namespace sluice
