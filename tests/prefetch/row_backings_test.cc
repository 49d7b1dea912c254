// The row backings, each against a plain in-memory model: random batches of writes and reads
// (rows repeated, rows never written reading as their initial value), then every row read
// back. Row file (with and without a write-back buffer), RocksDB, RAM, and a dataset array
// read-only (float32 and float16, unpadded: its last rows end inside a sector).

#include "prefetch/row_backings.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

constexpr uint32_t kRowBytes = 24;
constexpr uint32_t kTables = 3;
constexpr uint64_t kRowsPerTable = 500;

void InitRow(const RowKey& k, std::byte* row) {
  for (uint32_t i = 0; i < kRowBytes; ++i) row[i] = static_cast<std::byte>(k.id * 7 + k.table * 3 + i);
}

using Model = std::map<std::pair<uint32_t, uint64_t>, std::vector<std::byte>>;

std::vector<std::byte> Expected(const Model& m, const RowKey& k) {
  auto it = m.find({k.table, k.id});
  if (it != m.end()) return it->second;
  std::vector<std::byte> row(kRowBytes);
  InitRow(k, row.data());
  return row;
}

// 40 rounds: write a random batch (distinct keys), read a random batch (repeats allowed).
void CheckAgainstModel(RowBacking& backing, IoSession& io, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Model model;
  std::vector<RowKey> keys;
  std::vector<std::byte> rows;
  for (int round = 0; round < 40; ++round) {
    std::map<std::pair<uint32_t, uint64_t>, bool> seen;
    keys.clear();
    while (keys.size() < 30) {
      RowKey k{rng() % kRowsPerTable, static_cast<uint32_t>(rng() % kTables)};
      if (seen.emplace(std::make_pair(k.table, k.id), true).second) keys.push_back(k);
    }
    rows.resize(keys.size() * kRowBytes);
    for (auto& b : rows) b = static_cast<std::byte>(rng());
    ASSERT_TRUE(backing.Write(io, keys, rows.data()).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      model[{keys[i].table, keys[i].id}].assign(rows.begin() + i * kRowBytes,
                                               rows.begin() + (i + 1) * kRowBytes);
    }
    keys.clear();
    for (int i = 0; i < 50; ++i) keys.push_back({rng() % kRowsPerTable, static_cast<uint32_t>(rng() % kTables)});
    rows.assign(keys.size() * kRowBytes, std::byte{0});
    ASSERT_TRUE(backing.Read(io, keys, rows.data()).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(std::memcmp(rows.data() + i * kRowBytes, Expected(model, keys[i]).data(), kRowBytes), 0)
          << "round " << round << " row " << keys[i].id << " of table " << keys[i].table;
    }
  }
  ASSERT_TRUE(backing.Flush(io).ok());
  EXPECT_GT(backing.rows_read(), 0u);
}

TEST(RowBackingsTest, RowFileMatchesTheModel) {
  for (uint64_t staging : {uint64_t{0}, uint64_t{64}}) {
    SCOPED_TRACE("write-back buffer rows " + std::to_string(staging));
    TempDir dir;
    const std::vector<uint64_t> offsets = {0, kRowsPerTable, 2 * kRowsPerTable, 3 * kRowsPerTable};
    auto file = RowFile::Create(dir.File("rows.bin"), kRowBytes, offsets.back(), RowFileOptions{});
    ASSERT_TRUE(file.ok());
    RowFileBacking backing(file->get(), &offsets, InitRow, /*all_written=*/false, staging);
    auto io = testing::Session(BackendKind::kPread);
    CheckAgainstModel(backing, *io, 1);
  }
}

TEST(RowBackingsTest, RocksDbMatchesTheModel) {
  TempDir dir;
  auto kv = KvTable::Open(dir.File("kv"), kRowBytes, KvTableOptions{});
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  KvBacking backing(kv->get(), InitRow);
  auto io = testing::Session(BackendKind::kPread);
  CheckAgainstModel(backing, *io, 2);
}

TEST(RowBackingsTest, RamMatchesTheModel) {
  for (bool dense : {true, false}) {
    std::vector<uint64_t> offsets;
    if (dense) offsets = {0, kRowsPerTable, 2 * kRowsPerTable, 3 * kRowsPerTable};
    MemoryRows rows(kRowBytes, offsets, InitRow);
    MemoryBacking backing(&rows);
    auto io = testing::Session(BackendKind::kPread);
    CheckAgainstModel(backing, *io, 3);
  }
}

