// io_bench: the storage layer's throughput, one configuration per run, one JSON line out.
// bench/io_vs_fio.sh runs it alternately with fio and prints the comparison table.
//
//   io_bench rand  --file F --row-bytes 4096 --backend uring --threads 1 --qd 32 --seconds 10
//       random single-row reads over the whole file through RowFile::ReadRows (merging off)
//   io_bench merge --file F --row-bytes 128 --partition-rows 1000000 --density 0.01
//       random row sets inside one partition: merging off / on / on with a gap, and the
//       whole-partition read, each on the same sets

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/units.h"
#include "storage/row_file.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string file;
  uint32_t row_bytes = 4096;
  std::string backend = "uring";
  int threads = 1;
  int qd = 32;
  double seconds = 10;
  uint64_t batch = 8192;
  uint64_t partition_rows = 1'000'000;
  double density = 0.01;
  int repeats = 5;
};

std::unique_ptr<RowFile> OpenTable(const Args& a, uint32_t merge_max, uint32_t gap) {
  auto file = File::Open(a.file, OpenMode::kRead, false);
  SLUICE_CHECK(file.ok(), "%s", file.status().ToString().c_str());
  const uint64_t rows = file->SizeBytes().value() / a.row_bytes;
  auto table = RowFile::Open(a.file, a.row_bytes, rows, false, RowFileOptions{merge_max, gap, true});
  if (!table.ok()) {  // the file may have a tail that is not a whole row: view a prefix
    const uint64_t fitting = AlignDown(rows * a.row_bytes, kDirectAlignBytes) / a.row_bytes;
    SLUICE_CHECK(false, "%s (use a file of whole rows; %llu rows fit)",
                 table.status().ToString().c_str(), static_cast<unsigned long long>(fitting));
  }
  SLUICE_CHECK(table.value()->direct(), "%s does not support O_DIRECT here", a.file.c_str());
  return std::move(table).value();
}

std::unique_ptr<IoSession> MakeSession(const Args& a) {
  IoConfig config;
  auto kind = ParseBackendKind(a.backend);
  SLUICE_CHECK(kind.ok(), "%s", kind.status().ToString().c_str());
  config.backend = *kind;
  config.queue_depth = a.qd;
  auto io = IoSession::Create(config);
  SLUICE_CHECK(io.ok(), "%s", io.status().ToString().c_str());
  return std::move(io).value();
}

int RunRandom(const Args& a) {
  auto table = OpenTable(a, a.row_bytes, 0);  // merge_max = one row: merging off
  std::atomic<uint64_t> total_rows{0};
  std::atomic<bool> stop{false};
  auto worker = [&](int t) {
    auto io = MakeSession(a);
    std::mt19937_64 rng(1234 + t);
    std::vector<uint64_t> ids(a.batch);
    // Aligned, as a cache arena is: 4 KiB rows are read straight into it.
    AlignedBuffer out(a.batch * a.row_bytes, kDirectAlignBytes);
    uint64_t done = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      for (auto& id : ids) id = rng() % table->num_rows();
      Status s = table->ReadRows(*io, ids, out.data());
      SLUICE_CHECK(s.ok(), "%s", s.ToString().c_str());
      done += ids.size();
    }
    total_rows += done;
  };
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < a.threads; ++t) threads.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));  // the run's length
  stop = true;
  for (auto& th : threads) th.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double iops = static_cast<double>(total_rows) / elapsed;
  std::printf("{\"mode\": \"rand\", \"backend\": \"%s\", \"threads\": %d, \"qd\": %d, "
              "\"row_bytes\": %u, \"iops\": %.0f, \"mbps\": %.1f}\n",
              a.backend.c_str(), a.threads, a.qd, a.row_bytes, iops, iops * a.row_bytes / 1e6);
  return 0;
}

// The executor alone on random aligned reads, no RowFile: separates io-loop cost from the
// row layer's (sorting, planning, copying out).
int RunRaw(const Args& a) {
  auto file = File::Open(a.file, OpenMode::kRead, true);
  SLUICE_CHECK(file.ok() && file->direct(), "%s", a.file.c_str());
  const uint64_t blocks = file->SizeBytes().value() / a.row_bytes;
  auto io = MakeSession(a);
  AlignedBuffer buffer(uint64_t{static_cast<uint32_t>(a.qd)} * a.row_bytes, kDirectAlignBytes);
  std::mt19937_64 rng(4321);
  uint64_t done = 0;
  auto prepare = [&](size_t, uint32_t slot) {
    IoRequest& r = io->slot_request(slot);
    r = IoRequest{IoKind::kRead, &file.value(), (rng() % blocks) * a.row_bytes, a.row_bytes,
                  buffer.data() + uint64_t{slot} * a.row_bytes, {}};
    return &r;
  };
  auto complete = [&](size_t, uint32_t, IoRequest&) {
    ++done;
    return IoNext::kDone;
  };
  auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < a.seconds) {
    Status s = io->executor().Stream(a.batch, prepare, complete);
    SLUICE_CHECK(s.ok(), "%s", s.ToString().c_str());
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("{\"mode\": \"raw\", \"backend\": \"%s\", \"qd\": %d, \"iops\": %.0f}\n",
              a.backend.c_str(), a.qd, static_cast<double>(done) / elapsed);
  return 0;
}

