#include "prefetch/row_backings.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sluice {

RowFileBacking::RowFileBacking(RowFile* file, const std::vector<uint64_t>* offsets, RowInit init,
                               bool all_written, uint64_t staging_rows)
    : file_(file), offsets_(offsets), init_(std::move(init)),
      written_((offsets->back() + 63) / 64, all_written ? ~uint64_t{0} : 0) {
  if (staging_rows > 0) {
    staged_ = std::make_unique<WriteBackBuffer>(file, WriteBackOptions{.capacity_rows = staging_rows});
  }
}

Status RowFileBacking::Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) {
  const uint32_t rb = file_->row_bytes();
  ids_.clear();
  where_.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t row = (*offsets_)[keys[i].table] + keys[i].id;
    if (!cached_.empty()) cached_[row / 64] |= uint64_t{1} << (row % 64);
    if (const std::byte* p = staged_ ? staged_->Find(row) : nullptr) {
      std::memcpy(out + i * rb, p, rb);
    } else if (preload_ && preload_->Take(row, out + i * rb)) {
    } else if (Bit(written_, row)) {
      ids_.push_back(row);
      where_.push_back(i);
    } else {
      init_(keys[i], out + i * rb);
    }
  }
  if (ids_.empty()) return Status::Ok();
  buffer_.resize(ids_.size() * rb);
  SLUICE_RETURN_IF_ERROR(file_->ReadRows(io, ids_, buffer_.data()));
  for (size_t j = 0; j < ids_.size(); ++j) {
    std::memcpy(out + where_[j] * rb, buffer_.data() + j * rb, rb);
  }
  reads_ += ids_.size();
  return Status::Ok();
}

Status RowFileBacking::Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) {
  ids_.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ids_[i] = (*offsets_)[keys[i].table] + keys[i].id;
  SLUICE_RETURN_IF_ERROR(staged_ ? staged_->Write(io, ids_, rows) : file_->WriteRows(io, ids_, rows));
  for (uint64_t row : ids_) {
    written_[row / 64] |= uint64_t{1} << (row % 64);
    if (!cached_.empty()) cached_[row / 64] &= ~(uint64_t{1} << (row % 64));
    if (preload_) preload_->Drop(row);  // (never held: a row the cache had is not read ahead)
  }
  return Status::Ok();
}

void RowFileBacking::StartPreload(RowPreloader::StepRows step_rows, RowPreloaderOptions options) {
  if (cached_.empty()) cached_.assign(written_.size(), 0);
  RowPreloader::ReadRegion read;
  if (staged_) {
    options.regions = staged_->regions();
    const uint64_t min_staged =
        std::max<uint64_t>(1, staged_->capacity_rows() / (2 * staged_->regions()));
    read = [this, min_staged](IoSession& io, uint32_t region, std::span<const uint64_t> ids,
                              std::byte* out) {
      return staged_->SweepWith(io, region, ids, out, min_staged);
    };
  }
  preload_ = std::make_unique<RowPreloader>(
      file_, std::move(step_rows),
      // (Staged rows are read ahead too: SweepWith hands out their staged copies.)
      [this](uint64_t row) { return Bit(cached_, row) || !Bit(written_, row); }, options,
      std::move(read));
}

void RowFileBacking::StopPreload() {
  if (!preload_) return;
  const RowPreloaderStats& s = preload_->stats();
  preload_stats_.passes += s.passes;
  preload_stats_.rows_read += s.rows_read;
  preload_stats_.rows_taken += s.rows_taken;
  preload_stats_.rows_expired += s.rows_expired;
  preload_stats_.rows_left += s.rows_left;
  preload_stats_.peak_held = std::max(preload_stats_.peak_held, s.peak_held);
  preload_.reset();
}

Status KvBacking::Read(IoSession&, std::span<const RowKey> keys, std::byte* out) {
  SLUICE_RETURN_IF_ERROR(kv_->MultiGet(keys, out, found_));
  const uint32_t rb = kv_->row_bytes();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found_[i]) {
      init_(keys[i], out + i * rb);
    } else {
      ++reads_;
    }
  }
  return Status::Ok();
}

Status KvBacking::Write(IoSession&, std::span<const RowKey> keys, const std::byte* rows) {
  return kv_->Write(keys, rows);
}

namespace {

// A row file of `rows` rows: reserved on disk, or (`sparse`) holes until written.
Result<std::unique_ptr<RowFile>> CreateRowFile(const std::string& path, uint32_t row_bytes, uint64_t rows,
                                               const IoConfig& io, bool sparse) {
  if (!sparse) return RowFile::Create(path, row_bytes, rows, RowFileOptionsFrom(io));
  {
    SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kCreate, false));
    SLUICE_RETURN_IF_ERROR(file.Truncate(RowFile::FileBytes(row_bytes, rows)));
  }
  return RowFile::Open(path, row_bytes, rows, /*writable=*/true, RowFileOptionsFrom(io));
}

}  // namespace