// A dataset with a node-feature array of `dtype` (rows x dim values of bytes x).
Result<Dataset> FeatureDataset(const std::string& dir, DType dtype, uint64_t rows, uint32_t dim,
                               std::vector<std::byte>& bytes) {
  Manifest m;
  m.task = TaskKind::kLinkPrediction;
  m.name = "features";
  m.num_nodes = rows;
  m.num_relations = 1;
  m.partition_bounds = {0, rows};
  m.edges["train"] = 1;
  SLUICE_ASSIGN_OR_RETURN(DatasetWriter w, DatasetWriter::Begin(dir, m));
  const std::vector<int64_t> src = {0}, dst = {1}, buckets = {0, 1};
  SLUICE_RETURN_IF_ERROR(w.AddArray<int64_t>("edges.train.src", "edges/src.bin", DType::kInt64, {1}, src));
  SLUICE_RETURN_IF_ERROR(w.AddArray<int64_t>("edges.train.dst", "edges/dst.bin", DType::kInt64, {1}, dst));
  SLUICE_RETURN_IF_ERROR(w.AddArray<int64_t>("edges.train.buckets", "edges/buckets.bin", DType::kInt64,
                                             {2}, buckets));
  const uint32_t width = dtype == DType::kFloat32 ? 4 : 2;
  bytes.resize(rows * dim * width);
  std::mt19937_64 rng(9);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  SLUICE_RETURN_IF_ERROR(w.AddArray("nodes.features", "nodes/features.bin", dtype, {rows, dim}, bytes));
  SLUICE_RETURN_IF_ERROR(w.Commit());
  return Dataset::Open(dir);
}

TEST(RowBackingsTest, ADatasetArrayReadsEveryRowAsStoredIncludingItsUnpaddedEnd) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    TempDir dir;
    std::vector<std::byte> bytes;
    const uint64_t rows = 1001;  // 1001 x 37 values: the file ends inside a 4 KiB page
    const uint32_t dim = 37;
    auto ds = FeatureDataset(dir.File("ds"), dtype, rows, dim, bytes);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    IoConfig ioc;
    ioc.backend = BackendKind::kAuto;
    auto backing = ArrayBacking::Open(*ds, "nodes.features", ioc);
    ASSERT_TRUE(backing.ok()) << backing.status().ToString();
    const uint32_t rb = (*backing)->row_bytes();
    EXPECT_EQ(rb, dim * (dtype == DType::kFloat32 ? 4u : 2u));
    auto io = IoSession::Create(ioc);
    ASSERT_TRUE(io.ok());
    std::vector<RowKey> keys;
    for (uint64_t i = 0; i < rows; i += 3) keys.push_back({rows - 1 - i, 0});  // backwards, the last first
    keys.push_back({rows - 1, 0});
    std::vector<std::byte> out(keys.size() * rb);
    ASSERT_TRUE((*backing)->Read(**io, keys, out.data()).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(std::memcmp(out.data() + i * rb, bytes.data() + keys[i].id * rb, rb), 0) << keys[i].id;
    }
    std::vector<RowKey> bad = {{rows, 0}};
    EXPECT_EQ((*backing)->Read(**io, bad, out.data()).code(), StatusCode::kOutOfRange);
    Status w = (*backing)->Write(**io, keys, out.data());
    EXPECT_EQ(w.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(w.message().find("read-only"), std::string::npos);
  }
}

TEST(RowBackingsTest, ADatasetArrayOfAnotherDtypeIsRefusedNamingIt) {
  TempDir dir;
  Manifest m;
  m.task = TaskKind::kLinkPrediction;
  m.name = "x";
  m.num_nodes = 2;
  m.num_relations = 1;
  m.partition_bounds = {0, 2};
  m.edges["train"] = 1;
  auto w = DatasetWriter::Begin(dir.File("ds"), m);
  ASSERT_TRUE(w.ok());
  const std::vector<int64_t> one = {0}, two = {0, 1};
  ASSERT_TRUE(w->AddArray<int64_t>("edges.train.src", "s.bin", DType::kInt64, {1}, one).ok());
  ASSERT_TRUE(w->AddArray<int64_t>("edges.train.dst", "d.bin", DType::kInt64, {1}, one).ok());
  ASSERT_TRUE(w->AddArray<int64_t>("edges.train.buckets", "b.bin", DType::kInt64, {2}, two).ok());
  ASSERT_TRUE(w->AddArray<int64_t>("nodes.features", "f.bin", DType::kInt64, {2, 1}, two).ok());
  ASSERT_TRUE(w->Commit().ok());
  auto ds = Dataset::Open(dir.File("ds"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  auto backing = ArrayBacking::Open(*ds, "nodes.features", IoConfig{});
  ASSERT_FALSE(backing.ok());
  EXPECT_NE(backing.status().message().find("nodes.features (f.bin) is int64, expected float32 or float16"),
            std::string::npos)
      << backing.status().message();
}

}  // namespace
}  // namespace sluice
