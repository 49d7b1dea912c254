#pragma once
// Row-granular pipelines (recommendation models, node features): every step needs a few
// thousand rows of one or more tables.
//
// RowPrefetcher is the planner + io stage (stage 1 of a RunAheadRing; the sampler stage 0
// fills each step's RowBatch: records, keys, and its distinct rows in first-occurrence order).
// It appends each step's distinct rows to the row cache's lookahead window `window` steps
// ahead, plans the step, and runs its io: write-backs of evicted dirty rows first, then loads
// (a row absent from the backing store gets its initial value); then it publishes the step
// with every row's address. Compute reads and updates the rows through those addresses.
//
// Why it is exact: a step's plan only evicts rows last used at least run_ahead + 1 steps
// earlier, and its io is issued only once compute has finished those steps, so a write-back
// carries final rows and a load never lands in a slot a step in flight uses. Within one step,
// write-backs finish before loads start, and steps' io runs in order on one thread, so a row
// written back is on disk before it can be read again. A step whose rows do not fit beside the
// steps in flight (larger than the memory plan's probe saw) waits until compute has finished
// every earlier step and takes their slots (RowCache::PlaceAfterDrain): the pipeline drains once
// and the run goes on, exactly as before; only a step larger than the cache fails.
//
// In memory (no cache, no io) the same stage resolves rows to their place in RAM, so the two
// modes feed compute the same batches in the same order. The ring's capacity bounds the steps
// that exist at once (window + run_ahead + 2). Records busy and wait time.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/row_cache.h"
#include "common/aligned_buffer.h"
#include "common/status.h"
#include "prefetch/run_ahead_ring.h"
#include "storage/io_session.h"

namespace sluice {

// Where rows live when they are not cached: a row file, a RocksDB table, RAM, a dataset array
// (prefetch/row_backings.h).
class RowBacking {
 public:
  virtual ~RowBacking() = default;
  // Reads keys[i] into out + i * row_bytes; a row never written reads as its initial value.
  virtual Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) = 0;
  virtual Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) = 0;
  // Reads keys[i] into rows[i] (row_bytes each; e.g. cache slots). Rows less than gap_bytes
  // apart may be read as one extent, gap included (a backing without extents ignores it). The
  // default reads through Read in bounded pieces and copies.
  virtual Status ReadScatter(IoSession& io, std::span<const RowKey> keys, std::span<std::byte* const> rows,
                             uint32_t row_bytes, uint32_t gap_bytes);
  // Makes every row written so far reach the store (a backing that stages writes applies them).
  virtual Status Flush(IoSession&) { return Status::Ok(); }
  // Called once step t's loads are done, steps in order: a backing may read ahead for later
  // steps (see RowPreloader).
  virtual Status Advance(IoSession&, uint64_t /*t*/) { return Status::Ok(); }
  // Rows Read found stored (the rest got their initial value without a read).
  virtual uint64_t rows_read() const = 0;
};

using RowInit = std::function<void(const RowKey& key, std::byte* row)>;

// Every row in RAM: dense (the tables' rows one after another; table k's row i at
// offsets[k] + i) or hashed (a row is created with its initial value on first use).
class MemoryRows {
 public:
  // Dense when `table_offsets` is non-empty (its last entry is the row count).
  MemoryRows(uint32_t row_bytes, std::vector<uint64_t> table_offsets, RowInit init);
  // One dense table of `rows` rows that lives elsewhere (a file mapped read-only, for the mmap
  // baseline): never written through Row(); bytes() is 0 (the page cache holds them).
  static std::unique_ptr<MemoryRows> External(uint32_t row_bytes, uint64_t rows, const std::byte* base);
  std::byte* Row(const RowKey& key);
  bool dense() const { return !offsets_.empty(); }
  uint64_t rows() const { return dense() ? offsets_.back() : index_.size(); }
  uint64_t bytes() const;
  uint32_t row_bytes() const { return row_bytes_; }
  // Calls f(key, row) for every row (dense: all, in order; hashed: the created ones).
  void ForEach(const std::function<void(const RowKey&, std::byte*)>& f);

 private:
  static constexpr uint64_t kChunkRows = 1 << 16;
  struct KeyHash {
    size_t operator()(const RowKey& k) const {
      return std::hash<uint64_t>()(k.id * 0x9E3779B97F4A7C15ull ^ k.table);
    }
  };
  uint32_t row_bytes_;
  std::vector<uint64_t> offsets_;
  RowInit init_;
  AlignedBuffer dense_;
  std::byte* external_ = nullptr;  // External(): the rows, not owned
  std::unordered_map<RowKey, uint64_t, KeyHash> index_;
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
};

// One step's rows as compute sees them.
struct RowBatch {
  uint64_t step = 0;
  uint32_t samples = 0;
  std::vector<std::byte> records;  // the step's sample records (when the source has any)
  std::vector<RowKey> keys;        // each use's row (DLRM: sample-major, a row per table)
  std::vector<RowKey> unique;      // distinct keys, in first-occurrence order
  std::vector<uint32_t> inverse;   // per key: its index in `unique`
  std::vector<std::byte*> rows;    // per distinct key: its row (valid until Computed)
  // Set by a source whose keys are distinct already (a k-hop sample's nodes): the pipeline
  // moves them to `unique` without deduplicating, leaving `keys` and `inverse` empty (use i is
  // unique row i).
  bool keys_distinct = false;
  // Tables sharded across processes (train/data_parallel.h): every use's row, where `keys`
  // holds only this process's rows (its cache loads no other).
  std::vector<RowKey> all_keys;
  // A step of the next pass, filled only so the oracle's window reaches across the pass's end
  // (the next epoch's first steps): its rows join the window, it is never planned, loaded or
  // computed, and the prefetcher ends the pass before it.
  bool lookahead_only = false;
  size_t uses() const { return keys_distinct ? unique.size() : keys.size(); }
  uint32_t row_of(size_t use) const { return keys_distinct ? static_cast<uint32_t>(use) : inverse[use]; }
  const RowKey& key_of(size_t use) const { return keys_distinct ? unique[use] : keys[use]; }
};

