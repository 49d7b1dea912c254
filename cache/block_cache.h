#pragma once
// BlockCache executes plans against a backing RowFile: a fixed arena of slots, each holding one
// block (rows_per_block consecutive rows), loads and write-backs as the plan says, and dirty
// tracking.
//
// Consistency: RunIo issues the write-backs of a group of steps and waits for them before it
// issues the group's loads. So a dirty block is on disk before its slot is reused and before
// any later load of the same block is issued: no stale row is ever read. (The option
// write_back_before_load = false puts both in one batch; it exists only so a test can show
// that the rule is what prevents stale reads.)
//
// Run-ahead: io for steps [first, last) may be issued before those steps compute, provided
// every step before `first` has computed (dirty bits are final) and the plan was made with
// protect_steps >= last - first - 1 (no block of a step in flight is evicted).
//
// Paths: blocks whose size is a multiple of 4 KiB on an O_DIRECT file go straight between disk
// and arena slots (no copy); single-row blocks go through RowFile's merged row reads and
// sector-safe writes; other blocks through RowFile's range reads and writes.
//
// Thread safety: none; one thread runs io and compute in turn (the pipeline adds overlap).

#include <cstdint>
#include <utility>
#include <vector>

#include "cache/planner.h"
#include "common/aligned_buffer.h"
#include "storage/row_file.h"

namespace sluice {

struct BlockCacheOptions {
  uint32_t capacity_blocks = 0;
  uint32_t rows_per_block = 1;
  bool write_back_before_load = true;  // tests only may turn it off
};

struct BlockCacheStats {
  uint64_t blocks_loaded = 0;
  uint64_t blocks_written_back = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};

// How many slots of `block_bytes` fit in what the budget leaves after `reserved_bytes`. Fails,
// saying what would be needed, when fewer than `min_slots` (the largest step's block count) fit.
Result<uint32_t> SlotsFromBudget(uint64_t budget_bytes, uint64_t reserved_bytes,
                                 uint64_t block_bytes, uint32_t min_slots);

class BlockCache {
 public:
  // Keeps a resident block in place while held: a plan that evicts a pinned block is a bug
  // (checked). Move-only; unpins when destroyed.
  class Pin {
   public:
    Pin(Pin&& other) noexcept : cache_(std::exchange(other.cache_, nullptr)), slot_(other.slot_) {}
    Pin& operator=(Pin&&) = delete;
    Pin(const Pin&) = delete;
    ~Pin() {
      if (cache_ != nullptr) --cache_->pins_[slot_];
    }
    std::byte* data() const { return cache_->slot_data(slot_); }

   private:
    friend class BlockCache;
    Pin(BlockCache* cache, uint32_t slot) : cache_(cache), slot_(slot) { ++cache_->pins_[slot_]; }
    BlockCache* cache_;
    uint32_t slot_;
  };

  BlockCache(RowFile* table, const BlockCacheOptions& options);

  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t capacity_blocks() const { return options_.capacity_blocks; }
  uint32_t rows_per_block() const { return options_.rows_per_block; }
  uint64_t block_bytes() const { return block_bytes_; }
  // Rows in block b (the last block may be short).
  uint32_t rows_in_block(BlockId b) const;

  // Runs the io of plan steps [first, last) (see the header comment for the requirements).
  // After an error the cache's contents are undefined: discard it (the run restarts from its
  // last checkpoint).
  Status RunIo(IoSession& io, const Plan& plan, uint64_t first, uint64_t last);
  // The resident block's bytes. Requires: b is resident.
  std::byte* block_data(BlockId b);
  bool resident(BlockId b) const { return slot_of_[b] != kNoSlot; }
  // Pins a resident block (requires: resident).
  Pin PinBlock(BlockId b);
  // Marks a resident block as written, so its eviction writes it back.
  void MarkDirty(BlockId b);
  // Writes back every dirty resident block (a checkpoint's flush); they stay resident.
  Status FlushDirty(IoSession& io);
  // Writes back dirty blocks and empties every slot. Requires: nothing pinned.
  Status DropAll(IoSession& io);
  // The resident blocks, their slots and dirty bits, in slot order (a new planner adopts them:
  // HeapPlanner::Adopt).
  struct Resident {
    BlockId block;
    uint32_t slot;
    bool dirty;
  };
  std::vector<Resident> Residents() const;
  const BlockCacheStats& stats() const { return stats_; }

 private:
  static constexpr uint32_t kNoSlot = ~uint32_t{0};
  struct Move {
    BlockId block;
    uint32_t slot;
  };
  std::byte* slot_data(uint32_t slot) { return arena_.data() + uint64_t{slot} * slot_stride_; }
  Status Transfer(IoSession& io, const std::vector<Move>& writes, const std::vector<Move>& reads);
  Status TransferDirect(IoSession& io, const std::vector<Move>& writes,
                        const std::vector<Move>& reads);
  Status TransferRows(IoSession& io, const std::vector<Move>& moves, bool write);

  RowFile* table_;
  BlockCacheOptions options_;
  uint32_t num_blocks_;
  uint64_t block_bytes_;
  uint64_t slot_stride_;
  bool direct_path_;
  AlignedBuffer arena_;
  std::vector<uint32_t> slot_of_;
  std::vector<BlockId> block_in_slot_;
  std::vector<uint8_t> dirty_;  // per slot
  std::vector<uint32_t> pins_;  // per slot
  std::vector<Move> writes_, reads_;
  std::vector<IoRequest> requests_;
  std::vector<uint64_t> ids_;
  std::vector<std::byte> rows_;
  BlockCacheStats stats_;
};

}  // namespace sluice
