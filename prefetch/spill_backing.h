#pragma once
// SpillBacking: read-only rows (a dataset's features) swept in file order for the steps ahead,
// each step's rows written to a spill file as one contiguous pack that its loads read back
// sequentially.
//
// Why: with little skew and a small cache, a step's misses are a few hundred thousand rows
// scattered over the whole file. Read one by one they are bound by the disk's random-read
// rate; merged into extents across gaps (io groups) they are bound by its bandwidth and read
// many times the bytes they need, because the cache has room for two or three steps' rows, not
// more. A sweep reads every row of the file once per K steps whatever K is, so its cost per step
// falls as 1/K, and what the steps need from it goes to disk again (their packs) instead of
// memory: per step, the file / K swept, a pack written and a pack read, all sequential.
//
// How: the file's rows are split into K regions. A pass lists its steps' rows K steps ahead
// (StepRows: e.g. the sampler run again for a later step), minus the rows `skip` keeps out
// (rows pinned in the cache). After step t's loads (Advance), one region, t mod K, is read in
// one sorted, gap-merged pass, and each row is appended to the pack of every listed step
// (t, t + K] that wants it. Step s's pack is complete after K such passes, its rows in file
// order from region s mod K on, wrapping. The first K steps of a pass get the regions those
// passes will not reach from one sweep of the file when the pass starts. Packs live in a ring
// of chunks in the spill file; a step whose pack finds no room gets none.
//
// Across passes: a pass may name the pass that follows it (`next`, e.g. the next epoch's
// steps). Its listing then goes on into the next pass's steps, numbered after its own, and its
// last K sweeps fill their packs as they fill any other step's; a StartPass that `continues`
// keeps those packs and needs no sweep of the whole file at its start. Steps are numbered from
// the first pass of such a chain (regions and pack rotations follow that number), so the
// continued pass's step t is the chain's step offset + t.
//
// Rows the cache holds anyway: with resident_steps d, a step's pack leaves out the rows its d
// previous steps of the same pass list, which a RowCache planning with d protected steps keeps
// resident while the step loads (on the scale graph about a tenth of a step's listed rows).
//
// Exact: the source is never written, so a pack holds the file's bytes; a row a step's loads
// ask for that its pack lacks (skipped, or no pack) is read from the source. Loads must come a
// step at a time (io groups of one step): a load is served from the pack of the step after the
// last Advance.
//
// One thread (the row prefetcher's io thread) calls it; with async_writes a second thread of
// its own writes the packs (a step's pack is written whole before its loads read it).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/aligned_buffer.h"
#include "prefetch/row_prefetcher.h"
#include "prefetch/row_preloader.h"
#include "storage/file.h"
#include "storage/io_backend.h"
#include "storage/row_file.h"

