#pragma once
// The stores rows come from when the row cache misses them (RowBacking, prefetch/
// row_prefetcher.h). A row never written reads as its initial value without any io.
//
//   RowFileBacking  dense tables in one row file (table k's row i at file row offsets[k] + i),
//                   with a bitmap of rows ever written, an optional write-back buffer and
//                   optional read-ahead (RowPreloader);
//   KvBacking       RocksDB keyed by (table, id): raw 64-bit ids;
//   MemoryBacking   rows in RAM (MemoryRows), behind the same interface;
//   ArrayBacking    a dataset's array read-only (node features, float32 or float16, unpadded
//                   as numpy writes it): row id = key.id (one table), bytes as stored (a
//                   float16 row stays 2 bytes a value; the gather widens it).
//
// Thread safety: one io thread calls a backing (the row prefetcher's); RowFile and KvTable
// themselves are thread-safe.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "prefetch/row_prefetcher.h"
#include "prefetch/row_preloader.h"
#include "storage/dataset.h"
#include "storage/kv_table.h"
#include "storage/row_file.h"
#include "storage/write_back_buffer.h"

namespace sluice {

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

// Writes a row file of dense tables (table k's row i at offsets[k] + i) holding every row's
// initial value, to a temporary name renamed into place when complete. With global rows
// [first_row, end_row) narrower than the file (a rank's rows across processes), only those are
// written: the file has every row's length, the others are holes (never read), and its space is
// not reserved ahead.
Status CreateInitialRowFile(const std::string& path, uint32_t row_bytes,
                            const std::vector<uint64_t>& offsets, const RowInit& init,
                            const IoConfig& io, uint64_t first_row = 0, uint64_t end_row = ~uint64_t{0});

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

class MemoryBacking : public RowBacking {
 public:
  explicit MemoryBacking(MemoryRows* rows) : rows_(rows) {}
  Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) override;
  Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) override;
  uint64_t rows_read() const override { return reads_; }

 private:
  MemoryRows* rows_;
  uint64_t reads_ = 0;
};

class ArrayBacking : public RowBacking {
 public:
  // Opens dataset array `role` (2-D, float32 or float16) for reading. Errors name the role,
  // its file and what is wrong (dtype, shape, size).
  static Result<std::unique_ptr<ArrayBacking>> Open(const Dataset& dataset, const std::string& role,
                                                    const IoConfig& io);
  // Reads rows of `file` (dim values of `dtype` a row) as an array: e.g. a layer's outputs
  // written to a row file for layer-wise inference.
  static std::unique_ptr<ArrayBacking> Wrap(std::unique_ptr<RowFile> file, DType dtype, uint32_t dim) {
    return std::unique_ptr<ArrayBacking>(new ArrayBacking(std::move(file), dtype, dim));
  }
  Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) override;
  Status ReadScatter(IoSession& io, std::span<const RowKey> keys, std::span<std::byte* const> rows,
                     uint32_t row_bytes, uint32_t gap_bytes) override;
  // A dataset is never written: FailedPrecondition.
  Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) override;
  uint64_t rows_read() const override { return reads_; }

  DType dtype() const { return dtype_; }
  uint64_t rows() const { return file_->num_rows(); }
  uint32_t dim() const { return dim_; }
  uint32_t row_bytes() const { return file_->row_bytes(); }
  const RowFile& file() const { return *file_; }

 private:
  ArrayBacking(std::unique_ptr<RowFile> file, DType dtype, uint32_t dim)
      : file_(std::move(file)), dtype_(dtype), dim_(dim) {}
  Status Ids(std::span<const RowKey> keys);  // into ids_

  std::unique_ptr<RowFile> file_;
  DType dtype_;
  uint32_t dim_;
  std::vector<uint64_t> ids_;
  uint64_t reads_ = 0;
};

}  // namespace sluice
