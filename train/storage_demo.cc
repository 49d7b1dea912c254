#include "train/storage_demo.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "common/units.h"
#include "storage/row_file.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// Row `id` at `version`: bytes that are a pure function of both, so every read can be checked.
void FillRow(uint64_t id, uint32_t version, std::byte* row, uint32_t row_bytes) {
  uint64_t x = id * 0x9E3779B97F4A7C15ull + version;
  for (uint32_t i = 0; i < row_bytes; ++i) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    row[i] = static_cast<std::byte>(x >> 56);
  }
}

Status CheckRows(std::span<const uint64_t> ids, const std::byte* rows, uint32_t row_bytes,
                 const std::vector<uint32_t>& versions, const std::string& path) {
  std::vector<std::byte> expected(row_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    FillRow(ids[i], versions[ids[i]], expected.data(), row_bytes);
    if (std::memcmp(expected.data(), rows + i * row_bytes, row_bytes) != 0) {
      return Corruption(path + ": row " + std::to_string(ids[i]) + " read back wrong");
    }
  }
  return Status::Ok();
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

Status RunStorageDemo(const StorageDemoConfig& config) {
  const StorageDemoSection& d = config.demo;
  const auto row_bytes = static_cast<uint32_t>(d.row_bytes);
  std::error_code ec;
  std::filesystem::create_directories(d.dir, ec);
  if (ec) return IoError("create " + d.dir + ": " + ec.message());
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(config.io));
  SLUICE_ASSIGN_OR_RETURN(auto table, RowFile::Create(d.dir + "/table.rows", row_bytes, d.rows,
                                                      RowFileOptionsFrom(config.io)));
  std::printf("storage demo: %llu rows x %u B = %s in %s (%s, %s, queue depth %u)\n",
              static_cast<unsigned long long>(d.rows), row_bytes,
              FormatBytes(d.rows * row_bytes).c_str(), table->path().c_str(),
              io->executor().backend_name(), table->direct() ? "O_DIRECT" : "buffered",
              io->queue_depth());

  // Fill sequentially in chunks of contiguous rows.
  std::vector<uint32_t> versions(d.rows, 0);
  const uint64_t chunk_rows = std::max<uint64_t>(1, (8 << 20) / row_bytes);
  std::vector<std::byte> chunk(chunk_rows * row_bytes);
  auto start = Clock::now();
  for (uint64_t first = 0; first < d.rows; first += chunk_rows) {
    const uint64_t n = std::min(chunk_rows, d.rows - first);
    for (uint64_t i = 0; i < n; ++i) FillRow(first + i, 0, &chunk[i * row_bytes], row_bytes);
    SLUICE_RETURN_IF_ERROR(table->WriteRange(*io, first, n, chunk.data()));
  }
  SLUICE_RETURN_IF_ERROR(table->Sync());
  const double fill_s = Seconds(start);

  std::mt19937_64 rng(d.seed);
  const uint64_t per_step = std::max<uint64_t>(1, static_cast<uint64_t>(d.density * d.rows));
  std::vector<uint64_t> ids(per_step);
  std::vector<std::byte> rows(per_step * row_bytes);
  double read_s = 0, write_s = 0;
  for (int step = 0; step < d.steps; ++step) {
    for (auto& id : ids) id = rng() % d.rows;
    start = Clock::now();
    SLUICE_RETURN_IF_ERROR(table->ReadRows(*io, ids, rows.data()));
    read_s += Seconds(start);
    SLUICE_RETURN_IF_ERROR(CheckRows(ids, rows.data(), row_bytes, versions, table->path()));
    // Update every other row read (rows sharing sectors with untouched ones: read-modify-write).
    std::vector<uint64_t> updated;
    for (size_t i = 0; i < ids.size(); i += 2) updated.push_back(ids[i]);
    std::sort(updated.begin(), updated.end());
    updated.erase(std::unique(updated.begin(), updated.end()), updated.end());
    std::vector<std::byte> new_rows(updated.size() * row_bytes);
    for (size_t i = 0; i < updated.size(); ++i) {
      FillRow(updated[i], ++versions[updated[i]], &new_rows[i * row_bytes], row_bytes);
    }
    start = Clock::now();
    SLUICE_RETURN_IF_ERROR(table->WriteRows(*io, updated, new_rows.data()));
    write_s += Seconds(start);
  }
  // Read everything back once and check every row.
  start = Clock::now();
  std::vector<uint64_t> all(chunk_rows);
  for (uint64_t first = 0; first < d.rows; first += chunk_rows) {
    const uint64_t n = std::min(chunk_rows, d.rows - first);
    SLUICE_RETURN_IF_ERROR(table->ReadRange(*io, first, n, chunk.data()));
    for (uint64_t i = 0; i < n; ++i) all[i] = first + i;
    SLUICE_RETURN_IF_ERROR(CheckRows(std::span(all.data(), n), chunk.data(), row_bytes, versions,
                                     table->path()));
  }
  const double scan_s = Seconds(start);

  const double total_reads = static_cast<double>(per_step) * d.steps;
  const double table_mb = static_cast<double>(d.rows) * row_bytes / 1e6;
  std::printf("  fill (sequential write)  %8.2f s  %8.1f MB/s\n", fill_s, table_mb / fill_s);
  std::printf("  random reads             %8.2f s  %8.0f rows/s  (%d steps x %llu rows)\n",
              read_s, total_reads / read_s, d.steps, static_cast<unsigned long long>(per_step));
  std::printf("  random updates (RMW)     %8.2f s  %8.0f rows/s\n", write_s,
              total_reads / 2 / write_s);
  std::printf("  full scan + check        %8.2f s  %8.1f MB/s\n", scan_s, table_mb / scan_s);
  const IoStats& s = io->executor().stats();
  std::printf("  io: %llu requests, %s moved, %llu short transfers finished, %llu retries\n",
              static_cast<unsigned long long>(s.requests), FormatBytes(s.bytes).c_str(),
              static_cast<unsigned long long>(s.short_transfers),
              static_cast<unsigned long long>(s.retries));
  std::printf("  every row read back matched what was written\n");
  return Status::Ok();
}

}  // namespace sluice
