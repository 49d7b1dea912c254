#include "train/row_checkpoint.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/json.h"
#include "storage/file.h"
#include "storage/row_file.h"

namespace sluice {

Status WriteRowRecords(MemoryRows& rows, const std::string& path, uint32_t record_bytes,
                       const std::function<void(const RowKey&, const std::byte*, std::byte*)>& encode,
                       uint64_t pad_to) {
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kCreate, false));
  std::vector<std::byte> chunk;
  uint64_t at = 0;
  Status status;
  auto flush = [&]() {
    if (status.ok() && !chunk.empty()) status = PwriteFull(file, chunk.data(), chunk.size(), at);
    at += chunk.size();
    chunk.clear();
  };
  rows.ForEach([&](const RowKey& k, std::byte* row) {
    const size_t pos = chunk.size();
    chunk.resize(pos + record_bytes);
    encode(k, row, chunk.data() + pos);
    if (chunk.size() >= (8u << 20)) flush();
  });
  if (pad_to > at + chunk.size()) chunk.resize(pad_to - at);
  flush();
  SLUICE_RETURN_IF_ERROR(status);
  return file.Sync();
}

Status WriteDenseRows(MemoryRows& rows, const std::string& path, uint64_t total_rows) {
  const uint32_t rb = rows.row_bytes();
  return WriteRowRecords(
      rows, path, rb, [rb](const RowKey&, const std::byte* row, std::byte* out) { std::memcpy(out, row, rb); },
      RowFile::FileBytes(rb, total_rows));
}

Status LoadDenseRows(MemoryRows& rows, const std::string& path, uint64_t total_rows) {
  const uint32_t rb = rows.row_bytes();
  SLUICE_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  const uint64_t want = RowFile::FileBytes(rb, total_rows);
  if (bytes.size() != want) {
    return Corruption(path + ": " + std::to_string(bytes.size()) + " bytes, but the model's tables take " +
                      std::to_string(want));
  }
  uint64_t i = 0;
  rows.ForEach([&](const RowKey&, std::byte* row) { std::memcpy(row, bytes.data() + i++ * rb, rb); });
  return Status::Ok();
}

Status RestoreRowFile(const std::string& dir, const std::string& name, const std::string& tables_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(tables_dir, ec);
  if (!ec) fs::copy_file(dir + "/" + name, tables_dir + "/" + name + ".tmp", fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tables_dir + "/" + name + ".tmp", tables_dir + "/" + name, ec);
  if (ec) return IoError("resume: restore the tables of " + dir + ": " + ec.message());
  return Status::Ok();
}

std::string RowShardName(const std::string& table, int rank, int world) {
  return table + ".shard-" + std::to_string(rank) + "-of-" + std::to_string(world);
}

std::string RowShardManifestName(const std::string& table) { return table + ".shards.json"; }

namespace {
constexpr uint64_t kPieceBytes = 16ull << 20;  // rows move in pieces of at most this
}  // namespace

Result<FileDigest> WriteRowShard(const std::string& path, uint64_t first, uint64_t count, uint32_t row_bytes,
                                 const RowRangeReader& read) {
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kCreate, false));
  const uint64_t per = std::max<uint64_t>(1, kPieceBytes / row_bytes);
  std::vector<std::byte> piece;
  FileDigest d;
  for (uint64_t at = first; at < first + count; at += per) {
    const uint64_t n = std::min(per, first + count - at);
    piece.resize(n * row_bytes);
    SLUICE_RETURN_IF_ERROR(read(at, n, piece.data()));
    SLUICE_RETURN_IF_ERROR(PwriteFull(file, piece.data(), piece.size(), d.bytes));
    d.crc32 = Crc32(d.crc32, piece.data(), piece.size());
    d.bytes += piece.size();
  }
  SLUICE_RETURN_IF_ERROR(file.Sync());
  return d;
}

std::string RowShardManifest(uint64_t rows, uint32_t row_bytes, std::span<const uint64_t> bounds,
                             std::span<const FileDigest> shards) {
  std::string b, f;
  for (const uint64_t x : bounds) b += (b.empty() ? "" : ", ") + std::to_string(x);
  for (size_t r = 0; r < shards.size(); ++r) {
    JsonObject one;
    one.Add("bytes", shards[r].bytes).Add("crc32", static_cast<uint64_t>(shards[r].crc32));
    f += (f.empty() ? "" : ", ") + one.str();
  }
  JsonObject m;
  m.Add("rows", rows).Add("row_bytes", static_cast<uint64_t>(row_bytes)).Add("world_size", static_cast<uint64_t>(shards.size()));
  m.AddRaw("bounds", "[" + b + "]").AddRaw("shards", "[" + f + "]");
  return m.str() + "\n";
}

bool CheckpointRows::Sharded(const std::string& dir, const std::string& table) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/" + RowShardManifestName(table), ec);
}

namespace {

// The manifest's bounds, checked against the model's shape.
Result<std::vector<uint64_t>> ReadShardBounds(const std::string& path, uint32_t row_bytes, uint64_t rows) {
  SLUICE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  std::vector<uint64_t> bounds;
  uint64_t m_rows = 0, m_row_bytes = 0;
  try {
    const YAML::Node m = YAML::Load(text);
    m_rows = m["rows"].as<uint64_t>();
    m_row_bytes = m["row_bytes"].as<uint64_t>();
    bounds = m["bounds"].as<std::vector<uint64_t>>();
  } catch (const YAML::Exception& e) {
    return Corruption(path + ": unreadable shard manifest (" + e.msg + ")");
  }
  if (m_rows != rows || m_row_bytes != row_bytes) {
    return InvalidArgument(path + ": the checkpoint's tables hold " + std::to_string(m_rows) + " rows of " +
                           std::to_string(m_row_bytes) + " bytes, this model's " + std::to_string(rows) +
                           " rows of " + std::to_string(row_bytes));
  }
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != rows ||
      !std::is_sorted(bounds.begin(), bounds.end())) {
    return Corruption(path + ": its bounds do not cut rows 0-" + std::to_string(rows) + " into ranges");
  }
  return bounds;
}

}  // namespace

