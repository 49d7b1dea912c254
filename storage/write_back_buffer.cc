#include "storage/write_back_buffer.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace sluice {

WriteBackBuffer::WriteBackBuffer(RowFile* file, const WriteBackOptions& options)
    : file_(file), row_bytes_(file->row_bytes()), capacity_(options.capacity_rows),
      gap_(options.sweep_gap_bytes), index_(capacity_) {
  SLUICE_CHECK(capacity_ < (uint64_t{1} << 31), "write-back buffer of %llu rows",
               static_cast<unsigned long long>(capacity_));
  rows_.resize(capacity_ * row_bytes_);
  ids_.resize(capacity_);
  next_.resize(capacity_);
  free_.resize(capacity_);
  for (uint64_t i = 0; i < capacity_; ++i) free_[i] = static_cast<uint32_t>(capacity_ - 1 - i);
  const uint64_t regions = std::clamp<uint64_t>(options.regions, 1, std::max<uint64_t>(file->num_rows(), 1));
  heads_.assign(regions, kNone);
  counts_.assign(regions, 0);
}

const std::byte* WriteBackBuffer::Find(uint64_t id) const {
  if (staged_ == 0) return nullptr;
  const uint32_t slot = index_.slot(index_.Probe(id, ids_.data()));
  return slot == SlotIndex::kNone ? nullptr : rows_.data() + uint64_t{slot} * row_bytes_;
}

Status WriteBackBuffer::Sweep(IoSession& io, uint32_t region) {
  if (counts_[region] == 0) return Status::Ok();
  ++stats_.sweeps;
  return Apply(io, region, {}, nullptr);
}

Status WriteBackBuffer::SweepWith(IoSession& io, uint32_t region, std::span<const uint64_t> read_ids,
                                  std::byte* out, uint64_t min_staged) {
  SLUICE_CHECK(region < heads_.size(), "region %u of %zu", region, heads_.size());
  const bool sweep = counts_[region] >= std::max<uint64_t>(min_staged, 1);
  ++(sweep ? stats_.passes : stats_.reads_only);
  // Staged rows are read from here (they are newer than the file); the rest in the sweep's pass.
  pass_ids_.clear();
  pass_where_.clear();
  for (size_t i = 0; i < read_ids.size(); ++i) {
    if (const std::byte* p = Find(read_ids[i])) {
      std::memcpy(out + i * row_bytes_, p, row_bytes_);
    } else {
      pass_ids_.push_back(read_ids[i]);
      pass_where_.push_back(i);
    }
  }
  if (pass_ids_.size() == read_ids.size()) {
    return sweep ? Apply(io, region, read_ids, out) : file_->ReadRows(io, read_ids, out, gap_);
  }
  pass_rows_.resize(pass_ids_.size() * row_bytes_);
  SLUICE_RETURN_IF_ERROR(sweep ? Apply(io, region, pass_ids_, pass_rows_.data())
                               : file_->ReadRows(io, pass_ids_, pass_rows_.data(), gap_));
  for (size_t j = 0; j < pass_ids_.size(); ++j) {
    std::memcpy(out + pass_where_[j] * row_bytes_, pass_rows_.data() + j * row_bytes_, row_bytes_);
  }
  return Status::Ok();
}

Status WriteBackBuffer::Apply(IoSession& io, uint32_t region, std::span<const uint64_t> read_ids,
                              std::byte* out) {
  sweep_ids_.clear();
  sweep_rows_.resize(uint64_t{counts_[region]} * row_bytes_);
  for (uint32_t slot = heads_[region]; slot != kNone; slot = next_[slot]) {
    std::memcpy(sweep_rows_.data() + sweep_ids_.size() * row_bytes_, rows_.data() + uint64_t{slot} * row_bytes_,
                row_bytes_);
    sweep_ids_.push_back(ids_[slot]);
  }
  SLUICE_RETURN_IF_ERROR(file_->UpdateRows(io, sweep_ids_, sweep_rows_.data(), read_ids, out, gap_));
  for (uint64_t id : sweep_ids_) {
    const size_t i = index_.Probe(id, ids_.data());
    SLUICE_CHECK(index_.slot(i) != SlotIndex::kNone, "row %llu is not staged", static_cast<unsigned long long>(id));
    free_.push_back(index_.slot(i));
    index_.EraseAt(i, ids_.data());
  }
  staged_ -= sweep_ids_.size();
  stats_.rows_swept += sweep_ids_.size();
  heads_[region] = kNone;
  counts_[region] = 0;
  return Status::Ok();
}

Status WriteBackBuffer::Write(IoSession& io, std::span<const uint64_t> ids, const std::byte* rows) {
  stats_.rows_staged += ids.size();
  if (ids.size() > capacity_) {
    // More rows than the whole buffer holds: stage none, write them straight through (after the
    // staged copies of the same rows, which they replace).
    SLUICE_RETURN_IF_ERROR(Flush(io));
    return file_->WriteRows(io, ids, rows, gap_);
  }
  // Sweep until the rows not yet staged fit (an upper bound: repeats within `ids` count each
  // time). Counted again after each sweep: it may have applied some of these very rows.
  while (true) {
    uint64_t fresh = 0;
    for (uint64_t id : ids) fresh += Find(id) == nullptr;
    if (staged_ + fresh <= capacity_) break;
    const auto fullest = static_cast<uint32_t>(std::max_element(counts_.begin(), counts_.end()) - counts_.begin());
    SLUICE_RETURN_IF_ERROR(Sweep(io, fullest));
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint64_t id = ids[k];
    if (id >= file_->num_rows()) {
      return OutOfRange("row id " + std::to_string(id) + " is out of range for " + file_->path() +
                        " (" + std::to_string(file_->num_rows()) + " rows)");
    }
    const size_t i = index_.Probe(id, ids_.data());
    if (index_.slot(i) == SlotIndex::kNone) {
      SLUICE_CHECK(!free_.empty(), "write-back buffer overflow");
      const uint32_t slot = free_.back();
      free_.pop_back();
      index_.Set(i, slot);
      ids_[slot] = id;
      const uint32_t region = RegionOf(id);
      next_[slot] = heads_[region];
      heads_[region] = slot;
      ++counts_[region];
      ++staged_;
    }
    std::memcpy(rows_.data() + uint64_t{index_.slot(i)} * row_bytes_, rows + k * row_bytes_, row_bytes_);
  }
  return Status::Ok();
}

Status WriteBackBuffer::Flush(IoSession& io) {
  for (uint32_t r = 0; r < heads_.size() && staged_ > 0; ++r) {
    SLUICE_RETURN_IF_ERROR(Sweep(io, r));
  }
  return Status::Ok();
}

}  // namespace sluice
