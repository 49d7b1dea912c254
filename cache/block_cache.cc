#include "cache/block_cache.h"

#include <algorithm>
#include <cstring>

#include "common/crash_point.h"
#include "common/units.h"

namespace sluice {

BlockCache::BlockCache(RowFile* table, const BlockCacheOptions& options)
    : table_(table),
      options_(options),
      num_blocks_(static_cast<uint32_t>((table->num_rows() + options.rows_per_block - 1) /
                                        options.rows_per_block)),
      block_bytes_(uint64_t{options.rows_per_block} * table->row_bytes()),
      slot_stride_(AlignUp(block_bytes_, kDirectAlignBytes)),
      direct_path_(block_bytes_ % kDirectAlignBytes == 0),
      arena_(options.capacity_blocks * slot_stride_, kDirectAlignBytes),
      slot_of_(num_blocks_, kNoSlot),
      block_in_slot_(options.capacity_blocks, 0),
      dirty_(options.capacity_blocks, 0),
      pins_(options.capacity_blocks, 0) {
  SLUICE_CHECK(options.rows_per_block >= 1 && options.capacity_blocks >= 1, "cache geometry");
}

uint32_t BlockCache::rows_in_block(BlockId b) const {
  const uint64_t first = uint64_t{b} * options_.rows_per_block;
  return static_cast<uint32_t>(std::min<uint64_t>(options_.rows_per_block,
                                                  table_->num_rows() - first));
}

std::byte* BlockCache::block_data(BlockId b) {
  SLUICE_CHECK(slot_of_[b] != kNoSlot, "block %u is not resident", b);
  return slot_data(slot_of_[b]);
}

Result<uint32_t> SlotsFromBudget(uint64_t budget_bytes, uint64_t reserved_bytes,
                                 uint64_t block_bytes, uint32_t min_slots) {
  const uint64_t slot_bytes = AlignUp(block_bytes, kDirectAlignBytes);
  const uint64_t room = budget_bytes > reserved_bytes ? budget_bytes - reserved_bytes : 0;
  const uint64_t slots = std::min<uint64_t>(room / slot_bytes, ~uint32_t{0});
  if (slots < min_slots) {
    return FailedPrecondition("the memory budget " + FormatBytes(budget_bytes) + " leaves " +
                              FormatBytes(room) + " for the cache: " + std::to_string(slots) +
                              " slots of " + FormatBytes(slot_bytes) + ", but one step needs " +
                              std::to_string(min_slots) + " (" +
                              FormatBytes(reserved_bytes + min_slots * slot_bytes) +
                              " in all); raise the memory budget or shrink the step");
  }
  return static_cast<uint32_t>(slots);
}

BlockCache::Pin BlockCache::PinBlock(BlockId b) {
  SLUICE_CHECK(slot_of_[b] != kNoSlot, "pinning block %u, which is not resident", b);
  return Pin(this, slot_of_[b]);
}

void BlockCache::MarkDirty(BlockId b) {
  SLUICE_CHECK(slot_of_[b] != kNoSlot, "block %u is not resident", b);
  dirty_[slot_of_[b]] = 1;
}

Status BlockCache::RunIo(IoSession& io, const Plan& plan, uint64_t first, uint64_t last) {
  writes_.clear();
  reads_.clear();
  for (uint64_t t = first; t < last; ++t) {
    for (const EvictOp& e : plan.step_evictions(t)) {
      SLUICE_CHECK(slot_of_[e.block] == e.slot, "plan evicts block %u from slot %u, not its own",
                   e.block, e.slot);
      SLUICE_CHECK(pins_[e.slot] == 0, "plan evicts block %u, which is pinned", e.block);
      if (dirty_[e.slot]) writes_.push_back({e.block, e.slot});
      dirty_[e.slot] = 0;
      slot_of_[e.block] = kNoSlot;
    }
    for (const LoadOp& l : plan.step_loads(t)) {
      SLUICE_CHECK(slot_of_[l.block] == kNoSlot, "plan loads resident block %u", l.block);
      slot_of_[l.block] = l.slot;
      block_in_slot_[l.slot] = l.block;
      reads_.push_back({l.block, l.slot});
    }
  }
  return Transfer(io, writes_, reads_);
}

Status BlockCache::FlushDirty(IoSession& io) {
  writes_.clear();
  for (uint32_t s = 0; s < options_.capacity_blocks; ++s) {
    if (dirty_[s] && slot_of_[block_in_slot_[s]] == s) writes_.push_back({block_in_slot_[s], s});
    dirty_[s] = 0;
  }
  reads_.clear();
  return Transfer(io, writes_, reads_);
}

Status BlockCache::DropAll(IoSession& io) {
  SLUICE_RETURN_IF_ERROR(FlushDirty(io));
  for (uint32_t s = 0; s < options_.capacity_blocks; ++s) {
    SLUICE_CHECK(pins_[s] == 0, "DropAll with slot %u pinned", s);
    if (slot_of_[block_in_slot_[s]] == s) slot_of_[block_in_slot_[s]] = kNoSlot;
  }
  return Status::Ok();
}

std::vector<BlockCache::Resident> BlockCache::Residents() const {
  std::vector<Resident> out;
  for (uint32_t s = 0; s < options_.capacity_blocks; ++s) {
    const BlockId b = block_in_slot_[s];
    if (b < num_blocks_ && slot_of_[b] == s) out.push_back({b, s, dirty_[s] != 0});
  }
  return out;
}

Status BlockCache::Transfer(IoSession& io, const std::vector<Move>& writes,
                            const std::vector<Move>& reads) {
  stats_.blocks_written_back += writes.size();
  stats_.blocks_loaded += reads.size();
  if (direct_path_ && table_->direct()) return TransferDirect(io, writes, reads);
  // Row paths: the write-backs finish before the loads start (two calls).
  if (!writes.empty()) {
    SLUICE_RETURN_IF_ERROR(TransferRows(io, {writes.begin(), writes.begin() + 1}, /*write=*/true));
    CrashPoint("write_back");
    SLUICE_RETURN_IF_ERROR(TransferRows(io, {writes.begin() + 1, writes.end()}, /*write=*/true));
  }
  return TransferRows(io, reads, /*write=*/false);
}

Status BlockCache::TransferDirect(IoSession& io, const std::vector<Move>& writes,
                                  const std::vector<Move>& reads) {
  const File* file = &table_->file();
  auto request = [&](const Move& m, IoKind kind) {
    const uint64_t bytes = uint64_t{rows_in_block(m.block)} * table_->row_bytes();
    return IoRequest{kind, file, uint64_t{m.block} * block_bytes_,
                     static_cast<uint32_t>(AlignUp(bytes, kDirectAlignBytes)), slot_data(m.slot),
                     {}};
  };
  requests_.clear();
  for (const Move& m : writes) {
    requests_.push_back(request(m, IoKind::kWrite));
    table_->MarkWritten(requests_.back().offset_bytes, requests_.back().length_bytes);
  }
  if (options_.write_back_before_load) {
    if (!requests_.empty()) {
      // A crash between two write-backs leaves the table half old, half new.
      SLUICE_RETURN_IF_ERROR(io.executor().Execute(std::span(requests_).first(1)));
      CrashPoint("write_back");
      SLUICE_RETURN_IF_ERROR(io.executor().Execute(std::span(requests_).subspan(1)));
    }
    requests_.clear();
  }
  for (const Move& m : reads) requests_.push_back(request(m, IoKind::kRead));
  for (const IoRequest& r : requests_) {
    (r.kind == IoKind::kRead ? stats_.bytes_read : stats_.bytes_written) += r.length_bytes;
  }
  return io.executor().Execute(requests_);
}

Status BlockCache::TransferRows(IoSession& io, const std::vector<Move>& moves, bool write) {
  if (moves.empty()) return Status::Ok();
  const uint32_t w = table_->row_bytes();
  if (options_.rows_per_block == 1) {
    ids_.resize(moves.size());
    rows_.resize(moves.size() * w);
    for (size_t i = 0; i < moves.size(); ++i) ids_[i] = moves[i].block;
    if (write) {
      for (size_t i = 0; i < moves.size(); ++i) {
        std::memcpy(&rows_[i * w], slot_data(moves[i].slot), w);
      }
      stats_.bytes_written += rows_.size();
      return table_->WriteRows(io, ids_, rows_.data());
    }
    SLUICE_RETURN_IF_ERROR(table_->ReadRows(io, ids_, rows_.data()));
    for (size_t i = 0; i < moves.size(); ++i) {
      std::memcpy(slot_data(moves[i].slot), &rows_[i * w], w);
    }
    stats_.bytes_read += rows_.size();
    return Status::Ok();
  }
  for (const Move& m : moves) {
    const uint64_t first_row = uint64_t{m.block} * options_.rows_per_block;
    const uint32_t rows = rows_in_block(m.block);
    (write ? stats_.bytes_written : stats_.bytes_read) += uint64_t{rows} * w;
    SLUICE_RETURN_IF_ERROR(write ? table_->WriteRange(io, first_row, rows, slot_data(m.slot))
                                 : table_->ReadRange(io, first_row, rows, slot_data(m.slot)));
  }
  return Status::Ok();
}

}  // namespace sluice
