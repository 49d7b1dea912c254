#pragma once
// An in-memory CSR graph: the out- (or in-) neighbours of every node, built from edge arrays,
// from a whole dataset split, or from the buckets of the partitions resident in memory.
//
// Neighbour ids are stored as int32 when the graph has fewer than 2^31 nodes (half the memory
// of int64: 0.4 GB instead of 0.8 GB for 100M edges), else as int64. Hot loops take the array
// of the stored width through VisitNeighbors; other code reads ids as int64.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/dataset.h"

namespace sluice {

enum class Direction { kOut, kIn };

class CsrGraph {
 public:
  CsrGraph() = default;
  // Neighbours of from[i] include to[i]; a node's neighbours keep the input order.
  static CsrGraph FromEdges(uint64_t num_nodes, std::span<const int64_t> from,
                            std::span<const int64_t> to);
  // The graph of `split` in `dataset`, restricted to edges whose both endpoints lie in
  // `partitions` (all partitions when empty). kOut reads the source-sorted buckets, kIn the
  // destination-sorted copy (which must exist) and gives in-neighbours. The edge files are
  // streamed twice in pieces (degrees, then placement): no copy of the edges is held besides
  // the graph itself. Neighbours keep bucket order (i, j) with j ascending, then file order.
  static Result<CsrGraph> Load(const Dataset& dataset, const std::string& split,
                               Direction direction, std::span<const uint32_t> partitions = {});
  // The bytes a graph of this shape takes (offsets and neighbours), for memory plans.
  static uint64_t BytesFor(uint64_t num_nodes, uint64_t num_edges);

  uint64_t num_nodes() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  uint64_t num_edges() const { return narrow_ ? neighbors32_.size() : neighbors64_.size(); }
  uint64_t degree(int64_t v) const { return offsets_[v + 1] - offsets_[v]; }
  uint64_t offset(int64_t v) const { return offsets_[v]; }
  std::span<const uint64_t> offsets() const { return offsets_; }
  // Whether neighbour ids are stored as int32.
  bool narrow() const { return narrow_; }
  // Calls f with every node's neighbours concatenated, as std::span<const int32_t> or
  // std::span<const int64_t> (the stored width): neighbours of v are [offset(v), +degree(v)).
  template <class F>
  decltype(auto) VisitNeighbors(F&& f) const {
    return narrow_ ? f(std::span<const int32_t>(neighbors32_))
                   : f(std::span<const int64_t>(neighbors64_));
  }
  // The i-th entry of the concatenated neighbours.
  int64_t neighbor_at(uint64_t i) const { return narrow_ ? neighbors32_[i] : neighbors64_[i]; }
  // v's neighbours, copied as int64 (tests and cold paths).
  std::vector<int64_t> neighbors(int64_t v) const;
  bool HasEdge(int64_t u, int64_t v) const;
  // Bytes held: offsets and neighbours.
  uint64_t MemoryBytes() const;

 private:
  // Sizes the neighbour array for `edges` entries of the width num_nodes allows.
  void AllocateNeighbors(uint64_t edges);
  void SetNeighbor(uint64_t i, int64_t v) {
    if (narrow_) {
      neighbors32_[i] = static_cast<int32_t>(v);
    } else {
      neighbors64_[i] = v;
    }
  }

  std::vector<uint64_t> offsets_;
  bool narrow_ = true;
  std::vector<int32_t> neighbors32_;  // when narrow_
  std::vector<int64_t> neighbors64_;  // otherwise
};

}  // namespace sluice