namespace sluice {

struct SpillOptions {
  uint32_t horizon_steps = 32;        // K: each row of the file is swept once per K steps
  uint64_t file_bytes = 0;            // the spill file's ring (reserved at Create)
  uint32_t sweep_gap_bytes = 64 * 1024;  // wanted rows less than this apart: one extent
  uint32_t sweep_rows = 1 << 14;      // distinct rows a sweep reads at a time
  uint32_t chunk_bytes = 128 * 1024;  // a pack's unit of io (a multiple of 4 KiB)
  uint32_t read_bytes = 128 * 1024;   // a pack's loads read aligned runs of chunks this long (or one chunk)
  uint32_t write_batch = 64;          // full chunks written together (at most)
  // Packs written by a thread of their own (`sluice-spill`, its own io queue of write_depth):
  // full chunks go to it a few at a time and come back to the pool when written, so a sweep's
  // reads and copies go on while its packs are written. false: written on the caller's thread
  // when the pool runs out and at each step's completion.
  bool async_writes = true;
  uint32_t write_depth = 16;
  BackendKind write_backend = BackendKind::kAuto;
  // Rows a step's previous `resident_steps` steps of the same pass list are left out of its
  // pack: the cache keeps them resident while it loads (a RowCache's protected steps, the
  // run-ahead), so its loads never ask for them. 0: every listed row is packed. Wrong (larger
  // than the cache's protection) is still exact: such a row is read from the source.
  uint32_t resident_steps = 0;
};

struct SpillStats {
  uint64_t passes = 0;         // region passes
  uint64_t rows_swept = 0;     // distinct rows the sweeps read
  uint64_t rows_packed = 0;    // rows written into packs
  uint64_t bytes_written = 0;  // to the spill file
  uint64_t rows_served = 0;    // loads served from packs
  uint64_t rows_direct = 0;    // loads read from the source (not in their step's pack)
  uint64_t packs_dropped = 0;  // steps that found no room in the ring
  uint64_t rows_resident = 0;  // listed rows left out as the previous steps' (resident_steps)
  uint64_t full_sweeps = 0;    // passes that started with a sweep of the whole file
  uint64_t passes_continued = 0;  // passes whose first packs the pass before filled
  double list_s = 0, sweep_s = 0, serve_s = 0;
};

class SpillBacking : public RowBacking {
 public:
  // The rows step s needs (any order, repeats allowed; false past the pass's end) and the rows
  // never spilled: the preloader's callbacks.
  using StepRows = RowPreloader::StepRows;
  using Skip = RowPreloader::Skip;

  // `source` serves what the packs do not; `file` is its row file (fewer than 2^32 rows),
  // which the sweeps read. Creates `spill_path` with options.file_bytes reserved (a full disk
  // is named here, not halfway through a pass) and removes its name at once: the open file
  // holds the space until the backing is destroyed or the process ends, however it ends.
  static Result<std::unique_ptr<SpillBacking>> Create(RowBacking* source, const RowFile* file,
                                                      const std::string& spill_path,
                                                      const SpillOptions& options);
  ~SpillBacking() override;
  SpillBacking(const SpillBacking&) = delete;
  SpillBacking& operator=(const SpillBacking&) = delete;

