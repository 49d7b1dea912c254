#include "storage/kv_table.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <type_traits>

#include "storage/fault_injection.h"
#include "storage/file.h"

namespace sluice {
namespace {

constexpr const char* kWidthKey = "\xff" "sluice.row_bytes";

// SLUICE_FAULT on RocksDB's writes (its log, tables and manifest): the fault-matrix tests.
class FaultWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultWritableFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::string path, ProcessFaults* faults)
      : FSWritableFileOwnerWrapper(std::move(file)), path_(std::move(path)), faults_(faults) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    return Faulted(data, [&](const rocksdb::Slice& part) { return target()->Append(part, options, dbg); });
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info, rocksdb::IODebugContext* dbg) override {
    return Faulted(data, [&](const rocksdb::Slice& part) { return target()->Append(part, options, info, dbg); });
  }

 private:
  template <class AppendFn>
  rocksdb::IOStatus Faulted(const rocksdb::Slice& data, AppendFn append) {
    const FaultAction a = faults_->Next(IoKind::kWrite, path_);
    if (a.kind == FaultKind::kError) {
      const std::string what = "append to " + path_ + " (injected)";
      return a.error == ENOSPC ? rocksdb::IOStatus::NoSpace(what) : rocksdb::IOStatus::IOError(what);
    }
    SleepForFault(a);
    if (a.kind == FaultKind::kShort && data.size() > 1) {  // two writes, as a short one is finished
      const size_t half = data.size() / 2;
      rocksdb::IOStatus s = append(rocksdb::Slice(data.data(), half));
      return s.ok() ? append(rocksdb::Slice(data.data() + half, data.size() - half)) : s;
    }
    return append(data);
  }

  std::string path_;
  ProcessFaults* faults_;
};

class FaultFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base, ProcessFaults* faults)
      : FileSystemWrapper(base), faults_(faults) {}
  const char* Name() const override { return "SluiceFaultFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(fname, options, result, dbg);
    if (s.ok()) *result = std::make_unique<FaultWritableFile>(std::move(*result), fname, faults_);
    return s;
  }

 private:
  ProcessFaults* faults_;
};

// The Env every KvTable opens with under SLUICE_FAULT (lives as long as the process).
rocksdb::Env* FaultEnv(ProcessFaults* faults) {
  static rocksdb::Env* const env =
      rocksdb::NewCompositeEnv(std::make_shared<FaultFileSystem>(rocksdb::FileSystem::Default(), faults))
          .release();
  return env;
}

// Big-endian keys keep RocksDB's byte order equal to numeric order, so sorted batches hit
// neighbouring blocks.
void EncodeKey(uint64_t key, char out[8]) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(key & 0xff);
    key >>= 8;
  }
}

// (table, id): the table's 4 bytes, then the id's 8, big-endian.
void EncodeKey(const TableKey& key, char out[12]) {
  uint32_t t = key.table;
  for (int i = 3; i >= 0; --i) {
    out[i] = static_cast<char>(t & 0xff);
    t >>= 8;
  }
  EncodeKey(key.id, out + 4);
}

template <typename K>
constexpr size_t KeyBytes() {
  return std::is_same_v<K, TableKey> ? 12 : 8;
}
std::string KeyName(uint64_t key) { return std::to_string(key); }
std::string KeyName(const TableKey& key) {
  return std::to_string(key.id) + " of table " + std::to_string(key.table);
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsIOError()) return IoError(what + ": " + s.ToString());
  if (s.IsCorruption()) return Corruption(what + ": " + s.ToString());
  if (s.IsNotFound()) return NotFound(what + ": " + s.ToString());
  return IoError(what + ": " + s.ToString());
}

}  // namespace

KvTable::KvTable(std::string path, uint32_t row_bytes, rocksdb::DB* db,
                 std::shared_ptr<rocksdb::Cache> cache, bool wal)
    : path_(std::move(path)), row_bytes_(row_bytes), db_(db), cache_(std::move(cache)), wal_(wal) {}

KvTable::~KvTable() { delete db_; }

uint64_t KvTable::BudgetBytes(const KvTableOptions& options) {
  return options.block_cache_bytes + 2 * options.memtable_bytes;
}