// Finds a batch's distinct rows (open addressing, stamped per call: no clearing, no
// allocation once grown). One thread.
class RowDeduper {
 public:
  void Dedupe(RowBatch& batch);

 private:
  std::vector<uint32_t> slot_;
  std::vector<uint64_t> stamp_;
  uint64_t call_ = 0;
};

struct RowPrefetcherOptions {
  uint32_t run_ahead = 2;  // steps whose io may be issued before compute reaches them
  bool writes = true;      // training (rows become dirty) or evaluation (read only)
  IoConfig io;
  // Steps whose io runs as one: their plans are made back to back and their loads read in one
  // sorted pass, rows less than group_gap_bytes apart in one extent (a sweep rather than a
  // random read per row). run_ahead >= 2 * group_steps - 1 lets a group's io run while the
  // previous group computes.
  uint32_t group_steps = 1;
  uint32_t group_gap_bytes = 0;
};

// Out of core, whether step t + 1 can be ready before compute has finished step t (its group's
// io may start run_ahead steps early and run_ahead covers a group): compute may then hold step t
// while it waits for step t + 1 (RowPipeline::NextReadyEarly).
inline bool NextStepReadyEarly(const RowPrefetcherOptions& o) {
  return o.run_ahead >= std::max<uint32_t>(1, o.group_steps);
}

class RowPrefetcher {
 public:
  // Step t's batch (its slot in the sampler stage).
  using BatchOf = std::function<RowBatch&(uint64_t t)>;

  // Out of core: rows pass through `cache` (its arena of cache->capacity_rows() rows of
  // row_bytes at `arena`) from and to `backing`. Publishes as `stage` of `ring`, after step t
  // was published by stage - 1 (every pointer must outlive the stage).
  RowPrefetcher(RowCache* cache, std::byte* arena, uint32_t row_bytes, RowBacking* backing,
                RowPrefetcherOptions options, RunAheadRing* ring, uint32_t stage, BatchOf batch_of);
  // In memory.
  RowPrefetcher(MemoryRows* memory, RowPrefetcherOptions options, RunAheadRing* ring,
                uint32_t stage, BatchOf batch_of);
  // Aborts the ring if the stage still runs, then joins.
  ~RowPrefetcher();
  RowPrefetcher(const RowPrefetcher&) = delete;
  RowPrefetcher& operator=(const RowPrefetcher&) = delete;

  void Start();
  // Waits for the thread (the ring ended, stopped or aborted); resets the cache's window and
  // protection so it may serve another pass; returns the stage's own error.
  Status Join();

  StageTime plan_time() const { return plan_; }
  StageTime io_time() const { return io_; }
  uint64_t rows_loaded() const { return rows_loaded_; }
  uint64_t rows_written() const { return rows_written_; }
  // Rows loaded for the pass's first kPassHeadSteps steps.
  uint64_t head_loads() const { return head_loads_; }
  // The io requests and bytes of the pass (reads and writes; after Join).
  const IoStats& io_stats() const { return io_stats_; }

 private:
  Status RunSteps();
  // Appends the steps up to `until` to the cache's window; false when the pass ended there.
  RingWait AppendUntil(uint64_t until, uint64_t& appended);
  // Plans step t (its rows' slots into the batch; its io joins the group's).
  Status PlanStep(RowBatch& batch);
  void JoinGroup(const RowStepPlan& plan, uint64_t step);
  void SetRows(RowBatch& b, const RowStepPlan& plan) const;
  // Runs the group's io (the steps planned, up to `end`) once the rows it evicts are final.
  Status RunGroupIo(uint64_t end, bool& stopped);
  // Step `step` is half placed (the cache was full): runs the group's io, publishes steps
  // [first, step), waits for compute to finish them, and places the rest of the step.
  Status DrainFor(uint64_t first, uint64_t step, bool& stopped);
  Status PublishSteps(uint64_t first, uint64_t end);
  Status WriteBacks(const RowStepPlan& plan);
  Status Loads(const RowStepPlan& plan);

  RowCache* cache_ = nullptr;
  std::byte* arena_ = nullptr;
  uint32_t row_bytes_ = 0;
  RowBacking* backing_ = nullptr;
  MemoryRows* memory_ = nullptr;
  RowPrefetcherOptions options_;
  RunAheadRing* ring_;
  uint32_t stage_;
  BatchOf batch_of_;
  uint32_t window_ = 0;
  std::unique_ptr<IoSession> io_session_;
  RowStepPlan plan_scratch_;
  RowStepPlan group_;  // the io of the steps planned and not yet issued
  std::vector<std::byte*> load_rows_;
  std::vector<std::byte> staging_;
  std::thread thread_;
  Status status_;  // the thread's result, read after Join
  StageTime plan_, io_;
  uint64_t rows_loaded_ = 0, rows_written_ = 0;
  uint64_t planned_ = 0, head_loads_ = 0;
  IoStats io_stats_;
};

// Writes every dirty row of the cache back (the pipeline must be stopped), marks them clean and
// flushes the backing.
Status FlushRowCache(RowCache& cache, const std::byte* arena, uint32_t row_bytes,
                     RowBacking& backing, IoSession& io);

}  // namespace sluice
