#include "storage/row_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/aligned_buffer.h"
#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::FaultSession;
using testing::Session;
using testing::TempDir;

// The reference: the same table as a plain in-memory array.
struct Model {
  uint32_t w;
  std::vector<std::byte> bytes;
  Model(uint32_t row_bytes, uint64_t rows) : w(row_bytes), bytes(row_bytes * rows) {}
  std::byte* row(uint64_t id) { return bytes.data() + id * w; }
};

void RandomBytes(std::mt19937_64& rng, std::byte* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(rng());
}

struct Params {
  BackendKind backend;
  uint32_t row_bytes;
  uint32_t merge_max;
  uint32_t merge_gap;
};

class RowFileRandomTest : public ::testing::TestWithParam<Params> {};

TEST_P(RowFileRandomTest, MatchesAnInMemoryArrayUnderRandomReadsAndWrites) {
  const Params p = GetParam();
  TempDir dir;
  constexpr uint64_t kRows = 5000;
  RowFileOptions options{p.merge_max, p.merge_gap, true};
  auto table = RowFile::Create(dir.File("t.rows"), p.row_bytes, kRows, options);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  auto io = Session(p.backend);
  Model model(p.row_bytes, kRows);
  std::mt19937_64 rng(p.row_bytes * 31 + p.merge_max);
  RandomBytes(rng, model.bytes.data(), model.bytes.size());
  ASSERT_TRUE((*table)->WriteRange(*io, 0, kRows, model.bytes.data()).ok());

  for (int round = 0; round < 30; ++round) {
    // A write of random rows (repeats allowed: the last one wins), then a read of others.
    std::vector<uint64_t> ids(1 + rng() % 300);
    for (auto& id : ids) id = rng() % 4 == 0 ? rng() % 50 : rng() % kRows;
    std::vector<std::byte> rows(ids.size() * p.row_bytes);
    RandomBytes(rng, rows.data(), rows.size());
    ASSERT_TRUE((*table)->WriteRows(*io, ids, rows.data()).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(model.row(ids[i]), &rows[i * p.row_bytes], p.row_bytes);
    }
    std::vector<uint64_t> reads(1 + rng() % 500);
    for (auto& id : reads) id = rng() % kRows;
    std::vector<std::byte> got(reads.size() * p.row_bytes);
    ASSERT_TRUE((*table)->ReadRows(*io, reads, got.data()).ok());
    for (size_t i = 0; i < reads.size(); ++i) {
      ASSERT_EQ(std::memcmp(&got[i * p.row_bytes], model.row(reads[i]), p.row_bytes), 0)
          << "round " << round << " row " << reads[i];
    }
    // One pass that writes some rows and reads others (distinct ids; the rows right after
    // written ones among the reads, so reads and writes share pages).
    std::vector<char> taken(kRows, 0);
    std::vector<uint64_t> up_w, up_r;
    for (size_t i = rng() % 200; i > 0; --i) {
      const uint64_t id = rng() % kRows;
      if (!taken[id]) up_w.push_back(id), taken[id] = 1;
    }
    for (uint64_t id : up_w) {
      if (id + 1 < kRows && !taken[id + 1]) up_r.push_back(id + 1), taken[id + 1] = 1;
    }
    for (size_t i = rng() % 200; i > 0; --i) {
      const uint64_t id = rng() % kRows;
      if (!taken[id]) up_r.push_back(id), taken[id] = 1;
    }
    const size_t nw = up_w.size(), nr = up_r.size();
    std::vector<std::byte> up_rows(nw * p.row_bytes), up_out(nr * p.row_bytes);
    RandomBytes(rng, up_rows.data(), up_rows.size());
    ASSERT_TRUE((*table)->UpdateRows(*io, up_w, up_rows.data(), up_r, up_out.data(), p.merge_gap).ok());
    for (size_t i = 0; i < nr; ++i) {
      ASSERT_EQ(std::memcmp(&up_out[i * p.row_bytes], model.row(up_r[i]), p.row_bytes), 0)
          << "round " << round << " update read row " << up_r[i];
    }
    for (size_t i = 0; i < nw; ++i) std::memcpy(model.row(up_w[i]), &up_rows[i * p.row_bytes], p.row_bytes);
    // A range write and read at unaligned boundaries.
    const uint64_t first = rng() % kRows;
    const uint64_t count = rng() % std::min<uint64_t>(kRows - first, 700);
    std::vector<std::byte> range(count * p.row_bytes);
    RandomBytes(rng, range.data(), range.size());
    ASSERT_TRUE((*table)->WriteRange(*io, first, count, range.data()).ok());
    if (count > 0) std::memcpy(model.row(first), range.data(), range.size());
  }
  std::vector<std::byte> all(model.bytes.size());
  ASSERT_TRUE((*table)->ReadRange(*io, 0, kRows, all.data()).ok());
  EXPECT_EQ(std::memcmp(all.data(), model.bytes.data(), all.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, RowFileRandomTest,
    ::testing::Values(Params{BackendKind::kAuto, 100, 128 * 1024, 0},
                      Params{BackendKind::kAuto, 12, 4096, 0},       // no merging, tiny rows
                      Params{BackendKind::kAuto, 4096, 4096, 0},     // aligned rows
                      Params{BackendKind::kAuto, 5000, 8192, 0},     // rows wider than a page
                      Params{BackendKind::kPread, 100, 64 * 1024, 16 * 1024},  // gap merging
                      Params{BackendKind::kPread, 37, 4096, 4096}));

TEST(RowFileTest, UpdateRowsRefusesAnIdInBothLists) {
  TempDir dir;
  auto table = RowFile::Create(dir.File("t.rows"), 16, 100, RowFileOptions{});
  ASSERT_TRUE(table.ok());
  auto io = Session(BackendKind::kPread);
  std::vector<std::byte> rows(2 * 16), out(2 * 16);
  const uint64_t w[] = {3, 9}, r[] = {4, 9};
  Status s = (*table)->UpdateRows(*io, w, rows.data(), r, out.data(), 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("row 9 is given twice"), std::string::npos) << s.ToString();
}

TEST(RowFileTest, MergingReadsFewerRequestsThanRows) {
  TempDir dir;
  auto table = RowFile::Create(dir.File("t.rows"), 128, 100000, RowFileOptions{});
  ASSERT_TRUE(table.ok());
  auto io = Session(BackendKind::kAuto);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 100000; i += 3) ids.push_back(i);  // dense: every third row
  std::vector<std::byte> out(ids.size() * 128);
  ASSERT_TRUE((*table)->ReadRows(*io, ids, out.data()).ok());
  // 100000 rows x 128 B = 12.5 MB in 128 KiB reads: about 100 requests, not 33334.
  EXPECT_LT(io->executor().stats().requests, 120u);
}

// Scattered reads land each row in its own buffer, straddling rows included, and a gap merges
// sparse rows into fewer, larger reads (a sweep) with the same bytes delivered.
TEST(RowFileTest, ScatterReadsMatchTheArrayAndAGapMergesSparseRows) {
  TempDir dir;
  constexpr uint64_t kRows = 20000;
  constexpr uint32_t kWidth = 200;  // rows straddle 512-byte sectors
  auto table = RowFile::Create(dir.File("t.rows"), kWidth, kRows, RowFileOptions{});
  ASSERT_TRUE(table.ok());
  auto io = Session(BackendKind::kAuto);
  Model model(kWidth, kRows);
  std::mt19937_64 rng(5);
  RandomBytes(rng, model.bytes.data(), model.bytes.size());
  ASSERT_TRUE((*table)->WriteRange(*io, 0, kRows, model.bytes.data()).ok());
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < kRows; i += 7 + rng() % 40) ids.push_back(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.push_back(ids.front());  // a repeat
  uint64_t requests[2];
  for (uint32_t gap : {0u, 64u * 1024}) {
    std::vector<std::vector<std::byte>> bufs(ids.size(), std::vector<std::byte>(kWidth));
    std::vector<std::byte*> rows;
    for (auto& b : bufs) rows.push_back(b.data());
    auto session = Session(BackendKind::kAuto);
    ASSERT_TRUE((*table)->ReadRowsScatter(*session, ids, rows, gap).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(std::memcmp(bufs[i].data(), model.row(ids[i]), kWidth), 0) << "row " << ids[i];
    }
    requests[gap != 0] = session->executor().stats().requests;
  }
  EXPECT_LT(requests[1] * 4, requests[0]);
  std::vector<std::byte*> too_few(ids.size() - 1, nullptr);
  EXPECT_EQ((*table)->ReadRowsScatter(*io, ids, too_few).code(), StatusCode::kInvalidArgument);
}

TEST(RowFileTest, ConcurrentWriteBacksOfRowsSharingASectorLoseNothing) {
  TempDir dir;
  constexpr uint32_t kWidth = 12;  // 341 rows share each 4 KiB extent
  constexpr uint64_t kRows = 20000;
  constexpr int kThreads = 4;
  auto table = RowFile::Create(dir.File("t.rows"), kWidth, kRows, RowFileOptions{});
  ASSERT_TRUE(table.ok());
  RowFile& t = *table.value();
  // Thread k owns rows with id % kThreads == k, so every extent is written by every thread.
  auto worker = [&](int k) {
    auto io = Session(BackendKind::kAuto, 8);
    std::mt19937_64 rng(k);
    for (int round = 1; round <= 40; ++round) {
      std::vector<uint64_t> ids;
      for (uint64_t id = static_cast<uint64_t>(k); id < kRows; id += kThreads) {
        if (rng() % 3 == 0 || round == 40) ids.push_back(id);
      }
      std::vector<std::byte> rows(ids.size() * kWidth);
      for (size_t i = 0; i < ids.size(); ++i) {
        std::memset(&rows[i * kWidth], round, kWidth);
        std::memcpy(&rows[i * kWidth], &ids[i], sizeof(uint64_t));
      }
      ASSERT_TRUE(t.WriteRows(*io, ids, rows.data()).ok());
    }
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) threads.emplace_back(worker, k);
  for (auto& th : threads) th.join();
  auto io = Session(BackendKind::kPread);
  std::vector<std::byte> all(kRows * kWidth);
  ASSERT_TRUE(t.ReadRange(*io, 0, kRows, all.data()).ok());
  for (uint64_t id = 0; id < kRows; ++id) {
    uint64_t stored;
    std::memcpy(&stored, &all[id * kWidth], sizeof(stored));
    ASSERT_EQ(stored, id) << "row " << id << " lost its last update";
    ASSERT_EQ(all[id * kWidth + 8], std::byte{40}) << "row " << id;
  }
}

TEST(RowFileTest, OpenRefusesAFileOfTheWrongSize) {
  TempDir dir;
  ASSERT_TRUE(RowFile::Create(dir.File("t.rows"), 100, 1000, RowFileOptions{}).ok());
  ASSERT_EQ(::truncate(dir.File("t.rows").c_str(), 50000), 0);
  auto reopened = RowFile::Open(dir.File("t.rows"), 100, 1000, false, RowFileOptions{});
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().message(),
            "row file " + dir.File("t.rows") +
                " is 50000 bytes; 1000 rows of 100 bytes need 102400 (truncated?)");
  EXPECT_EQ(RowFile::Open(dir.File("none"), 100, 1000, false, {}).status().code(),
            StatusCode::kNotFound);
}