Result<std::unique_ptr<KvTable>> KvTable::Open(const std::string& path, uint32_t row_bytes,
                                               const KvTableOptions& options) {
  if (row_bytes == 0) return InvalidArgument("kv table " + path + ": row width must be > 0");
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.compression = rocksdb::kNoCompression;
  db_options.write_buffer_size = options.memtable_bytes;
  db_options.max_write_buffer_number = 2;
  db_options.max_background_jobs = 1;  // a compaction thread, not a pool, on 2 cores
  // A disk that refuses RocksDB's OPTIONS file refuses the table too (RocksDB would only log it).
  db_options.fail_if_options_file_error = true;
  if (ProcessFaults* faults = ProcessFaults::Get()) db_options.env = FaultEnv(faults);
  auto cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.cache_index_and_filter_blocks = true;  // so they count against the cache's bound
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  if (options.direct_reads && !options.read_only) {
    // Create the directory first so the probe can look at its filesystem.
    rocksdb::Env::Default()->CreateDirIfMissing(path);
    auto direct = ProbeDirectIo(path);
    db_options.use_direct_reads = direct.ok() && direct.value();
  }
  rocksdb::DB* db = nullptr;
  if (options.read_only) {
    db_options.create_if_missing = false;
    SLUICE_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(db_options, path, &db),
                                     "open kv table " + path + " to read"));
  } else {
    SLUICE_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(db_options, path, &db), "open kv table " + path));
  }
  std::unique_ptr<KvTable> kv(new KvTable(path, row_bytes, db, cache, options.wal));

  std::string stored;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), kWidthKey, &stored);
  if (s.IsNotFound() && options.read_only) {
    return Corruption("kv table " + path + " has no row-width header (not a sluice table?)");
  }
  if (s.IsNotFound()) {
    rocksdb::WriteOptions w;
    SLUICE_RETURN_IF_ERROR(FromRocks(db->Put(w, kWidthKey, std::to_string(row_bytes)),
                                     "write kv table header " + path));
  } else {
    SLUICE_RETURN_IF_ERROR(FromRocks(s, "read kv table header " + path));
    if (stored != std::to_string(row_bytes)) {
      return InvalidArgument("kv table " + path + " holds rows of " + stored +
                             " bytes, not the " + std::to_string(row_bytes) + " asked for");
    }
  }
  return kv;
}

template <typename K>
Status KvTable::MultiGetImpl(std::span<const K> keys, std::byte* out,
                             std::vector<bool>& found) const {
  const size_t n = keys.size();
  found.assign(n, false);
  if (n == 0) return Status::Ok();
  // Per-thread scratch: the table is shared between threads, and a batch should not allocate.
  thread_local std::vector<char> key_bytes;
  thread_local std::vector<rocksdb::Slice> slices;
  thread_local std::vector<rocksdb::PinnableSlice> values;
  thread_local std::vector<rocksdb::Status> statuses;
  key_bytes.resize(n * KeyBytes<K>());
  slices.resize(n);
  values.resize(n);
  statuses.resize(n);
  for (size_t i = 0; i < n; ++i) {
    EncodeKey(keys[i], &key_bytes[i * KeyBytes<K>()]);
    slices[i] = rocksdb::Slice(&key_bytes[i * KeyBytes<K>()], KeyBytes<K>());
  }
  db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), n, slices.data(),
                values.data(), statuses.data());
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    SLUICE_RETURN_IF_ERROR(
        FromRocks(statuses[i], "get key " + KeyName(keys[i]) + " from " + path_));
    if (values[i].size() != row_bytes_) {
      return Corruption("kv table " + path_ + ": key " + KeyName(keys[i]) + " holds " +
                        std::to_string(values[i].size()) + " bytes, expected " +
                        std::to_string(row_bytes_));
    }
    std::memcpy(out + i * row_bytes_, values[i].data(), row_bytes_);
    found[i] = true;
  }
  for (size_t i = 0; i < n; ++i) values[i].Reset();  // release pinned blocks now
  return Status::Ok();
}

template <typename K>
Status KvTable::WriteImpl(std::span<const K> keys, const std::byte* rows) {
  rocksdb::WriteBatch batch;
  char key[12];
  for (size_t i = 0; i < keys.size(); ++i) {
    EncodeKey(keys[i], key);
    batch.Put(rocksdb::Slice(key, KeyBytes<K>()),
              rocksdb::Slice(reinterpret_cast<const char*>(rows + i * row_bytes_), row_bytes_));
  }
  rocksdb::WriteOptions options;
  options.disableWAL = !wal_;
  return FromRocks(db_->Write(options, &batch), "write " + std::to_string(keys.size()) +
                                                    " rows to kv table " + path_);
}

Status KvTable::MultiGet(std::span<const uint64_t> keys, std::byte* out,
                         std::vector<bool>& found) const {
  return MultiGetImpl(keys, out, found);
}
Status KvTable::MultiGet(std::span<const TableKey> keys, std::byte* out,
                         std::vector<bool>& found) const {
  return MultiGetImpl(keys, out, found);
}
Status KvTable::Write(std::span<const uint64_t> keys, const std::byte* rows) {
  return WriteImpl(keys, rows);
}
Status KvTable::Write(std::span<const TableKey> keys, const std::byte* rows) {
  return WriteImpl(keys, rows);
}

Status KvTable::Checkpoint(const std::string& dir) {
  rocksdb::Checkpoint* raw = nullptr;
  SLUICE_RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_, &raw), "checkpoint " + path_));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  return FromRocks(checkpoint->CreateCheckpoint(dir), "checkpoint kv table " + path_ + " into " + dir);
}

Status KvTable::Flush() {
  return FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush kv table " + path_);
}

uint64_t KvTable::MemoryBytes() const {
  uint64_t memtables = 0, readers = 0;
  db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &memtables);
  db_->GetIntProperty("rocksdb.estimate-table-readers-mem", &readers);
  return cache_->GetUsage() + memtables + readers;
}

}  // namespace sluice
