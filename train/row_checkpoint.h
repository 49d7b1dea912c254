#pragma once
// Learned dense row tables in checkpoints, for every task that trains rows (DLRM's tables,
// node classification's learnable node embeddings): rows held in RAM written in the row file's
// layout and read back, and a checkpoint's row file restored into the run's tables directory.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "prefetch/row_prefetcher.h"
#include "storage/file.h"

namespace sluice {

// Streams a record of `record_bytes` per row of `rows` (ForEach's order; `encode` writes it
// from the row) to `path` in chunks (a copy of the whole table would double the resident set),
// zero-pads the file to `pad_to` bytes (0: no padding) and syncs it.
Status WriteRowRecords(MemoryRows& rows, const std::string& path, uint32_t record_bytes,
                       const std::function<void(const RowKey&, const std::byte*, std::byte*)>& encode,
                       uint64_t pad_to);
// Writes dense `rows` (total_rows of them) to `path` in the row file's layout (streamed in
// chunks, padded as RowFile::FileBytes says) and syncs it.
Status WriteDenseRows(MemoryRows& rows, const std::string& path, uint64_t total_rows);
// Reads `path` (written by WriteDenseRows or a row file of the same shape) into dense `rows`;
// a file of another size is Corruption naming both sizes.
Status LoadDenseRows(MemoryRows& rows, const std::string& path, uint64_t total_rows);
// Copies `dir`/`name` to `tables_dir`/`name` (through a temporary name, renamed when complete).
Status RestoreRowFile(const std::string& dir, const std::string& name, const std::string& tables_dir);

// A dense table written by the ranks of a run in two phases (docs/distributed.md): rank r of N
// writes the rows it owns, [bounds[r], bounds[r + 1]) of the table's T rows, to its shard file
// "<table>.shard-r-of-N" (the rows end to end, nothing else) and fsyncs it; after every rank has
// reported its shard's size and CRC-32, rank 0 writes the manifest "<table>.shards.json" (T, the
// row bytes, the world size, the bounds, each shard's file, bytes and CRC-32) and the checkpoint's
// state.json, which records every file: a checkpoint missing a rank's shard is never complete.
std::string RowShardName(const std::string& table, int rank, int world);
std::string RowShardManifestName(const std::string& table);
// Rows [first, first + count) to `path` as a shard file (`read` fills `n` rows from global row
// `at`, in pieces of at most 16 MiB), fsynced; the file's size and CRC-32.
using RowRangeReader = std::function<Status(uint64_t at, uint64_t n, std::byte* out)>;
Result<FileDigest> WriteRowShard(const std::string& path, uint64_t first, uint64_t count, uint32_t row_bytes,
                                 const RowRangeReader& read);
// The manifest's text: `bounds` holds world + 1 row numbers (0 ... T), `shards` each rank's digest.
std::string RowShardManifest(uint64_t rows, uint32_t row_bytes, std::span<const uint64_t> bounds,
                             std::span<const FileDigest> shards);

// A checkpoint's dense table for reading: whole (`dir`/`table`, the row file's layout) or in
// the shards of the ranks that wrote it (the manifest present), whatever the world size now.
class CheckpointRows {
 public:
  // A manifest or file of another shape than `rows` rows of `row_bytes` is one line saying so.
  static Result<CheckpointRows> Open(const std::string& dir, const std::string& table, uint32_t row_bytes,
                                     uint64_t rows);
  // Whether `dir` holds `table` in shards (its manifest).
  static bool Sharded(const std::string& dir, const std::string& table);
  bool sharded() const { return files_.size() > 1 || bounds_.size() > 2; }
  int shards() const { return static_cast<int>(files_.size()); }
  Status Read(uint64_t first, uint64_t count, std::byte* out) const;
  // Rows [first, first + count) each copied to `row(r)` (rows held in RAM), read in pieces.
  Status ReadEach(uint64_t first, uint64_t count, const std::function<std::byte*(uint64_t row)>& row) const;
  // A row file of every row at `path` (through a temporary name), rows [first, first + count)
  // from the checkpoint and the others zero (a rank's rows only: the others are never read there).
  Status WriteRowFile(const std::string& path, uint64_t first, uint64_t count) const;

 private:
  std::string where_;
  uint32_t row_bytes_ = 0;
  uint64_t rows_ = 0;
  std::vector<uint64_t> bounds_;  // shard s holds rows [bounds_[s], bounds_[s + 1])
  std::vector<File> files_;
};

// A single process reading a checkpoint whose `table` the ranks of a run wrote in shards: the
// shards assembled into one row file under $TMPDIR (or /tmp), whose path is returned; the caller
// opens it and removes the name. A failure removes what it wrote and says where.
Result<std::string> AssembleRowShards(const std::string& dir, const std::string& table, uint32_t row_bytes,
                                      uint64_t rows);

}  // namespace sluice
