#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/check.h"
#include "prefetch/record_source.h"
#include "storage/dataset.h"
#include "tests/fuzz/fuzz_targets.h"

namespace sluice::fuzz {
namespace {

namespace fs = std::filesystem;

// A scratch dataset directory of this process, rewritten for every input.
const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string d = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/sluice-fuzz-records-" +
                    std::to_string(::getpid());
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

void WriteFile(const std::string& path, const void* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  SLUICE_CHECK(f != nullptr, "cannot write %s", path.c_str());
  SLUICE_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size, "short write to %s", path.c_str());
  std::fclose(f);
}

}  // namespace

int Records(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  sluice::Manifest m;
  m.task = TaskKind::kRecommendation;
  m.record.sparse = 1 + data[0] % 8;
  m.record.dense = data[1] % 8;
  const uint64_t batch = 1 + data[2] % 32;
  const uint32_t rb = m.record.bytes();
  const uint64_t file_bytes = size - 4;
  // Flag bit 0: the manifest claims one record more than the file holds (a truncated file).
  const uint64_t records = file_bytes / rb + (data[3] & 1);
  m.samples["train"] = records;
  DatasetFile f;
  f.role = "samples.train";
  f.path = "train.bin";
  f.dtype = DType::kRecord;
  f.shape = {records};
  f.bytes = records * rb;
  m.files.emplace(f.role, f);
  const std::string dir = ScratchDir();
  const std::string manifest = m.ToJson();
  WriteFile(dir + "/manifest.json", manifest.data(), manifest.size());
  WriteFile(dir + "/train.bin", data + 4, file_bytes);

  Result<Dataset> ds = Dataset::Open(dir);
  if (!ds.ok()) {
    SLUICE_CHECK(file_bytes != records * rb, "a consistent dataset was refused: %s",
                 ds.status().message().c_str());
    return 0;
  }
  SLUICE_CHECK(file_bytes == records * rb, "a dataset whose file is %llu bytes, not %llu, opened",
               static_cast<unsigned long long>(file_bytes), static_cast<unsigned long long>(records * rb));
  if (records == 0) return 0;
  const auto map = [](uint32_t table, uint64_t raw) { return RowKey{raw % 1024, table}; };
  Result<RecordSource> source = RecordSource::Open(*ds, "train", batch, 0, 0, map);
  SLUICE_CHECK(source.ok(), "%s", source.status().message().c_str());
  uint64_t seen = 0;
  RowBatch b;
  for (uint64_t step = 0;; ++step) {
    Result<bool> more = source->Fill(step, b);
    SLUICE_CHECK(more.ok(), "%s", more.status().message().c_str());
    if (!*more) break;
    SLUICE_CHECK(b.keys.size() == uint64_t{b.samples} * m.record.sparse, "keys of step %llu",
                 static_cast<unsigned long long>(step));
    Status checked = CheckRecords(m.record, b.records.data(), b.samples, seen, "fuzz: samples.train",
                                  dir + "/train.bin");
    seen += b.samples;
    if (!checked.ok()) break;
  }
  SLUICE_CHECK(seen <= records && seen > 0, "read %llu of %llu records", static_cast<unsigned long long>(seen),
               static_cast<unsigned long long>(records));
  return 0;
}

}  // namespace sluice::fuzz
