#pragma once
// SlotIndex: a flat open-addressing index from 64-bit row ids to 32-bit slots of a store that
// keeps each slot's id itself (the write-back buffer, the preloader). Linear probing over twice
// the store's capacity (at most half full), backward-shift deletion (no tombstones: probe runs
// stay short however long the store lives). The home position is the multiplicative hash's top
// 32 bits scaled to the size, so the size need not be a power of two.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class SlotIndex {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};

  explicit SlotIndex(uint64_t capacity) : index_(std::max<uint64_t>(2 * capacity, 2), kNone) {}

  // The position holding id's slot, or the empty one where it would go; `ids` is each slot's id.
  size_t Probe(uint64_t id, const uint64_t* ids) const {
    size_t i = Home(id);
    while (index_[i] != kNone && ids[index_[i]] != id) i = i + 1 == index_.size() ? 0 : i + 1;
    return i;
  }
  uint32_t slot(size_t position) const { return index_[position]; }
  void Set(size_t position, uint32_t slot) { index_[position] = slot; }

  // Empties `position`, moving later entries of its probe run back into the hole.
  void EraseAt(size_t i, const uint64_t* ids) {
    const size_t n = index_.size();
    size_t j = i;
    while (true) {
      j = j + 1 == n ? 0 : j + 1;
      if (index_[j] == kNone) break;
      const size_t home = Home(ids[index_[j]]);
      // The entry at j may move to i unless its home lies cyclically within (i, j].
      if ((j + n - home) % n >= (j + n - i) % n) {
        index_[i] = index_[j];
        i = j;
      }
    }
    index_[i] = kNone;
  }

  static uint64_t BytesPerSlot() { return 2 * sizeof(uint32_t); }

 private:
  size_t Home(uint64_t id) const {
    return static_cast<size_t>(((id * 0x9E3779B97F4A7C15ull) >> 32) * index_.size() >> 32);
  }
  std::vector<uint32_t> index_;
};

}  // namespace sluice