TEST(RowFileTest, OutOfRangeIdsAreRefusedBeforeAnyIo) {
  TempDir dir;
  auto table = RowFile::Create(dir.File("t.rows"), 16, 100, RowFileOptions{});
  auto io = Session(BackendKind::kAuto);
  std::vector<uint64_t> ids = {3, 100};
  std::vector<std::byte> rows(2 * 16);
  Status s = (*table)->ReadRows(*io, ids, rows.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("row id 100 is out of range"), std::string::npos);
  EXPECT_EQ((*table)->WriteRows(*io, ids, rows.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*table)->ReadRange(*io, 90, 11, rows.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(io->executor().stats().syscall_ops, 0u);
}

TEST(RowFileTest, EioDuringReadAndEnospcDuringWriteBackAreReported) {
  TempDir dir;
  auto table = RowFile::Create(dir.File("t.rows"), 64, 10000, RowFileOptions{4096, 0, true});
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kRead, 5, 1, FaultType::kError, EIO, 0, 0});
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 10000; i += 97) ids.push_back(i);
  std::vector<std::byte> rows(ids.size() * 64);
  Status s = (*table)->ReadRows(*io, ids, rows.data());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("read " + dir.File("t.rows") + " offset "), std::string::npos);
  fault->AddRule({IoKind::kWrite, 0, 1, FaultType::kError, ENOSPC, 0, 0});
  s = (*table)->WriteRows(*io, ids, rows.data());
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  // The session stays usable after errors.
  EXPECT_TRUE((*table)->ReadRows(*io, ids, rows.data()).ok());
}