Result<CheckpointRows> CheckpointRows::Open(const std::string& dir, const std::string& table, uint32_t row_bytes,
                                            uint64_t rows) {
  CheckpointRows r;
  r.where_ = dir + "/" + table;
  r.row_bytes_ = row_bytes, r.rows_ = rows;
  std::vector<std::string> paths;
  if (Sharded(dir, table)) {
    SLUICE_ASSIGN_OR_RETURN(r.bounds_, ReadShardBounds(dir + "/" + RowShardManifestName(table), row_bytes, rows));
    const int world = static_cast<int>(r.bounds_.size()) - 1;
    for (int s = 0; s < world; ++s) paths.push_back(dir + "/" + RowShardName(table, s, world));
  } else {
    r.bounds_ = {0, rows};
    paths.push_back(r.where_);
  }
  for (size_t s = 0; s < paths.size(); ++s) {
    SLUICE_ASSIGN_OR_RETURN(File f, File::Open(paths[s], OpenMode::kRead, false));
    SLUICE_ASSIGN_OR_RETURN(const uint64_t size, f.SizeBytes());
    const uint64_t held = (r.bounds_[s + 1] - r.bounds_[s]) * row_bytes;
    const uint64_t want = paths.size() == 1 ? RowFile::FileBytes(row_bytes, rows) : held;
    if (size != want) {
      return Corruption(paths[s] + ": " + std::to_string(size) + " bytes, but it should hold " +
                        std::to_string(want) + " (rows " + std::to_string(r.bounds_[s]) + "-" +
                        std::to_string(r.bounds_[s + 1]) + " of " + std::to_string(row_bytes) + " bytes)");
    }
    r.files_.push_back(std::move(f));
  }
  return r;
}

Status CheckpointRows::Read(uint64_t first, uint64_t count, std::byte* out) const {
  if (first + count > rows_) {
    return OutOfRange(where_ + ": rows " + std::to_string(first) + "-" + std::to_string(first + count) +
                      " are past its " + std::to_string(rows_));
  }
  while (count > 0) {
    const size_t s = static_cast<size_t>(std::upper_bound(bounds_.begin(), bounds_.end(), first) - bounds_.begin()) - 1;
    const uint64_t n = std::min(count, bounds_[s + 1] - first);
    SLUICE_RETURN_IF_ERROR(PreadFull(files_[s], out, n * row_bytes_, (first - bounds_[s]) * row_bytes_));
    first += n, count -= n, out += n * row_bytes_;
  }
  return Status::Ok();
}

Status CheckpointRows::WriteRowFile(const std::string& path, uint64_t first, uint64_t count) const {
  const std::string temp = path + ".tmp";
  {
    SLUICE_ASSIGN_OR_RETURN(File file, File::Open(temp, OpenMode::kCreate, false));
    SLUICE_RETURN_IF_ERROR(file.Truncate(RowFile::FileBytes(row_bytes_, rows_)));
    const uint64_t per = std::max<uint64_t>(1, kPieceBytes / row_bytes_);
    std::vector<std::byte> piece;
    for (uint64_t at = first; at < first + count; at += per) {
      const uint64_t n = std::min(per, first + count - at);
      piece.resize(n * row_bytes_);
      SLUICE_RETURN_IF_ERROR(Read(at, n, piece.data()));
      SLUICE_RETURN_IF_ERROR(PwriteFull(file, piece.data(), piece.size(), at * row_bytes_));
    }
    SLUICE_RETURN_IF_ERROR(file.Sync());
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) return IoError("rename " + temp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

Status CheckpointRows::ReadEach(uint64_t first, uint64_t count,
                                const std::function<std::byte*(uint64_t row)>& row) const {
  const uint64_t per = std::max<uint64_t>(1, kPieceBytes / row_bytes_);
  std::vector<std::byte> piece;
  for (uint64_t at = first; at < first + count; at += per) {
    const uint64_t n = std::min(per, first + count - at);
    piece.resize(n * row_bytes_);
    SLUICE_RETURN_IF_ERROR(Read(at, n, piece.data()));
    for (uint64_t i = 0; i < n; ++i) std::memcpy(row(at + i), piece.data() + i * row_bytes_, row_bytes_);
  }
  return Status::Ok();
}

Result<std::string> AssembleRowShards(const std::string& dir, const std::string& table, uint32_t row_bytes,
                                      uint64_t rows) {
  SLUICE_ASSIGN_OR_RETURN(const CheckpointRows shards, CheckpointRows::Open(dir, table, row_bytes, rows));
  // Not fs::temp_directory_path: it crashed when linked against PyTorch 2.11's pip libtorch.
  const char* env = std::getenv("TMPDIR");
  const std::string temp = env != nullptr && *env != '\0' ? env : "/tmp";
  const std::string path = temp + "/sluice-" + table + "-" + std::to_string(::getpid()) + ".bin";
  const Status written = shards.WriteRowFile(path, 0, rows);
  if (!written.ok()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::filesystem::remove(path + ".tmp", ec);
    return written.WithContext("assemble the " + std::to_string(shards.shards()) + " shards of " + dir + " in " + temp);
  }
  return path;
}

}  // namespace sluice
