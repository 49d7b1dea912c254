#pragma once
// RowPrefetcher: the pipeline's read -> dedupe -> plan -> io stages for row-granular training
// (recommendation models: every step needs a few thousand rows of many tables).
//
// One thread reads step after step from a source (the sample file, read sequentially ahead),
// finds each step's distinct rows in first-occurrence order, appends them to the row cache's
// lookahead window, plans each step and runs its io: write-backs of evicted dirty rows first,
// then loads (a row absent from the backing store gets its initial value). Compute calls
// WaitReady(t), reads and updates the step's rows through the pointers it gets, and calls
// Computed(t).
//
// Why it is exact: a step's plan only evicts rows last used at least run_ahead + 1 steps
// earlier, and its io is issued only once compute has finished those steps, so a write-back
// carries final rows and a load never lands in a slot a step in flight uses. Within one step,
// write-backs finish before loads start, and steps' io runs in order on one thread, so a row
// written back is on disk before it can be read again.
//
// In memory (no cache, no io) the same thread resolves rows to their place in RAM, so the two
// modes feed compute the same batches in the same order.
//
// Bounded: at most window + run_ahead + 2 steps exist at once (a ring). Every stage records busy
// and wait time; an error stops the pipeline and WaitReady returns it.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/row_cache.h"
#include "common/aligned_buffer.h"
#include "common/status.h"
#include "prefetch/block_prefetcher.h"
#include "storage/io_session.h"

namespace sluice {

// Where rows live when they are not cached: a row file, a RocksDB table.
class RowBacking {
 public:
  virtual ~RowBacking() = default;
  // Reads keys[i] into out + i * row_bytes; a row never written reads as its initial value.
  virtual Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) = 0;
  virtual Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) = 0;
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
  std::byte* Row(const RowKey& key);
  bool dense() const { return !offsets_.empty(); }
  uint64_t rows() const { return dense() ? offsets_.back() : index_.size(); }
  uint64_t bytes() const;
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
  std::unordered_map<RowKey, uint64_t, KeyHash> index_;
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
};

// One step as compute sees it.
struct RowBatch {
  uint64_t step = 0;
  uint32_t samples = 0;
  std::vector<std::byte> records;  // source: the step's sample records
  std::vector<RowKey> keys;        // source: each sample's row per table, sample-major
  std::vector<RowKey> unique;      // distinct keys, in first-occurrence order
  std::vector<uint32_t> inverse;   // per key: its index in `unique`
  std::vector<std::byte*> rows;    // per distinct key: its row (valid until Computed)
};

struct RowPrefetcherOptions {
  uint32_t run_ahead = 2;  // steps whose io may be issued before compute reaches them
  bool writes = true;      // training (rows become dirty) or evaluation (read only)
  IoConfig io;
};

class RowPrefetcher {
 public:
  // Fills batch.records, batch.samples and batch.keys for step t; false when no steps remain.
  using Source = std::function<Result<bool>(uint64_t t, RowBatch& batch)>;

  // Out of core: rows pass through `cache` (its arena of cache->capacity_rows() rows of
  // row_bytes at `arena`) from and to `backing`.
  RowPrefetcher(RowCache* cache, std::byte* arena, uint32_t row_bytes, RowBacking* backing,
                RowPrefetcherOptions options, Source source);
  // In memory.
  RowPrefetcher(MemoryRows* memory, RowPrefetcherOptions options, Source source);
  ~RowPrefetcher();
  RowPrefetcher(const RowPrefetcher&) = delete;
  RowPrefetcher& operator=(const RowPrefetcher&) = delete;

  void Start();
  // Blocks until step t's rows are in place; nullptr with `status` set when the source ended
  // before t or the pipeline failed.
  RowBatch* WaitReady(uint64_t t, Status& status);
  void Computed(uint64_t t);
  // Stops after the step being planned (if any; its io completes, so the cache stays
  // consistent); the cache's window and protection are reset, so the cache may serve another
  // pass. Call only once compute has stopped for good. Returns the pipeline's error, if any.
  Status Stop();

  StageTime read_time() const { return read_; }    // source + dedupe
  StageTime plan_time() const { return plan_; }
  StageTime io_time() const { return io_; }
  double compute_wait_s() const { return compute_wait_s_; }
  uint64_t rows_loaded() const { return rows_loaded_; }
  uint64_t rows_written() const { return rows_written_; }

 private:
  void Run();
  Status RunSteps();
  Status Fill(uint64_t t, bool& more);
  Status RunIo(uint64_t t, RowBatch& batch);

  RowCache* cache_ = nullptr;
  std::byte* arena_ = nullptr;
  uint32_t row_bytes_ = 0;
  RowBacking* backing_ = nullptr;
  MemoryRows* memory_ = nullptr;
  RowPrefetcherOptions options_;
  Source source_;
  uint32_t window_ = 0;
  std::vector<RowBatch> ring_;
  std::unique_ptr<IoSession> io_session_;
  RowStepPlan plan_scratch_;
  std::vector<std::byte> staging_;
  // Dedupe scratch: open addressing over key indices, stamped per step.
  std::vector<uint32_t> dedupe_slot_;
  std::vector<uint64_t> dedupe_stamp_;
  uint64_t stamp_ = 0;

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t ready_ = 0;     // steps [0, ready_) are in place
  uint64_t computed_ = 0;  // steps [0, computed_) have computed
  uint64_t total_steps_ = ~uint64_t{0};
  bool stop_ = false;
  bool finished_ = false;
  Status error_;
  StageTime read_, plan_, io_;
  double compute_wait_s_ = 0;
  uint64_t rows_loaded_ = 0, rows_written_ = 0;
};

// Writes every dirty row of the cache back (the pipeline must be stopped), marks them clean and
// flushes the backing.
Status FlushRowCache(RowCache& cache, const std::byte* arena, uint32_t row_bytes,
                     RowBacking& backing, IoSession& io);

}  // namespace sluice
