#pragma once
// Where DLRM's table rows live out of core, behind the row prefetcher's RowBacking interface.
// A row never written reads as its initial value without any io.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "prefetch/row_prefetcher.h"
#include "prefetch/row_preloader.h"
#include "storage/kv_table.h"
#include "storage/row_file.h"
#include "storage/write_back_buffer.h"

namespace sluice {

// Rows of dense tables in one row file: table k's row i is file row offsets[k] + i. A bitmap
// remembers which rows were ever written back: the others still hold their initial value (a
// pure function of seed, table and id), so loading them needs no read at all. Most misses of a
// skewed click log are first touches of tail ids, and they cost no io.
class RowFileBacking : public RowBacking {
 public:
  // `offsets` (non-empty) must outlive the backing. all_written: every row may hold a written
  // value (a restored table). staging_rows > 0: written rows wait in a WriteBackBuffer and
  // reach the file in sorted sweeps.
  RowFileBacking(RowFile* file, const std::vector<uint64_t>* offsets, RowInit init,
                 bool all_written, uint64_t staging_rows);
  Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) override;
  Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) override;
  Status Flush(IoSession& io) override { return staged_ ? staged_->Flush(io) : Status::Ok(); }
  Status Advance(IoSession& io, uint64_t t) override {
    return preload_ ? preload_->Advance(io, t) : Status::Ok();
  }
  uint64_t rows_read() const override { return reads_; }
  const WriteBackBuffer* staging() const { return staged_.get(); }

  // Reads rows ahead for one training pass (see RowPreloader): rows the cache holds, staged
  // rows and rows never written are not read ahead. Marks the rows the cache holds from here on.
  // With a write-back buffer, a region pass also sweeps the region's staged rows (one read of
  // its extents serves both) when it holds at least half its share of the buffer; a sparser
  // region is only read (sweeping it would rewrite whole pages for a few rows, and with a large
  // file turns training disk bound).
  void StartPreload(RowPreloader::StepRows step_rows, RowPreloaderOptions options);
  void StopPreload();
  const RowPreloaderStats& preload_stats() const { return preload_stats_; }

 private:
  static bool Bit(const std::vector<uint64_t>& bits, uint64_t row) {
    return bits[row / 64] >> (row % 64) & 1;
  }

  RowFile* file_;
  const std::vector<uint64_t>* offsets_;
  RowInit init_;
  std::vector<uint64_t> written_;
  // Rows the cache holds (read, not yet written back; a row evicted clean stays marked, which
  // only keeps it from being read ahead). Kept once a pass reads ahead.
  std::vector<uint64_t> cached_;
  std::unique_ptr<WriteBackBuffer> staged_;
  std::unique_ptr<RowPreloader> preload_;
  RowPreloaderStats preload_stats_;
  std::vector<uint64_t> ids_;
  std::vector<size_t> where_;
  std::vector<std::byte> buffer_;
  uint64_t reads_ = 0;
};

// Rows in RocksDB under (table, id); a row never written reads as its initial value.
class KvBacking : public RowBacking {
 public:
  KvBacking(KvTable* kv, RowInit init) : kv_(kv), init_(std::move(init)) {}
  Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) override;
  Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) override;
  uint64_t rows_read() const override { return reads_; }

 private:
  KvTable* kv_;
  RowInit init_;
  std::vector<bool> found_;
  uint64_t reads_ = 0;
};

}  // namespace sluice