TEST(RowFileTest, ShortReadsInsideRowReadsAreFinished) {
  TempDir dir;
  auto table = RowFile::Create(dir.File("t.rows"), 100, 3000, RowFileOptions{});
  auto plain = Session(BackendKind::kPread);
  std::vector<std::byte> init(300000);
  for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<std::byte>(i % 253);
  ASSERT_TRUE((*table)->WriteRange(*plain, 0, 3000, init.data()).ok());
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kRead, 0, 1000, FaultType::kShortTransfer, 0, 4096, 0});
  std::vector<uint64_t> ids = {2999, 0, 1500, 1501, 77};
  std::vector<std::byte> out(ids.size() * 100);
  ASSERT_TRUE((*table)->ReadRows(*io, ids, out.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(std::memcmp(&out[i * 100], &init[ids[i] * 100], 100), 0);
  }
}

// 4 KiB rows bound for an aligned buffer are read in place (no staging copy): the bytes must be
// the same as through the slots, for repeats, for a short transfer finished by the executor,
// and for an unaligned destination (staged as before).
TEST(RowFileTest, AlignedWholeRowReadsLandInPlace) {
  TempDir dir;
  constexpr uint32_t kWidth = 4096;
  constexpr uint64_t kRows = 600;
  auto table = RowFile::Create(dir.File("t.rows"), kWidth, kRows, RowFileOptions{4096, 0, true});
  ASSERT_TRUE(table.ok());
  auto plain = Session(BackendKind::kPread);
  Model model(kWidth, kRows);
  std::mt19937_64 rng(8);
  RandomBytes(rng, model.bytes.data(), model.bytes.size());
  ASSERT_TRUE((*table)->WriteRange(*plain, 0, kRows, model.bytes.data()).ok());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 200; ++i) ids.push_back(rng() % kRows);
  ids.push_back(ids[3]);  // a repeat: one extent, two destinations
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kRead, 0, kRows * kWidth, FaultType::kShortTransfer, 0, 1024, 0});
  for (size_t shift : {size_t{0}, size_t{512}}) {
    AlignedBuffer out(ids.size() * kWidth + shift, kDirectAlignBytes);
    ASSERT_TRUE((*table)->ReadRows(*io, ids, out.data() + shift).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(std::memcmp(out.data() + shift + i * kWidth, model.row(ids[i]), kWidth), 0)
          << "row " << ids[i] << " shift " << shift;
    }
  }
}

}  // namespace
}  // namespace sluice
