#pragma once
// WriteBackBuffer: rows written to a RowFile are staged in RAM and applied to the file in sorted
// sweeps, one region at a time.
//
// Why: a row cache over tables of tiny rows (a 16-dim embedding with its optimizer state is
// 72 bytes) evicts rows of random ids, one or two per page. Written straight through, each costs
// a read-modify-write of a 4 KiB page: two random ios for 72 bytes, and the disk's random-io
// rate caps training at a few thousand samples/s. Staged, rows wait until their region (1/64 of
// the file) is the fullest and the buffer is full; the sweep then rewrites that region's touched
// pages as large merged extents, so the disk sees sequential reads and writes of whole extents
// instead of random page updates. The io per write-back falls with the buffer size: the file is
// rewritten once per `capacity_rows` write-backs at worst, and less when writes cluster.
//
// Reads must look here first (Find): a staged row is newer than the file. A row written again
// while staged replaces its staged copy. Flush applies every staged row (before a checkpoint
// copies the file, at the end of a run). Not thread safe: one owner thread (the prefetcher's io).
// Memory: BytesPerRow(row_bytes) per row of capacity.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "storage/io_session.h"
#include "storage/row_file.h"
#include "storage/slot_index.h"

namespace sluice {

struct WriteBackOptions {
  uint64_t capacity_rows = 0;
  uint32_t regions = 64;
  // A sweep merges rows less than this many bytes apart into one extent (read, patch, write);
  // extents are at most the row file's merge_max_bytes.
  uint32_t sweep_gap_bytes = 64 * 1024;
};

struct WriteBackStats {
  uint64_t rows_staged = 0;  // Write calls' rows (a row staged twice counts twice)
  uint64_t sweeps = 0;  // sweeps to make room
  uint64_t rows_swept = 0;
  uint64_t passes = 0;  // sweeps with a reader's reads (SweepWith)
  uint64_t reads_only = 0;  // SweepWith calls that only read (the region held too few staged rows)
};

class WriteBackBuffer {
 public:
  WriteBackBuffer(RowFile* file, const WriteBackOptions& options);

  // Stages rows + i * row_bytes as row ids[i] (the last of repeated ids wins). When the buffer
  // would overflow, first sweeps the fullest regions until the rows fit; rows beyond a whole
  // buffer go straight to the file.
  Status Write(IoSession& io, std::span<const uint64_t> ids, const std::byte* rows);
  // The staged copy of row `id`, or nullptr when the file holds its latest value.
  const std::byte* Find(uint64_t id) const;
  // Applies every staged row to the file (not synced: call RowFile::Sync for durability).
  Status Flush(IoSession& io);

  // Reads read_ids (distinct rows of region `region`; staged ones come from the buffer) into
  // out + i * row_bytes and, when the region holds at least min_staged staged rows, sweeps it in
  // the same pass over its extents: a reader that wants rows of a region gets the sweep's reads
  // for free. (Below min_staged the rows are only read: sweeping a nearly empty region would
  // rewrite its pages for a few rows and waste the buffer's coalescing.)
  Status SweepWith(IoSession& io, uint32_t region, std::span<const uint64_t> read_ids, std::byte* out,
                   uint64_t min_staged = 1);
  uint64_t staged_in(uint32_t region) const { return counts_[region]; }
  uint32_t regions() const { return static_cast<uint32_t>(heads_.size()); }

  uint64_t staged() const { return staged_; }
  uint64_t capacity_rows() const { return capacity_; }
  const WriteBackStats& stats() const { return stats_; }
  // RAM per row of capacity: the row, two index entries, its id, its region-list link and its
  // place on the free stack (the sweep's scratch is one region's rows, not counted).
  static uint64_t BytesPerRow(uint32_t row_bytes) { return row_bytes + 2 * 4 + 8 + 4 + 4; }

 private:
  static constexpr uint32_t kNone = SlotIndex::kNone;
  uint32_t RegionOf(uint64_t id) const {
    return static_cast<uint32_t>(id * heads_.size() / file_->num_rows());
  }
  Status Sweep(IoSession& io, uint32_t region);
  // Writes region's staged rows (and reads read_ids) in one pass; empties the region.
  Status Apply(IoSession& io, uint32_t region, std::span<const uint64_t> read_ids, std::byte* out);

  RowFile* file_;
  uint32_t row_bytes_;
  uint64_t capacity_;
  uint32_t gap_;
  // Staged rows by slot: the row, its id, the next slot of its region's list; free slots on a
  // stack.
  std::vector<std::byte> rows_;
  std::vector<uint64_t> ids_;
  std::vector<uint32_t> next_;
  std::vector<uint32_t> free_;
  // Slots by id.
  SlotIndex index_;
  // Each region's staged slots as a list, and their count.
  std::vector<uint32_t> heads_;
  std::vector<uint32_t> counts_;
  uint64_t staged_ = 0;
  WriteBackStats stats_;
  // Sweep scratch.
  std::vector<uint64_t> sweep_ids_;
  std::vector<std::byte> sweep_rows_;
  std::vector<uint64_t> pass_ids_;
  std::vector<size_t> pass_where_;
  std::vector<std::byte> pass_rows_;
};

}  // namespace sluice
