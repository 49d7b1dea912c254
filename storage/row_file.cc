#include "storage/row_file.h"

#include <algorithm>
#include <bitset>
#include <cstring>

#include "common/units.h"

namespace sluice {

// Holds the stripes covering a set of extents, shared (reads) or exclusive (writes), taken in
// ascending order so two calls never deadlock.
class RowFile::StripeLock {
 public:
  StripeLock(std::array<std::shared_mutex, kStripes>& stripes,
             const std::vector<IoSession::Extent>& extents, bool exclusive)
      : stripes_(stripes), exclusive_(exclusive) {
    for (const IoSession::Extent& e : extents) {
      const uint64_t first = e.offset_bytes / kDirectAlignBytes;
      const uint64_t last = (e.offset_bytes + e.length_bytes - 1) / kDirectAlignBytes;
      if (last - first + 1 >= kStripes) {
        held_.set();
        break;
      }
      for (uint64_t p = first; p <= last; ++p) held_.set(p % kStripes);
    }
    for (size_t s = 0; s < kStripes; ++s) {
      if (!held_[s]) continue;
      exclusive_ ? stripes_[s].lock() : stripes_[s].lock_shared();
    }
  }
  ~StripeLock() {
    for (size_t s = 0; s < kStripes; ++s) {
      if (!held_[s]) continue;
      exclusive_ ? stripes_[s].unlock() : stripes_[s].unlock_shared();
    }
  }
  StripeLock(const StripeLock&) = delete;
  StripeLock& operator=(const StripeLock&) = delete;

 private:
  std::array<std::shared_mutex, kStripes>& stripes_;
  bool exclusive_;
  std::bitset<kStripes> held_;
};

RowFileOptions RowFileOptionsFrom(const IoConfig& config) {
  RowFileOptions options;
  options.merge_max_bytes = static_cast<uint32_t>(config.merge_max.value);
  options.merge_gap_bytes = static_cast<uint32_t>(config.merge_gap.value);
  options.direct = config.direct;
  return options;
}

RowFile::Span RowFile::Clip(uint64_t id, const IoSession::Extent& e) const {
  const uint64_t row_begin = id * row_bytes_;
  const uint64_t lo = std::max(row_begin, e.offset_bytes);
  const uint64_t hi = std::min(row_begin + row_bytes_, e.offset_bytes + e.length_bytes);
  return Span{static_cast<uint32_t>(lo - row_begin), static_cast<uint32_t>(lo - e.offset_bytes),
              static_cast<uint32_t>(hi - lo)};
}

uint64_t RowFile::FileBytes(uint32_t row_bytes, uint64_t num_rows) {
  return AlignUp(uint64_t{row_bytes} * num_rows, kDirectAlignBytes);
}

RowFile::RowFile(File file, uint32_t row_bytes, uint64_t num_rows, const RowFileOptions& options)
    : file_(std::move(file)), row_bytes_(row_bytes), num_rows_(num_rows), options_(options),
      dirty_(FileBytes(row_bytes, num_rows)) {
  // Any single row, wherever it falls, must fit in one extent: an unaligned row may straddle
  // one more page than its aligned size.
  const uint64_t min_merge = AlignUp(row_bytes, kDirectAlignBytes) +
                             (row_bytes % kDirectAlignBytes == 0 ? 0 : kDirectAlignBytes);
  options_.merge_max_bytes = static_cast<uint32_t>(
      std::max<uint64_t>(AlignUp(options_.merge_max_bytes, kDirectAlignBytes), min_merge));
}

Result<std::unique_ptr<RowFile>> RowFile::Create(const std::string& path, uint32_t row_bytes,
                                                 uint64_t num_rows,
                                                 const RowFileOptions& options) {
  if (row_bytes == 0) return InvalidArgument("row file " + path + ": row width must be > 0");
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kCreate, options.direct));
  SLUICE_RETURN_IF_ERROR(file.Allocate(FileBytes(row_bytes, num_rows)));
  return std::unique_ptr<RowFile>(new RowFile(std::move(file), row_bytes, num_rows, options));
}

