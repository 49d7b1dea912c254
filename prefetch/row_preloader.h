#pragma once
// RowPreloader: reads a row file ahead of the cache, one region at a time, so that the loads of
// coming steps need no random reads.
//
// Why: out of core, a miss on a row that was written before is one random 4 KiB read for a
// 72-byte row, and once most of an epoch's rows have been written back the disk's random-read
// rate bounds training. But the batch order is known far ahead (the sample file, read
// sequentially), so the rows a region of the file will be asked for over the next `horizon`
// steps are known too. Each step the preloader passes over regions/horizon of the file's regions
// in turn (every region once per horizon): it reads, as large merged extents, the rows of that
// region that steps (t, t + horizon] need and holds them in RAM until their step loads them.
// The disk sees a sequential-ish read of each region once per horizon instead of one random read
// per miss.
//
// Why it is exact: a row is held only if its latest value is the file's when it is read: the
// caller's `skip` turns away rows whose newer copy lives elsewhere (in the cache, in a write-back
// buffer) and rows never written (made from the seed). A held row is handed out once (Take) and
// dropped the moment a newer value is written (Drop), so it is never stale.
//
// Bounded: at most capacity_rows rows (the soonest needed first) and the horizon's row lists.
// Not thread safe: one owner thread (the prefetcher's io).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/status.h"
#include "storage/io_session.h"
#include "storage/row_file.h"
#include "storage/slot_index.h"

namespace sluice {

struct RowPreloaderOptions {
  uint64_t capacity_rows = 0;
  uint32_t horizon_steps = 32;  // rows needed within this many steps are read ahead
  uint32_t regions = 64;        // each read once per horizon
  uint32_t gap_bytes = 64 * 1024;  // wanted rows less than this apart are read as one extent
};

struct RowPreloaderStats {
  uint64_t passes = 0;        // regions read ahead
  uint64_t rows_read = 0;     // rows read ahead
  uint64_t rows_taken = 0;    // rows a load took instead of reading them
  uint64_t rows_expired = 0;  // rows read ahead whose step never asked for them
  uint64_t rows_left = 0;     // wanted rows not read ahead: no room
  uint64_t peak_held = 0;
};

class RowPreloader {
 public:
  // Appends the file rows step s reads (any order, repeats allowed); false past the last step.
  using StepRows = std::function<Result<bool>(uint64_t step, std::vector<uint64_t>& rows)>;
  // True for a row whose file copy is not its latest value, or that needs no read.
  using Skip = std::function<bool(uint64_t row)>;

  // Reads rows `ids` (all in region `region`) into out + i * row_bytes; called once per pass,
  // also with no ids. The default reads them from the file; a write-back buffer's SweepWith
  // applies the region's staged rows in the same pass.
  using ReadRegion = std::function<Status(IoSession& io, uint32_t region, std::span<const uint64_t> ids,
                                          std::byte* out)>;

  RowPreloader(RowFile* file, StepRows step_rows, Skip skip, const RowPreloaderOptions& options,
               ReadRegion read_region = nullptr);

  // Call once per step, in order, after step t's loads: looks `horizon` steps ahead, forgets
  // rows step t never took, and reads this step's share of regions.
  Status Advance(IoSession& io, uint64_t t);
  // Copies held row `row` to out and forgets it; false when it is not held.
  bool Take(uint64_t row, std::byte* out);
  // Forgets row `row` (a newer value was written).
  void Drop(uint64_t row);

  uint64_t held() const { return held_; }
  const RowPreloaderStats& stats() const { return stats_; }
  // RAM per row of capacity (the row, its id and step, two index entries, its free-stack place)
  // and for the horizon's row lists (4 bytes per distinct row per step).
  static uint64_t BytesPerRow(uint32_t row_bytes) {
    return row_bytes + 8 + 8 + SlotIndex::BytesPerSlot() + 4;
  }
  static uint64_t HorizonBytes(uint32_t horizon_steps, uint64_t rows_per_step) {
    return uint64_t{horizon_steps} * rows_per_step * 4;
  }

 private:
  struct Step {
    uint64_t step;
    std::vector<uint32_t> rows;  // sorted, distinct
  };
  Status Extend(uint64_t t);
  Status Pass(IoSession& io, uint32_t region);
  void Forget(size_t position);

  RowFile* file_;
  uint32_t row_bytes_;
  StepRows step_rows_;
  Skip skip_;
  ReadRegion read_region_;
  RowPreloaderOptions options_;
  uint64_t capacity_;
  // Held rows by slot: the row, its id, the step that needs it.
  std::vector<std::byte> rows_;
  std::vector<uint64_t> ids_;
  std::vector<uint64_t> need_;
  std::vector<uint32_t> free_;
  SlotIndex index_;
  uint64_t held_ = 0;
  // The horizon: steps (t, t + horizon] with their rows, oldest first (a ring).
  std::vector<Step> horizon_;
  size_t horizon_first_ = 0, horizon_count_ = 0;
  uint64_t next_step_ = 0;  // the next step to list
  bool source_done_ = false;
  // Rows held per needing step, to forget the ones never taken (ring by step).
  std::vector<std::vector<uint64_t>> expiring_;
  double credit_ = 0;
  uint32_t next_region_ = 0;
  RowPreloaderStats stats_;
  // Scratch.
  std::vector<uint64_t> listed_;
  std::vector<std::pair<uint64_t, uint64_t>> wanted_;  // (row, step)
  std::vector<uint64_t> read_ids_;
  std::vector<std::byte> read_rows_;
};

}  // namespace sluice
