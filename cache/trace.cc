#include "cache/trace.h"

#include "common/check.h"

namespace sluice {

void AccessTrace::AddStep(std::span<const BlockId> blocks, bool writes) {
  for (BlockId b : blocks) {
    SLUICE_CHECK(b < num_blocks_, "block %u out of range (%u blocks)", b, num_blocks_);
  }
  blocks_.insert(blocks_.end(), blocks.begin(), blocks.end());
  offsets_.push_back(blocks_.size());
  writes_.push_back(writes ? 1 : 0);
}

}  // namespace sluice