Result<std::unique_ptr<RowFile>> RowFile::Open(const std::string& path, uint32_t row_bytes,
                                               uint64_t num_rows, bool writable,
                                               const RowFileOptions& options) {
  if (row_bytes == 0) return InvalidArgument("row file " + path + ": row width must be > 0");
  SLUICE_ASSIGN_OR_RETURN(
      File file, File::Open(path, writable ? OpenMode::kReadWrite : OpenMode::kRead,
                            options.direct));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, file.SizeBytes());
  const uint64_t expected = FileBytes(row_bytes, num_rows);
  if (size != expected) {
    return Corruption("row file " + path + " is " + std::to_string(size) + " bytes; " +
                      std::to_string(num_rows) + " rows of " + std::to_string(row_bytes) +
                      " bytes need " + std::to_string(expected) +
                      (size < expected ? " (truncated?)" : ""));
  }
  return std::unique_ptr<RowFile>(new RowFile(std::move(file), row_bytes, num_rows, options));
}

Result<std::unique_ptr<RowFile>> RowFile::OpenArray(const std::string& path, uint32_t row_bytes,
                                                    uint64_t num_rows,
                                                    const RowFileOptions& options) {
  if (row_bytes == 0) return InvalidArgument("array " + path + ": row width must be > 0");
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kRead, options.direct));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, file.SizeBytes());
  if (size != num_rows * row_bytes) {
    return Corruption("array " + path + " is " + std::to_string(size) + " bytes; " +
                      std::to_string(num_rows) + " rows of " + std::to_string(row_bytes) +
                      " bytes need " + std::to_string(num_rows * row_bytes) +
                      (size < num_rows * row_bytes ? " (truncated?)" : ""));
  }
  std::unique_ptr<RowFile> f(new RowFile(std::move(file), row_bytes, num_rows, options));
  f->array_ = true;
  return f;
}

IoRequest RowFile::ReadRequest(uint64_t offset, uint32_t length, std::byte* buffer) const {
  IoRequest r{IoKind::kRead, &file_, offset, length, buffer, {}};
  if (array_) {
    const uint64_t end = uint64_t{row_bytes_} * num_rows_;
    r.min_bytes = static_cast<uint32_t>(std::min<uint64_t>(length, end > offset ? end - offset : 0));
    if (r.min_bytes == length) r.min_bytes = 0;  // the whole extent is in the file
  }
  return r;
}

Status RowFile::CheckIds(std::span<const uint64_t> ids) const {
  for (uint64_t id : ids) {
    if (id >= num_rows_) {
      return OutOfRange("row id " + std::to_string(id) + " is out of range for " + path() +
                        " (" + std::to_string(num_rows_) + " rows)");
    }
  }
  return Status::Ok();
}

Status RowFile::CheckRange(uint64_t first_row, uint64_t count) const {
  if (first_row > num_rows_ || count > num_rows_ - first_row) {
    return OutOfRange("rows [" + std::to_string(first_row) + ", " +
                      std::to_string(first_row + count) + ") are out of range for " + path() +
                      " (" + std::to_string(num_rows_) + " rows)");
  }
  return Status::Ok();
}

void RowFile::PlanExtents(IoSession& io, std::span<const uint64_t> ids, bool dedupe,
                          uint32_t gap_bytes) const {
  auto& sorted = io.sorted();
  sorted.resize(ids.size());
  for (uint32_t i = 0; i < ids.size(); ++i) sorted[i] = {ids[i], i};
  // Pairs compare by (id, position): among equal ids the later position comes last, so dedupe
  // keeps the last write. (std::sort does not allocate; std::stable_sort would.)
  std::sort(sorted.begin(), sorted.end());
  if (dedupe) {
    size_t out = 0;
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (i + 1 < sorted.size() && sorted[i + 1].first == sorted[i].first) continue;
      sorted[out++] = sorted[i];
    }
    sorted.resize(out);
  }
  // Extents never share a page: a row that straddles an extent boundary belongs to both
  // extents and each copies its part, so two requests of one call never touch the same page.
  auto& extents = io.extents();
  extents.clear();
  const uint64_t w = row_bytes_;
  for (uint32_t k = 0; k < sorted.size(); ++k) {
    if (k > 0 && sorted[k].first == sorted[k - 1].first) {
      // A repeated id (reads only) joins every extent its first occurrence is in.
      for (auto it = extents.rbegin(); it != extents.rend() && it->end == k; ++it) it->end = k + 1;
      continue;
    }
    const uint64_t start = AlignDown(sorted[k].first * w, kDirectAlignBytes);
    const uint64_t end = AlignUp((sorted[k].first + 1) * w, kDirectAlignBytes);
    if (!extents.empty()) {
      IoSession::Extent& e = extents.back();
      const uint64_t e_end = e.offset_bytes + e.length_bytes;
      if (end <= e_end) {  // wholly inside the current extent
        e.end = k + 1;
        continue;
      }
      const bool near = start <= e_end + gap_bytes;
      if (near && end - e.offset_bytes <= options_.merge_max_bytes) {
        e.length_bytes = static_cast<uint32_t>(end - e.offset_bytes);
        e.end = k + 1;
        continue;
      }
      if (start < e_end) {  // overlaps the current extent's last page: split at its end
        e.end = k + 1;
        extents.push_back({e_end, static_cast<uint32_t>(end - e_end), k, k + 1});
        continue;
      }
    }
    extents.push_back({start, static_cast<uint32_t>(end - start), k, k + 1});
  }
}

