#pragma once
// The last layer's rows of some nodes, out of a pass over every node in order (layer-wise
// inference, nc_layerwise.cc): `Keep` takes a step's rows of consecutive nodes and copies the
// wanted ones to their places, so the logits of the wanted nodes alone are held, not every
// node's. The wanted nodes come in any order, a node even more than once.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace sluice {

class NodeLogits {
 public:
  // `wanted` must outlive this; `width` floats a row.
  NodeLogits(const std::vector<int64_t>& wanted, int64_t width);
  // Rows [n, width] of nodes [first, first + n): the wanted ones into logits().
  void Keep(int64_t first, size_t n, const float* rows) const;
  // [wanted.size(), width]: wanted[i]'s row at i (rows no step kept are undefined).
  const torch::Tensor& logits() const { return logits_; }
  const std::vector<int64_t>& nodes() const { return nodes_; }

 private:
  const std::vector<int64_t>& nodes_;
  std::vector<int64_t> order_;  // positions in nodes_, sorted by node
  torch::Tensor logits_;
};

}  // namespace sluice
