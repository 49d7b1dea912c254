#include "train/row_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <vector>

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

}  // namespace sluice