void RowFile::PlanRange(IoSession& io, uint64_t first_row, uint64_t count) const {
  auto& extents = io.extents();
  extents.clear();
  const uint64_t begin = AlignDown(first_row * row_bytes_, kDirectAlignBytes);
  const uint64_t end = AlignUp((first_row + count) * row_bytes_, kDirectAlignBytes);
  for (uint64_t o = begin; o < end; o += options_.merge_max_bytes) {
    const uint64_t length = std::min<uint64_t>(options_.merge_max_bytes, end - o);
    extents.push_back({o, static_cast<uint32_t>(length), 0, 0});
  }
}

Status RowFile::ReadRows(IoSession& io, std::span<const uint64_t> ids, std::byte* out,
                         uint32_t gap_bytes) const {
  const uint64_t rb = row_bytes_;
  return ReadRowsTo(io, ids, [out, rb](uint32_t i) { return out + uint64_t{i} * rb; }, gap_bytes);
}

Status RowFile::ReadRowsScatter(IoSession& io, std::span<const uint64_t> ids,
                                std::span<std::byte* const> rows, uint32_t gap_bytes) const {
  if (rows.size() != ids.size()) {
    return InvalidArgument("ReadRowsScatter on " + path() + ": " + std::to_string(ids.size()) + " ids, " +
                           std::to_string(rows.size()) + " destinations");
  }
  return ReadRowsTo(io, ids, [rows](uint32_t i) { return rows[i]; }, gap_bytes);
}

template <typename Dest>
Status RowFile::ReadRowsTo(IoSession& io, std::span<const uint64_t> ids, Dest dest,
                           uint32_t gap_bytes) const {
  SLUICE_RETURN_IF_ERROR(CheckIds(ids));
  if (ids.empty()) return Status::Ok();
  io.EnsureSlotBytes(options_.merge_max_bytes);
  PlanExtents(io, ids, /*dedupe=*/false, gap_bytes == kFileGap ? options_.merge_gap_bytes : gap_bytes);
  StripeLock lock(stripes_, io.extents(), /*exclusive=*/false);
  const auto& sorted = io.sorted();
  const auto& extents = io.extents();
  // An extent that is exactly one row, bound for an aligned destination (4 KiB rows into an
  // aligned buffer or arena), is read straight into it: no staging copy (the copy cost a tenth
  // of the io thread at 75K random reads a second).
  auto straight = [&](const IoSession::Extent& e) -> std::byte* {
    if (e.end != e.first + 1 || e.length_bytes != row_bytes_ || e.offset_bytes != sorted[e.first].first * row_bytes_) {
      return nullptr;
    }
    std::byte* d = dest(sorted[e.first].second);
    return reinterpret_cast<uintptr_t>(d) % kDirectAlignBytes == 0 ? d : nullptr;
  };
  auto prepare = [&](size_t index, uint32_t slot) {
    IoRequest& r = io.slot_request(slot);
    std::byte* d = straight(extents[index]);
    r = ReadRequest(extents[index].offset_bytes, extents[index].length_bytes, d ? d : io.slot_buffer(slot));
    return &r;
  };
  auto complete = [&](size_t index, uint32_t slot, IoRequest& r) {
    const IoSession::Extent& e = extents[index];
    if (r.buffer != io.slot_buffer(slot)) return IoNext::kDone;  // read in place
    for (uint32_t k = e.first; k < e.end; ++k) {
      const Span s = Clip(sorted[k].first, e);
      std::memcpy(dest(sorted[k].second) + s.row_offset, r.buffer + s.extent_offset, s.length);
    }
    return IoNext::kDone;
  };
  return io.executor().Stream(extents.size(), prepare, complete);
}