Status CreateInitialRowFile(const std::string& path, uint32_t row_bytes,
                            const std::vector<uint64_t>& offsets, const RowInit& init,
                            const IoConfig& io, uint64_t first_row, uint64_t end_row) {
  const std::string temp = path + ".tmp";
  end_row = std::min(end_row, offsets.back());
  {
    SLUICE_ASSIGN_OR_RETURN(auto file, CreateRowFile(temp, row_bytes, offsets.back(), io,
                                                     /*sparse=*/first_row > 0 || end_row < offsets.back()));
    SLUICE_ASSIGN_OR_RETURN(auto session, IoSession::Create(io));
    constexpr uint64_t kChunk = 1 << 16;
    std::vector<std::byte> rows(kChunk * row_bytes);
    for (uint32_t t = 0; t + 1 < offsets.size(); ++t) {
      // The table's rows within [first_row, end_row), numbered within the table.
      const uint64_t begin = std::clamp(first_row, offsets[t], offsets[t + 1]) - offsets[t];
      const uint64_t n = std::clamp(end_row, offsets[t], offsets[t + 1]) - offsets[t];
      for (uint64_t lo = begin; lo < n; lo += kChunk) {
        const uint64_t c = std::min(kChunk, n - lo);
        // A row's initial value is a pure function of its key: a chunk is filled in parallel.
        tbb::parallel_for(tbb::blocked_range<uint64_t>(0, c, 4096), [&](const tbb::blocked_range<uint64_t>& r) {
          for (uint64_t i = r.begin(); i < r.end(); ++i) init(RowKey{lo + i, t}, rows.data() + i * row_bytes);
        });
        SLUICE_RETURN_IF_ERROR(file->WriteRange(*session, offsets[t] + lo, c, rows.data()));
      }
    }
    SLUICE_RETURN_IF_ERROR(file->Sync());
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + temp + " to " + path, errno);
  return Status::Ok();
}

Status MemoryBacking::Read(IoSession&, std::span<const RowKey> keys, std::byte* out) {
  const uint32_t rb = rows_->row_bytes();
  for (size_t i = 0; i < keys.size(); ++i) std::memcpy(out + i * rb, rows_->Row(keys[i]), rb);
  reads_ += keys.size();
  return Status::Ok();
}

Status MemoryBacking::Write(IoSession&, std::span<const RowKey> keys, const std::byte* rows) {
  const uint32_t rb = rows_->row_bytes();
  for (size_t i = 0; i < keys.size(); ++i) std::memcpy(rows_->Row(keys[i]), rows + i * rb, rb);
  return Status::Ok();
}

Result<std::unique_ptr<ArrayBacking>> ArrayBacking::Open(const Dataset& dataset,
                                                         const std::string& role,
                                                         const IoConfig& io) {
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset.File(role));
  const std::string where = "dataset " + dataset.dir() + ": " + role + " (" + f->path + ")";
  if (f->dtype != DType::kFloat32 && f->dtype != DType::kFloat16) {
    return InvalidArgument(where + " is " + DTypeName(f->dtype) + ", expected float32 or float16");
  }
  if (f->shape.size() != 2 || f->shape[1] == 0) {
    return InvalidArgument(where + ": expected a 2-D array of rows");
  }
  const auto dim = static_cast<uint32_t>(f->shape[1]);
  const uint32_t width = f->dtype == DType::kFloat32 ? 4 : 2;
  SLUICE_ASSIGN_OR_RETURN(auto file, RowFile::OpenArray(dataset.PathOf(*f), dim * width, f->shape[0],
                                                        RowFileOptionsFrom(io)));
  return std::unique_ptr<ArrayBacking>(new ArrayBacking(std::move(file), f->dtype, dim));
}

Status ArrayBacking::Ids(std::span<const RowKey> keys) {
  ids_.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].table != 0) {
      return InvalidArgument(file_->path() + ": a dataset array has one table, asked for table " +
                             std::to_string(keys[i].table));
    }
    ids_[i] = keys[i].id;
  }
  return Status::Ok();
}

Status ArrayBacking::Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) {
  SLUICE_RETURN_IF_ERROR(Ids(keys));
  SLUICE_RETURN_IF_ERROR(file_->ReadRows(io, ids_, out));
  reads_ += keys.size();
  return Status::Ok();
}

Status ArrayBacking::ReadScatter(IoSession& io, std::span<const RowKey> keys, std::span<std::byte* const> rows,
                                 uint32_t row_bytes, uint32_t gap_bytes) {
  if (row_bytes != file_->row_bytes()) {
    return InvalidArgument(file_->path() + ": rows of " + std::to_string(file_->row_bytes()) + " bytes, asked for " +
                           std::to_string(row_bytes));
  }
  SLUICE_RETURN_IF_ERROR(Ids(keys));
  SLUICE_RETURN_IF_ERROR(file_->ReadRowsScatter(io, ids_, rows, gap_bytes));
  reads_ += keys.size();
  return Status::Ok();
}

Status ArrayBacking::Write(IoSession&, std::span<const RowKey>, const std::byte*) {
  return FailedPrecondition(file_->path() + ": a dataset is read-only (rows of a dataset array "
                            "are never written)");
}

}  // namespace sluice
