#pragma once
// RowFile: a table of fixed-width rows (the width need not be aligned) in one file, read and
// written with O_DIRECT through a thread's IoSession.
//
// Reads of an arbitrary id set sort the ids, merge neighbouring rows into aligned reads of at
// most merge_max bytes (also across gaps up to merge_gap), and copy the rows out in the caller's
// order. Writes go by aligned extent: all rows that share an extent are written together; an
// extent only partly covered is read, patched and written back (read-modify-write).
//
// Thread safety: any number of threads may call any method concurrently, each with its own
// IoSession. Extents are guarded by striped reader-writer locks, so a write never races a read
// or another write of the same extent and rows narrower than a sector never lose updates.
// Partitioned tables are contiguous row ranges: ReadRange/WriteRange.

#include <array>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>

#include "storage/dirty_pages.h"
#include "storage/file.h"
#include "storage/io_session.h"

namespace sluice {

struct RowFileOptions {
  uint32_t merge_max_bytes = 128 * 1024;  // raised to fit one row plus alignment
  uint32_t merge_gap_bytes = 0;
  bool direct = true;
};
RowFileOptions RowFileOptionsFrom(const IoConfig& config);

class RowFile {
 public:
  // Creates (or truncates) `path` with num_rows zeroed rows and its blocks reserved, so later
  // writes cannot fail halfway for lack of space.
  static Result<std::unique_ptr<RowFile>> Create(const std::string& path, uint32_t row_bytes,
                                                 uint64_t num_rows, const RowFileOptions& options);
  // Opens an existing file; its size must be exactly FileBytes(row_bytes, num_rows).
  static Result<std::unique_ptr<RowFile>> Open(const std::string& path, uint32_t row_bytes,
                                               uint64_t num_rows, bool writable,
                                               const RowFileOptions& options);
  // Opens an array of a dataset read-only: exactly num_rows * row_bytes bytes, not padded (as
  // numpy writes it). Reads of its last extent stop at the file's end.
  static Result<std::unique_ptr<RowFile>> OpenArray(const std::string& path, uint32_t row_bytes,
                                                    uint64_t num_rows, const RowFileOptions& options);
  // The file's size: num_rows * row_bytes rounded up to kDirectAlignBytes.
  static uint64_t FileBytes(uint32_t row_bytes, uint64_t num_rows);

  // Reads rows ids[i] into out + i * row_bytes. Ids may repeat and come in any order.
  // gap_bytes: rows less than this many bytes apart are read as one extent (the default: the
  // file's merge_gap_bytes; a larger gap trades bytes read for fewer, larger reads).
  static constexpr uint32_t kFileGap = ~uint32_t{0};
  Status ReadRows(IoSession& io, std::span<const uint64_t> ids, std::byte* out,
                  uint32_t gap_bytes = kFileGap) const;
  // The same, row ids[i] into rows[i] (e.g. cache slots: no staging copy).
  Status ReadRowsScatter(IoSession& io, std::span<const uint64_t> ids, std::span<std::byte* const> rows,
                         uint32_t gap_bytes = kFileGap) const;
  // Writes rows + i * row_bytes to row ids[i]. If an id repeats, its last row wins. Rows less
  // than gap_bytes apart share one extent (read, patched, written), up to merge_max_bytes.
  Status WriteRows(IoSession& io, std::span<const uint64_t> ids, const std::byte* rows,
                   uint32_t gap_bytes = 0);
  // One pass over the extents holding both lists: writes rows + i * row_bytes to write_ids[i]
  // and reads read_ids[j] into out + j * row_bytes, each extent read once (and written once if
  // it holds a written row). Ids must be distinct, within and across the lists.
  Status UpdateRows(IoSession& io, std::span<const uint64_t> write_ids, const std::byte* rows,
                    std::span<const uint64_t> read_ids, std::byte* out, uint32_t gap_bytes);
  // Rows [first_row, first_row + count) as one contiguous byte range.
  Status ReadRange(IoSession& io, uint64_t first_row, uint64_t count, std::byte* out) const;
  Status WriteRange(IoSession& io, uint64_t first_row, uint64_t count, const std::byte* rows);

  Status Sync() { return file_.Sync(); }
  const std::string& path() const { return file_.path(); }
  uint32_t row_bytes() const { return row_bytes_; }
  uint64_t num_rows() const { return num_rows_; }
  bool direct() const { return file_.direct(); }
  // The underlying file, for callers that do aligned whole-extent io themselves (the block
  // cache's direct path). They must not race RowFile's own writes of the same extents.
  const File& file() const { return file_; }
  // The pages written since the last DirtyPages::Take (every write marks its extents before it
  // is issued); callers that write through file() mark theirs with MarkWritten.
  DirtyPages& dirty() { return dirty_; }
  void MarkWritten(uint64_t offset_bytes, uint64_t length_bytes) { dirty_.Mark(offset_bytes, length_bytes); }

 private:
  // 32, not more: a call holds all stripes it touches at once, and ThreadSanitizer tracks at
  // most 64 locks held by one thread.
  static constexpr size_t kStripes = 32;
  class StripeLock;

  RowFile(File file, uint32_t row_bytes, uint64_t num_rows, const RowFileOptions& options);
  // A read request of extent [offset, offset + length) (an array's last one may stop at its end).
  IoRequest ReadRequest(uint64_t offset, uint32_t length, std::byte* buffer) const;
  // The part of row `id` inside extent `e` (rows may straddle two extents).
  struct Span {
    uint32_t row_offset;     // from the row's first byte
    uint32_t extent_offset;  // from the extent's first byte
    uint32_t length;
  };
  Span Clip(uint64_t id, const IoSession::Extent& e) const;
  Status CheckIds(std::span<const uint64_t> ids) const;
  Status CheckRange(uint64_t first_row, uint64_t count) const;
  // Sorts ids into io.sorted() and groups them into io.extents(); dedupe keeps the last
  // occurrence of an id (for writes).
  void PlanExtents(IoSession& io, std::span<const uint64_t> ids, bool dedupe,
                   uint32_t gap_bytes) const;
  // Splits the byte range of rows [first, first + count) into aligned extents.
  void PlanRange(IoSession& io, uint64_t first_row, uint64_t count) const;
  // ReadRows and ReadRowsScatter: row at position i goes to dest(i).
  template <typename Dest>
  Status ReadRowsTo(IoSession& io, std::span<const uint64_t> ids, Dest dest, uint32_t gap_bytes) const;
  // Writes io.extents(); fill(extent, buffer) copies the new bytes into an extent's buffer.
  template <typename Fill>
  Status WriteExtents(IoSession& io, Fill fill, uint64_t data_begin, uint64_t data_end,
                      bool by_rows);

  File file_;
  uint32_t row_bytes_;
  uint64_t num_rows_;
  RowFileOptions options_;
  bool array_ = false;  // unpadded (OpenArray): read-only, may end inside its last extent
  mutable std::array<std::shared_mutex, kStripes> stripes_;
  DirtyPages dirty_;
};

}  // namespace sluice
