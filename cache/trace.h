#pragma once
// An access trace: for each training step, the blocks it needs (a block is a run of
// consecutive rows; a whole partition is a large block) and whether the step writes them
// (training updates its rows; evaluation only reads). Steps are stored as CSR.

#include <cstdint>
#include <span>
#include <vector>

namespace sluice {

using BlockId = uint32_t;

class AccessTrace {
 public:
  explicit AccessTrace(uint32_t num_blocks) : num_blocks_(num_blocks) { offsets_.push_back(0); }

  // Appends a step. Blocks may repeat and come in any order; each must be < num_blocks.
  void AddStep(std::span<const BlockId> blocks, bool writes);

  uint32_t num_blocks() const { return num_blocks_; }
  uint64_t num_steps() const { return offsets_.size() - 1; }
  uint64_t num_accesses() const { return blocks_.size(); }
  std::span<const BlockId> step(uint64_t t) const {
    return {blocks_.data() + offsets_[t], blocks_.data() + offsets_[t + 1]};
  }
  uint64_t step_begin(uint64_t t) const { return offsets_[t]; }
  bool writes(uint64_t t) const { return writes_[t] != 0; }
  const std::vector<BlockId>& blocks() const { return blocks_; }

 private:
  uint32_t num_blocks_;
  std::vector<uint64_t> offsets_;
  std::vector<BlockId> blocks_;
  std::vector<uint8_t> writes_;
};

}  // namespace sluice
