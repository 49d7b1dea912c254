#pragma once
// An in-memory CSR graph: the out- (or in-) neighbours of every node, built from edge arrays,
// from a whole dataset split, or from the buckets of the partitions resident in memory.

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
  // destination-sorted copy (which must exist) and gives in-neighbours.
  static Result<CsrGraph> Load(const Dataset& dataset, const std::string& split,
                               Direction direction, std::span<const uint32_t> partitions = {});

  uint64_t num_nodes() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  uint64_t num_edges() const { return neighbors_.size(); }
  uint64_t degree(int64_t v) const { return offsets_[v + 1] - offsets_[v]; }
  uint64_t offset(int64_t v) const { return offsets_[v]; }
  // Every node's neighbours, concatenated: neighbors(v) = all_neighbors()[offset(v), +degree).
  std::span<const int64_t> all_neighbors() const { return neighbors_; }
  std::span<const uint64_t> offsets() const { return offsets_; }
  std::span<const int64_t> neighbors(int64_t v) const {
    return {neighbors_.data() + offsets_[v], neighbors_.data() + offsets_[v + 1]};
  }
  bool HasEdge(int64_t u, int64_t v) const;

 private:
  std::vector<uint64_t> offsets_;
  std::vector<int64_t> neighbors_;
};

}  // namespace sluice
