#include "prefetch/row_preloader.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace sluice {

RowPreloader::RowPreloader(RowFile* file, StepRows step_rows, Skip skip, const RowPreloaderOptions& options,
                           ReadRegion read_region)
    : file_(file), row_bytes_(file->row_bytes()), step_rows_(std::move(step_rows)), skip_(std::move(skip)),
      read_region_(std::move(read_region)), options_(options), capacity_(options.capacity_rows),
      index_(options.capacity_rows) {
  if (!read_region_) {
    read_region_ = [this](IoSession& io, uint32_t, std::span<const uint64_t> ids, std::byte* out) {
      return file_->ReadRows(io, ids, out, options_.gap_bytes);
    };
  }
  SLUICE_CHECK(file->num_rows() < (uint64_t{1} << 32), "preloader over %llu rows (at most 2^32)",
               static_cast<unsigned long long>(file->num_rows()));
  SLUICE_CHECK(capacity_ < (uint64_t{1} << 31), "preloader of %llu rows", static_cast<unsigned long long>(capacity_));
  options_.horizon_steps = std::max<uint32_t>(options_.horizon_steps, 1);
  options_.regions = static_cast<uint32_t>(
      std::clamp<uint64_t>(options_.regions, 1, std::max<uint64_t>(file->num_rows(), 1)));
  rows_.resize(capacity_ * row_bytes_);
  ids_.resize(capacity_);
  need_.resize(capacity_);
  free_.resize(capacity_);
  for (uint64_t i = 0; i < capacity_; ++i) free_[i] = static_cast<uint32_t>(capacity_ - 1 - i);
  horizon_.resize(options_.horizon_steps);
  expiring_.resize(options_.horizon_steps + 1);
}

void RowPreloader::Forget(size_t position) {
  free_.push_back(index_.slot(position));
  index_.EraseAt(position, ids_.data());
  --held_;
}

bool RowPreloader::Take(uint64_t row, std::byte* out) {
  if (held_ == 0) return false;
  const size_t i = index_.Probe(row, ids_.data());
  const uint32_t slot = index_.slot(i);
  if (slot == SlotIndex::kNone) return false;
  std::memcpy(out, rows_.data() + uint64_t{slot} * row_bytes_, row_bytes_);
  Forget(i);
  ++stats_.rows_taken;
  return true;
}

void RowPreloader::Drop(uint64_t row) {
  if (held_ == 0) return;
  const size_t i = index_.Probe(row, ids_.data());
  if (index_.slot(i) != SlotIndex::kNone) Forget(i);
}

Status RowPreloader::Extend(uint64_t t) {
  const uint32_t h = options_.horizon_steps;
  while (horizon_count_ > 0 && horizon_[horizon_first_].step <= t) {
    horizon_first_ = (horizon_first_ + 1) % h;
    --horizon_count_;
  }
  next_step_ = std::max(next_step_, t + 1);
  while (!source_done_ && next_step_ <= t + h) {
    listed_.clear();
    SLUICE_ASSIGN_OR_RETURN(const bool more, step_rows_(next_step_, listed_));
    if (!more) {
      source_done_ = true;
      break;
    }
    std::sort(listed_.begin(), listed_.end());
    listed_.erase(std::unique(listed_.begin(), listed_.end()), listed_.end());
    Step& s = horizon_[(horizon_first_ + horizon_count_) % h];
    s.step = next_step_++;
    s.rows.resize(listed_.size());
    for (size_t i = 0; i < listed_.size(); ++i) {
      if (listed_[i] >= file_->num_rows()) {
        return OutOfRange("row " + std::to_string(listed_[i]) + " of step " + std::to_string(s.step) +
                          " is out of range for " + file_->path());
      }
      s.rows[i] = static_cast<uint32_t>(listed_[i]);
    }
    ++horizon_count_;
  }
  return Status::Ok();
}

Status RowPreloader::Pass(IoSession& io, uint32_t region) {
  const uint64_t n = file_->num_rows(), r = options_.regions;
  const uint64_t lo = (region * n + r - 1) / r, hi = ((region + 1) * n + r - 1) / r;  // row * r / n == region
  wanted_.clear();
  for (size_t k = 0; k < horizon_count_; ++k) {
    const Step& s = horizon_[(horizon_first_ + k) % horizon_.size()];
    auto it = std::lower_bound(s.rows.begin(), s.rows.end(), static_cast<uint32_t>(lo));
    for (; it != s.rows.end() && *it < hi; ++it) wanted_.emplace_back(*it, s.step);
  }
  // The earliest step of each row (steps were listed in order; a stable sort keeps it first).
  std::stable_sort(wanted_.begin(), wanted_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  wanted_.erase(std::unique(wanted_.begin(), wanted_.end(),
                            [](const auto& a, const auto& b) { return a.first == b.first; }),
                wanted_.end());
  std::erase_if(wanted_, [&](const auto& w) {
    return index_.slot(index_.Probe(w.first, ids_.data())) != SlotIndex::kNone || skip_(w.first);
  });
  const uint64_t room = capacity_ - held_;
  if (wanted_.size() > room) {
    // The soonest needed first.
    std::stable_sort(wanted_.begin(), wanted_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    stats_.rows_left += wanted_.size() - room;
    wanted_.resize(room);
  }
  ++stats_.passes;
  read_ids_.resize(wanted_.size());
  for (size_t i = 0; i < wanted_.size(); ++i) read_ids_[i] = wanted_[i].first;
  read_rows_.resize(read_ids_.size() * row_bytes_);
  SLUICE_RETURN_IF_ERROR(read_region_(io, region, read_ids_, read_rows_.data()));
  for (size_t i = 0; i < wanted_.size(); ++i) {
    const auto [row, step] = wanted_[i];
    const size_t position = index_.Probe(row, ids_.data());
    const uint32_t slot = free_.back();
    free_.pop_back();
    index_.Set(position, slot);
    ids_[slot] = row;
    need_[slot] = step;
    std::memcpy(rows_.data() + uint64_t{slot} * row_bytes_, read_rows_.data() + i * row_bytes_, row_bytes_);
    expiring_[step % expiring_.size()].push_back(row);
    ++held_;
  }
  stats_.rows_read += wanted_.size();
  stats_.peak_held = std::max(stats_.peak_held, held_);
  return Status::Ok();
}

Status RowPreloader::Advance(IoSession& io, uint64_t t) {
  // Rows held for step t that it did not take (the cache had them): forget them.
  auto& expired = expiring_[t % expiring_.size()];
  for (uint64_t row : expired) {
    const size_t i = index_.Probe(row, ids_.data());
    const uint32_t slot = index_.slot(i);
    if (slot != SlotIndex::kNone && need_[slot] <= t) {
      Forget(i);
      ++stats_.rows_expired;
    }
  }
  expired.clear();
  SLUICE_RETURN_IF_ERROR(Extend(t));
  if (capacity_ == 0) return Status::Ok();
  credit_ += static_cast<double>(options_.regions) / options_.horizon_steps;
  while (credit_ >= 1) {
    credit_ -= 1;
    SLUICE_RETURN_IF_ERROR(Pass(io, next_region_));
    next_region_ = (next_region_ + 1) % options_.regions;
  }
  return Status::Ok();
}

}  // namespace sluice