Status RowFile::ReadRange(IoSession& io, uint64_t first_row, uint64_t count,
                          std::byte* out) const {
  SLUICE_RETURN_IF_ERROR(CheckRange(first_row, count));
  if (count == 0) return Status::Ok();
  io.EnsureSlotBytes(options_.merge_max_bytes);
  PlanRange(io, first_row, count);
  StripeLock lock(stripes_, io.extents(), /*exclusive=*/false);
  const uint64_t data_begin = first_row * row_bytes_;
  const uint64_t data_end = (first_row + count) * row_bytes_;
  const auto& extents = io.extents();
  auto prepare = [&](size_t index, uint32_t slot) {
    IoRequest& r = io.slot_request(slot);
    r = ReadRequest(extents[index].offset_bytes, extents[index].length_bytes, io.slot_buffer(slot));
    return &r;
  };
  auto complete = [&](size_t, uint32_t, IoRequest& r) {
    const uint64_t lo = std::max(r.offset_bytes, data_begin);
    const uint64_t hi = std::min(r.offset_bytes + r.length_bytes, data_end);
    std::memcpy(out + (lo - data_begin), r.buffer + (lo - r.offset_bytes), hi - lo);
    return IoNext::kDone;
  };
  return io.executor().Stream(extents.size(), prepare, complete);
}

template <typename Fill>
Status RowFile::WriteExtents(IoSession& io, Fill fill, uint64_t data_begin, uint64_t data_end,
                             bool by_rows) {
  const auto& sorted = io.sorted();
  const auto& extents = io.extents();
  for (const IoSession::Extent& e : extents) dirty_.Mark(e.offset_bytes, e.length_bytes);
  const uint64_t rows_end_bytes = uint64_t{row_bytes_} * num_rows_;
  // An extent whose every data byte is being written needs no read first. Bytes past the last
  // row (the file's alignment padding) carry nothing.
  auto covered = [&](const IoSession::Extent& e) {
    const uint64_t e_end = std::min<uint64_t>(e.offset_bytes + e.length_bytes, rows_end_bytes);
    if (!by_rows) return data_begin <= e.offset_bytes && e_end <= data_end;
    uint64_t next = e.offset_bytes;
    for (uint32_t k = e.first; k < e.end; ++k) {
      const Span s = Clip(sorted[k].first, e);
      if (e.offset_bytes + s.extent_offset != next) return false;
      next += s.length;
    }
    return next >= e_end;
  };
  auto prepare = [&](size_t index, uint32_t slot) {
    const IoSession::Extent& e = extents[index];
    IoRequest& r = io.slot_request(slot);
    r = IoRequest{IoKind::kRead, &file_, e.offset_bytes, e.length_bytes, io.slot_buffer(slot), {}};
    if (covered(e)) {
      fill(e, r.buffer);
      r.kind = IoKind::kWrite;
    }
    return &r;
  };
  auto complete = [&](size_t index, uint32_t, IoRequest& r) {
    if (r.kind == IoKind::kWrite) return IoNext::kDone;
    fill(extents[index], r.buffer);  // read-modify-write: patch, then write back
    r.kind = IoKind::kWrite;
    return IoNext::kResubmit;
  };
  return io.executor().Stream(extents.size(), prepare, complete);
}

Status RowFile::WriteRows(IoSession& io, std::span<const uint64_t> ids, const std::byte* rows,
                          uint32_t gap_bytes) {
  SLUICE_RETURN_IF_ERROR(CheckIds(ids));
  if (ids.empty()) return Status::Ok();
  io.EnsureSlotBytes(options_.merge_max_bytes);
  PlanExtents(io, ids, /*dedupe=*/true, gap_bytes);
  StripeLock lock(stripes_, io.extents(), /*exclusive=*/true);
  const auto& sorted = io.sorted();
  auto fill = [&](const IoSession::Extent& e, std::byte* buffer) {
    for (uint32_t k = e.first; k < e.end; ++k) {
      const Span s = Clip(sorted[k].first, e);
      std::memcpy(buffer + s.extent_offset,
                  rows + uint64_t{sorted[k].second} * row_bytes_ + s.row_offset, s.length);
    }
  };
  return WriteExtents(io, fill, 0, 0, /*by_rows=*/true);
}