struct MergeResult {
  double seconds = 0;
  uint64_t requests = 0;
  uint64_t bytes = 0;
};

int RunMerge(const Args& a) {
  struct Variant {
    const char* name;
    uint32_t merge_max;
    uint32_t gap;
  };
  const Variant variants[] = {{"off", 4096, 0},
                              {"merge_128k", 128 * 1024, 0},
                              {"merge_128k_gap_16k", 128 * 1024, 16 * 1024}};
  const uint64_t set_rows = std::max<uint64_t>(1, static_cast<uint64_t>(a.density * a.partition_rows));
  auto io = MakeSession(a);
  std::vector<std::byte> out(std::max(set_rows, a.partition_rows) * a.row_bytes);
  std::vector<uint64_t> ids(set_rows);
  std::mt19937_64 rng(99);
  for (const Variant& v : variants) {
    auto table = OpenTable(a, v.merge_max, v.gap);
    const uint64_t partitions = table->num_rows() / a.partition_rows;
    MergeResult r;
    for (int rep = 0; rep < a.repeats; ++rep) {
      const uint64_t base = (rng() % partitions) * a.partition_rows;
      for (auto& id : ids) id = base + rng() % a.partition_rows;
      const IoStats before = io->executor().stats();
      auto start = Clock::now();
      Status s = table->ReadRows(*io, ids, out.data());
      r.seconds += std::chrono::duration<double>(Clock::now() - start).count();
      SLUICE_CHECK(s.ok(), "%s", s.ToString().c_str());
      r.requests += io->executor().stats().requests - before.requests;
      r.bytes += io->executor().stats().bytes - before.bytes;
    }
    std::printf("{\"mode\": \"merge\", \"variant\": \"%s\", \"density\": %g, \"row_bytes\": %u, "
                "\"rows_per_set\": %llu, \"rows_per_s\": %.0f, \"requests_per_set\": %.0f, "
                "\"mb_read_per_set\": %.2f}\n",
                v.name, a.density, a.row_bytes, static_cast<unsigned long long>(set_rows),
                static_cast<double>(set_rows) * a.repeats / r.seconds,
                static_cast<double>(r.requests) / a.repeats,
                static_cast<double>(r.bytes) / a.repeats / 1e6);
  }
  // The whole partition, for reference: what "just read it all" costs.
  auto table = OpenTable(a, 1024 * 1024, 0);
  double seconds = 0;
  for (int rep = 0; rep < a.repeats; ++rep) {
    const uint64_t base = (rng() % (table->num_rows() / a.partition_rows)) * a.partition_rows;
    auto start = Clock::now();
    Status s = table->ReadRange(*io, base, a.partition_rows, out.data());
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    SLUICE_CHECK(s.ok(), "%s", s.ToString().c_str());
  }
  std::printf("{\"mode\": \"merge\", \"variant\": \"whole_partition\", \"density\": %g, "
              "\"row_bytes\": %u, \"rows_per_set\": %llu, \"rows_per_s\": %.0f, "
              "\"requests_per_set\": %.0f, \"mb_read_per_set\": %.2f}\n",
              a.density, a.row_bytes, static_cast<unsigned long long>(set_rows),
              static_cast<double>(set_rows) * a.repeats / seconds,
              static_cast<double>(a.partition_rows) * a.row_bytes / (1 << 20),
              static_cast<double>(a.partition_rows) * a.row_bytes / 1e6);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  sluice::Args a;
  CLI::App app{"sluice storage-layer benchmark (see bench/io_vs_fio.sh)"};
  app.require_subcommand(1);
  for (auto* sub : {app.add_subcommand("rand", "random single-row reads, merging off"),
                    app.add_subcommand("raw", "random reads through the executor alone"),
                    app.add_subcommand("merge", "random row sets in a partition: merging gains")}) {
    sub->add_option("--file", a.file, "existing file to read (O_DIRECT)")->required();
    sub->add_option("--row-bytes", a.row_bytes, "row width");
    sub->add_option("--backend", a.backend, "uring or pread");
    sub->add_option("--qd", a.qd, "queue depth per thread");
    sub->add_option("--threads", a.threads, "reader threads, each with its own ring");
    sub->add_option("--seconds", a.seconds, "run length (rand)");
    sub->add_option("--batch", a.batch, "rows per ReadRows call (rand)");
    sub->add_option("--partition-rows", a.partition_rows, "rows per partition (merge)");
    sub->add_option("--density", a.density, "fraction of a partition per set (merge)");
    sub->add_option("--repeats", a.repeats, "sets per variant (merge)");
  }
  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand("rand")) return sluice::RunRandom(a);
  if (app.got_subcommand("raw")) return sluice::RunRaw(a);
  return sluice::RunMerge(a);
}
