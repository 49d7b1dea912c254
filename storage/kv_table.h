#pragma once
// KvTable: uint64 key -> fixed-width row in RocksDB, for tables whose ids are sparse or
// unbounded (raw 64-bit categorical ids). Batched MultiGet and WriteBatch; options chosen for
// this use: no compression, bloom filters, direct reads where the filesystem allows them, and a
// block cache and memtables of fixed size, counted in the memory budget.
//
// Thread safety: all methods may be called concurrently (RocksDB is thread-safe).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class DB;
class Cache;
}  // namespace rocksdb

namespace sluice {

// A row of one of several tables sharing a KvTable: stored under the 12-byte key (table, id),
// big-endian, so one RocksDB instance (one block cache, one set of memtables) holds them all.
struct TableKey {
  uint64_t id = 0;
  uint32_t table = 0;
  bool operator==(const TableKey&) const = default;
};

struct KvTableOptions {
  uint64_t block_cache_bytes = 64ull << 20;
  uint64_t memtable_bytes = 32ull << 20;  // per memtable; up to two exist at once
  bool direct_reads = true;               // used only where O_DIRECT works
  bool wal = false;  // tables are made durable by Flush() at checkpoints, not per write
  // Reads only: nothing in the directory is created, changed or removed (a checkpoint's table
  // stays as its checksums recorded it). Writes fail.
  bool read_only = false;
};

class KvTable {
 public:
  ~KvTable();
  KvTable(const KvTable&) = delete;
  KvTable& operator=(const KvTable&) = delete;

  // Opens or creates the table in directory `path`. A table created with another row width is
  // refused (the width is stored in the table).
  static Result<std::unique_ptr<KvTable>> Open(const std::string& path, uint32_t row_bytes,
                                               const KvTableOptions& options);

  // The most memory the table's caches and memtables may hold: what the budget must reserve.
  static uint64_t BudgetBytes(const KvTableOptions& options);

  // Looks up keys[i] into out + i * row_bytes; found[i] says whether it existed (absent rows
  // are left untouched in `out`).
  Status MultiGet(std::span<const uint64_t> keys, std::byte* out, std::vector<bool>& found) const;
  // Puts rows + i * row_bytes under keys[i], atomically as one batch.
  Status Write(std::span<const uint64_t> keys, const std::byte* rows);
  // The same for rows keyed by (table, id).
  Status MultiGet(std::span<const TableKey> keys, std::byte* out, std::vector<bool>& found) const;
  Status Write(std::span<const TableKey> keys, const std::byte* rows);
  // Makes every write so far durable (flushes memtables to table files).
  Status Flush();
  // A consistent copy of the table in directory `dir` (which must not exist), made of hard
  // links to the immutable table files where the filesystem allows; opens with Open.
  Status Checkpoint(const std::string& dir);
  // Memory the table holds now: block cache, memtables, table readers.
  uint64_t MemoryBytes() const;

  uint32_t row_bytes() const { return row_bytes_; }
  const std::string& path() const { return path_; }

 private:
  template <typename K>
  Status MultiGetImpl(std::span<const K> keys, std::byte* out, std::vector<bool>& found) const;
  template <typename K>
  Status WriteImpl(std::span<const K> keys, const std::byte* rows);

  KvTable(std::string path, uint32_t row_bytes, rocksdb::DB* db,
          std::shared_ptr<rocksdb::Cache> cache, bool wal);

  std::string path_;
  uint32_t row_bytes_;
  rocksdb::DB* db_;
  // shared_ptr because RocksDB's table options take the cache as a shared_ptr.
  std::shared_ptr<rocksdb::Cache> cache_;
  bool wal_;
};

}  // namespace sluice