Status RowFile::UpdateRows(IoSession& io, std::span<const uint64_t> write_ids, const std::byte* rows,
                           std::span<const uint64_t> read_ids, std::byte* out, uint32_t gap_bytes) {
  if (read_ids.empty()) return WriteRows(io, write_ids, rows, gap_bytes);
  if (write_ids.empty()) return ReadRows(io, read_ids, out, gap_bytes);
  SLUICE_RETURN_IF_ERROR(CheckIds(write_ids));
  SLUICE_RETURN_IF_ERROR(CheckIds(read_ids));
  // One list: positions below nw are writes, the rest reads.
  const size_t nw = write_ids.size();
  std::vector<uint64_t> all(write_ids.begin(), write_ids.end());
  all.insert(all.end(), read_ids.begin(), read_ids.end());
  io.EnsureSlotBytes(options_.merge_max_bytes);
  PlanExtents(io, all, /*dedupe=*/false, gap_bytes);
  const auto& sorted = io.sorted();
  for (size_t k = 1; k < sorted.size(); ++k) {
    if (sorted[k].first == sorted[k - 1].first) {
      return InvalidArgument("UpdateRows on " + path() + ": row " + std::to_string(sorted[k].first) +
                             " is given twice");
    }
  }
  StripeLock lock(stripes_, io.extents(), /*exclusive=*/true);
  const auto& extents = io.extents();
  const uint64_t rows_end_bytes = uint64_t{row_bytes_} * num_rows_;
  // Whether an extent holds a written (else a read) row; whether written rows cover every data
  // byte of it.
  auto holds = [&](const IoSession::Extent& e, bool written) {
    for (uint32_t k = e.first; k < e.end; ++k) {
      if ((sorted[k].second < nw) == written) return true;
    }
    return false;
  };
  auto covered = [&](const IoSession::Extent& e) {
    const uint64_t e_end = std::min<uint64_t>(e.offset_bytes + e.length_bytes, rows_end_bytes);
    uint64_t next = e.offset_bytes;
    for (uint32_t k = e.first; k < e.end; ++k) {
      const Span s = Clip(sorted[k].first, e);
      if (e.offset_bytes + s.extent_offset != next) return false;
      next += s.length;
    }
    return next >= e_end;
  };
  for (const IoSession::Extent& e : extents) {
    if (holds(e, true)) dirty_.Mark(e.offset_bytes, e.length_bytes);
  }
  auto patch = [&](const IoSession::Extent& e, std::byte* buffer) {
    for (uint32_t k = e.first; k < e.end; ++k) {
      if (sorted[k].second >= nw) continue;
      const Span s = Clip(sorted[k].first, e);
      std::memcpy(buffer + s.extent_offset, rows + uint64_t{sorted[k].second} * row_bytes_ + s.row_offset,
                  s.length);
    }
  };
  auto prepare = [&](size_t index, uint32_t slot) {
    const IoSession::Extent& e = extents[index];
    IoRequest& r = io.slot_request(slot);
    r = IoRequest{IoKind::kRead, &file_, e.offset_bytes, e.length_bytes, io.slot_buffer(slot), {}};
    if (!holds(e, false) && covered(e)) {  // written whole: no read first
      patch(e, r.buffer);
      r.kind = IoKind::kWrite;
    }
    return &r;
  };
  auto complete = [&](size_t index, uint32_t, IoRequest& r) {
    if (r.kind == IoKind::kWrite) return IoNext::kDone;
    const IoSession::Extent& e = extents[index];
    for (uint32_t k = e.first; k < e.end; ++k) {
      if (sorted[k].second < nw) continue;
      const Span s = Clip(sorted[k].first, e);
      std::memcpy(out + (sorted[k].second - nw) * row_bytes_ + s.row_offset, r.buffer + s.extent_offset, s.length);
    }
    if (!holds(e, true)) return IoNext::kDone;
    patch(e, r.buffer);  // read-modify-write: patch, then write back
    r.kind = IoKind::kWrite;
    return IoNext::kResubmit;
  };
  return io.executor().Stream(extents.size(), prepare, complete);
}

Status RowFile::WriteRange(IoSession& io, uint64_t first_row, uint64_t count,
                           const std::byte* rows) {
  SLUICE_RETURN_IF_ERROR(CheckRange(first_row, count));
  if (count == 0) return Status::Ok();
  io.EnsureSlotBytes(options_.merge_max_bytes);
  PlanRange(io, first_row, count);
  StripeLock lock(stripes_, io.extents(), /*exclusive=*/true);
  const uint64_t data_begin = first_row * row_bytes_;
  const uint64_t data_end = (first_row + count) * row_bytes_;
  auto fill = [&](const IoSession::Extent& e, std::byte* buffer) {
    const uint64_t lo = std::max(e.offset_bytes, data_begin);
    const uint64_t hi = std::min(e.offset_bytes + e.length_bytes, data_end);
    std::memcpy(buffer + (lo - e.offset_bytes), rows + (lo - data_begin), hi - lo);
  };
  return WriteExtents(io, fill, data_begin, data_end, /*by_rows=*/false);
}

}  // namespace sluice