  // A pass's steps, numbered from 0 (before its prefetcher starts); EndPass after it joined.
  // Outside a pass every read goes to the source. `next` lists the steps of the pass that will
  // follow this one (nullptr: none or not known). `continues`: this pass is the one the previous
  // pass named as its next; its packs are kept when that pass's loads reached its last step and
  // its listing did not run past this pass's end, else the pass starts afresh.
  void StartPass(StepRows rows, Skip skip, StepRows next = nullptr, bool continues = false);
  void EndPass() { active_ = false; }
  // Whether the current pass kept the packs the pass before it filled.
  bool continued() const { return continued_; }

  Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) override {
    return source_->Read(io, keys, out);
  }
  Status ReadScatter(IoSession& io, std::span<const RowKey> keys, std::span<std::byte* const> rows,
                     uint32_t row_bytes, uint32_t gap_bytes) override;
  Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) override {
    return source_->Write(io, keys, rows);
  }
  Status Advance(IoSession& io, uint64_t t) override;
  uint64_t rows_read() const override { return source_->rows_read() + stats_.rows_served; }

  const SpillStats& stats() const { return stats_; }
  const SpillOptions& options() const { return options_; }
  // RAM it holds for steps of at most rows_per_step rows: the chunk pool, the sweep's buffer,
  // the horizon's row lists and scratch.
  static uint64_t MemoryBytes(const SpillOptions& options, uint64_t rows_per_step, uint32_t row_bytes);
  // A ring with room for the horizon, the step being loaded and one more, of such steps.
  static uint64_t RingBytes(const SpillOptions& options, uint64_t rows_per_step, uint32_t row_bytes);

 private:
  struct Pack {
    uint64_t step = 0;
    std::vector<uint32_t> rows;  // sorted, distinct, skip removed
    size_t rotate = 0;           // index in rows of the pack's first row
    bool has_file = false;       // false: no room; its loads read the source
    bool complete = false;
    uint64_t base = 0, bytes = 0;  // its chunks in the spill file
    uint64_t written = 0;          // rows appended
    std::byte* chunk = nullptr;    // the chunk being filled
  };

  SpillBacking(RowBacking* source, const RowFile* file, File spill, const SpillOptions& options);
  uint64_t RegionBegin(uint64_t region) const;
  void Reset();
  Status EnsureStarted(IoSession& io);
  Status List(uint64_t up_to);
  void LeaveOutResident(std::vector<uint32_t>& rows);
  void Place(Pack& p);
  // Reads region `region`'s rows wanted by the listed steps [first, last] into their packs.
  Status RegionPass(IoSession& io, uint64_t region, uint64_t first, uint64_t last);
  Status Append(IoSession& io, Pack& p, const std::byte* row);
  void QueueChunk(Pack& p);
  // A free chunk of the pool: with async_writes it waits for the writer when none is free.
  Status TakeChunk(IoSession& io, std::byte*& chunk);
  // Every queued chunk written (and its buffer back in the pool) when it returns.
  Status WriteChunks(IoSession& io);
  // async_writes: hands the queued chunks to the writer thread (started on first use).
  void HandOff();
  void WriterLoop();
  Status Complete(IoSession& io, uint64_t step);
  Pack* Find(uint64_t step);
  Status ServeFromPack(IoSession& io, const Pack& p);

  RowBacking* source_;
  const RowFile* file_;
  File spill_;
  SpillOptions options_;
  uint32_t row_bytes_;
  uint32_t chunk_rows_;
  uint64_t rows_per_region_;

  static constexpr uint64_t kUnknown = ~uint64_t{0};
  StepRows step_rows_, next_rows_;
  Skip skip_;
  bool active_ = false, started_ = false, source_done_ = false, continued_ = false;
  bool in_next_ = false;  // the listing is in the next pass's steps
  // Steps below are numbered in the chain of passes: the pass's step t is offset_ + t.
  uint64_t offset_ = 0;
  uint64_t next_offset_ = kUnknown;  // the next pass's first step, once the listing reached it
  uint64_t next_ = 0;    // the step whose loads come next
  uint64_t listed_ = 0;  // steps listed so far
  std::deque<Pack> packs_;  // steps next_ .. listed_ - 1
  uint64_t ring_cursor_ = 0;

  AlignedBuffer pool_;
  std::vector<std::byte*> free_chunks_;  // guarded by write_mutex_ once the writer runs
  std::vector<IoRequest> writes_;  // full chunks queued, not handed to the writer yet
  // The writer thread (async_writes) and what it shares with the io thread.
  std::mutex write_mutex_;
  std::condition_variable write_cv_;
  std::vector<IoRequest> handed_;           // waiting for the writer
  uint64_t handed_count_ = 0, written_count_ = 0;  // chunks handed over, and written since
  uint64_t written_bytes_ = 0;
  Status write_error_;  // the writer's first failure
  bool stop_writer_ = false;
  std::thread writer_;
  AlignedBuffer sweep_buffer_;
  SpillStats stats_;

  // Scratch.
  std::vector<uint64_t> list_scratch_;
  // The last resident_steps listed steps' rows of the pass being listed (skip removed, before
  // their own previous steps' were), oldest first; spare holds a retired list's memory.
  std::deque<std::vector<uint32_t>> recent_;
  std::vector<uint32_t> spare_;
  std::vector<uint64_t> pairs_;  // row << 32 | pack index
  std::vector<uint64_t> sort_scratch_;  // RadixSortBy's, for the listing, pairs_ and by_id_
  std::vector<uint64_t> sweep_ids_;
  std::vector<std::pair<uint64_t, std::byte*>> serve_;  // (pack position, destination)
  std::vector<uint64_t> by_id_;  // row << 32 | its index in the keys
  std::vector<std::pair<uint64_t, size_t>> serve_chunks_;  // (run of read_bytes, its first serve_ entry)
  std::vector<RowKey> direct_keys_;
  std::vector<std::byte*> direct_rows_;
};

}  // namespace sluice
