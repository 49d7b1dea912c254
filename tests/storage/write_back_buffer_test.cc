#include "storage/write_back_buffer.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::Session;
using testing::TempDir;

constexpr uint32_t kRowBytes = 72;  // rows straddle pages, as a 16-dim row with its state does

void RandomBytes(std::mt19937_64& rng, std::byte* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(rng());
}

// What a reader sees: the staged copy, else the file's row.
std::vector<std::byte> Visible(const WriteBackBuffer& wb, RowFile& file, IoSession& io, uint64_t id) {
  std::vector<std::byte> row(kRowBytes);
  if (const std::byte* p = wb.Find(id)) {
    std::memcpy(row.data(), p, kRowBytes);
  } else {
    const uint64_t ids[] = {id};
    EXPECT_TRUE(file.ReadRows(io, ids, row.data()).ok());
  }
  return row;
}

class WriteBackBufferTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  // A zeroed row file of `rows` rows in a temporary directory, and a session on the backend.
  void Open(uint64_t rows) {
    auto f = RowFile::Create(dir_.File("t.rows"), kRowBytes, rows, RowFileOptions{});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(f).value();
    io_ = Session(GetParam());
  }
  TempDir dir_;
  std::unique_ptr<RowFile> file_;
  std::unique_ptr<IoSession> io_;
};

TEST_P(WriteBackBufferTest, ReadersSeeTheLatestRowsAndFlushLeavesTheFileEqualToTheModel) {
  constexpr uint64_t kRows = 20000;
  ASSERT_NO_FATAL_FAILURE(Open(kRows));
  RowFile& file = *file_;
  IoSession& io = *io_;
  std::mt19937_64 rng(7);
  std::vector<std::byte> model(kRows * kRowBytes);
  RandomBytes(rng, model.data(), model.size());
  ASSERT_TRUE(file.WriteRange(io, 0, kRows, model.data()).ok());

  WriteBackBuffer wb(&file, WriteBackOptions{.capacity_rows = 700, .regions = 8, .sweep_gap_bytes = 8192});
  for (int round = 0; round < 200; ++round) {
    // Hot rows repeat (also within one call: the last copy wins), cold ones are spread out.
    std::vector<uint64_t> ids(1 + rng() % 150);
    for (auto& id : ids) id = rng() % 3 == 0 ? rng() % 40 : rng() % kRows;
    std::vector<std::byte> rows(ids.size() * kRowBytes);
    RandomBytes(rng, rows.data(), rows.size());
    ASSERT_TRUE(wb.Write(io, ids, rows.data()).ok());
    for (size_t k = 0; k < ids.size(); ++k) {
      std::memcpy(model.data() + ids[k] * kRowBytes, rows.data() + k * kRowBytes, kRowBytes);
    }
    ASSERT_LE(wb.staged(), wb.capacity_rows());
    for (int probe = 0; probe < 20; ++probe) {
      const uint64_t id = probe < 10 ? ids[rng() % ids.size()] : rng() % kRows;
      ASSERT_EQ(0, std::memcmp(Visible(wb, file, io, id).data(), model.data() + id * kRowBytes, kRowBytes))
          << "row " << id << " after round " << round;
    }
  }
  EXPECT_GT(wb.stats().sweeps, 10u);
  EXPECT_GT(wb.stats().rows_swept, 5000u);
  ASSERT_TRUE(wb.Flush(io).ok());
  EXPECT_EQ(wb.staged(), 0u);
  EXPECT_EQ(wb.Find(0), nullptr);
  std::vector<std::byte> on_disk(kRows * kRowBytes);
  ASSERT_TRUE(file.ReadRange(io, 0, kRows, on_disk.data()).ok());
  EXPECT_EQ(0, std::memcmp(on_disk.data(), model.data(), model.size()));
}

TEST_P(WriteBackBufferTest, StagedRowsStayOffTheFileUntilTheirRegionIsSwept) {
  constexpr uint64_t kRows = 1000;
  ASSERT_NO_FATAL_FAILURE(Open(kRows));
  RowFile& file = *file_;
  IoSession& io = *io_;
  WriteBackBuffer wb(&file, WriteBackOptions{.capacity_rows = 4, .regions = 2, .sweep_gap_bytes = 0});
  std::vector<std::byte> ones(kRowBytes, std::byte{1});
  std::vector<std::byte> zeros(kRowBytes, std::byte{0});
  // Three rows in region 0 (ids < 500), one in region 1.
  for (uint64_t id : {1, 2, 3, 900}) {
    const uint64_t ids[] = {id};
    ASSERT_TRUE(wb.Write(io, ids, ones.data()).ok());
  }
  EXPECT_EQ(wb.stats().sweeps, 0u);
  std::vector<std::byte> row(kRowBytes);
  const uint64_t one[] = {1};
  ASSERT_TRUE(file.ReadRows(io, one, row.data()).ok());
  EXPECT_EQ(row, zeros) << "a staged row reached the file before a sweep";
  // A fifth row overflows the buffer: the fullest region (0) is swept, region 1 stays staged.
  const uint64_t five[] = {901};
  ASSERT_TRUE(wb.Write(io, five, ones.data()).ok());
  EXPECT_EQ(wb.stats().sweeps, 1u);
  EXPECT_EQ(wb.stats().rows_swept, 3u);
  EXPECT_EQ(wb.staged(), 2u);
  EXPECT_EQ(wb.Find(1), nullptr);
  EXPECT_NE(wb.Find(900), nullptr);
  ASSERT_TRUE(file.ReadRows(io, one, row.data()).ok());
  EXPECT_EQ(row, ones);
  const uint64_t far[] = {900};
  ASSERT_TRUE(file.ReadRows(io, far, row.data()).ok());
  EXPECT_EQ(row, zeros);
}

TEST_P(WriteBackBufferTest, ASweepThatAppliesRowsBeingWrittenAgainStillMakesRoomForThem) {
  constexpr uint64_t kRows = 1000;
  ASSERT_NO_FATAL_FAILURE(Open(kRows));
  RowFile& file = *file_;
  IoSession& io = *io_;
  WriteBackBuffer wb(&file, WriteBackOptions{.capacity_rows = 4, .regions = 2, .sweep_gap_bytes = 0});
  std::vector<std::byte> rows(4 * kRowBytes);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = static_cast<std::byte>(k / kRowBytes + 1);
  for (uint64_t id : {1, 900, 901, 902}) {
    const uint64_t ids[] = {id};
    ASSERT_TRUE(wb.Write(io, ids, rows.data()).ok());
  }
  // Region 1 is the fullest; sweeping it applies 900-902, which this write stages again.
  const uint64_t again[] = {900, 901, 902, 3};
  ASSERT_TRUE(wb.Write(io, again, rows.data()).ok());
  EXPECT_LE(wb.staged(), wb.capacity_rows());
  for (size_t k = 0; k < 4; ++k) {
    std::vector<std::byte> row = Visible(wb, file, io, again[k]);
    EXPECT_EQ(0, std::memcmp(row.data(), rows.data() + k * kRowBytes, kRowBytes)) << "row " << again[k];
  }
  ASSERT_TRUE(wb.Flush(io).ok());
  std::vector<std::byte> row = Visible(wb, file, io, 1);
  EXPECT_EQ(row[0], std::byte{1});
}

TEST_P(WriteBackBufferTest, MoreRowsThanTheBufferGoStraightThroughAfterTheStagedOnes) {
  constexpr uint64_t kRows = 300;
  ASSERT_NO_FATAL_FAILURE(Open(kRows));
  RowFile& file = *file_;
  IoSession& io = *io_;
  WriteBackBuffer wb(&file, WriteBackOptions{.capacity_rows = 8, .regions = 4, .sweep_gap_bytes = 4096});
  std::vector<std::byte> old_rows(kRowBytes, std::byte{5});
  const uint64_t first[] = {7};
  ASSERT_TRUE(wb.Write(io, first, old_rows.data()).ok());
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 20; ++id) ids.push_back(id * 13);
  ids.push_back(7);
  std::vector<std::byte> rows(ids.size() * kRowBytes);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = static_cast<std::byte>(k / kRowBytes + 10);
  ASSERT_TRUE(wb.Write(io, ids, rows.data()).ok());
  EXPECT_EQ(wb.staged(), 0u);
  for (size_t k = 0; k < ids.size(); ++k) {
    std::vector<std::byte> row(kRowBytes);
    const uint64_t one[] = {ids[k]};
    ASSERT_TRUE(file.ReadRows(io, one, row.data()).ok());
    EXPECT_EQ(0, std::memcmp(row.data(), rows.data() + k * kRowBytes, kRowBytes)) << "row " << ids[k];
  }
}

TEST_P(WriteBackBufferTest, ASweepWithReadsTheLatestRowsAndSweepsOnlyARegionWithEnoughStagedRows) {
  constexpr uint64_t kRows = 20000;
  ASSERT_NO_FATAL_FAILURE(Open(kRows));
  RowFile& file = *file_;
  IoSession& io = *io_;
  std::mt19937_64 rng(9);
  std::vector<std::byte> model(kRows * kRowBytes);
  RandomBytes(rng, model.data(), model.size());
  ASSERT_TRUE(file.WriteRange(io, 0, kRows, model.data()).ok());
  WriteBackBuffer wb(&file, WriteBackOptions{.capacity_rows = 3000, .regions = 8, .sweep_gap_bytes = 16384});
  uint64_t sweeps = 0;
  for (int round = 0; round < 60; ++round) {
    std::vector<uint64_t> ids(1 + rng() % 300);
    for (auto& id : ids) id = rng() % kRows;
    std::vector<std::byte> rows(ids.size() * kRowBytes);
    RandomBytes(rng, rows.data(), rows.size());
    ASSERT_TRUE(wb.Write(io, ids, rows.data()).ok());
    for (size_t k = 0; k < ids.size(); ++k) {
      std::memcpy(model.data() + ids[k] * kRowBytes, rows.data() + k * kRowBytes, kRowBytes);
    }
    // Pass over one region: read distinct rows of it, staged ones among them.
    const uint32_t region = static_cast<uint32_t>(round % wb.regions());
    const uint64_t lo = (region * kRows + 7) / 8, hi = ((region + 1) * kRows + 7) / 8;
    std::vector<uint64_t> reads;
    for (uint64_t id = lo; id < hi; ++id) {
      if (rng() % 5 == 0) reads.push_back(id);
    }
    std::shuffle(reads.begin(), reads.end(), rng);
    const uint64_t staged_before = wb.staged(), region_before = wb.staged_in(region);
    // Every third round asks for more staged rows than the region has: it only reads.
    const bool sweep = round % 3 != 2 && region_before > 0;
    sweeps += sweep;
    std::vector<std::byte> out(reads.size() * kRowBytes);
    ASSERT_TRUE(wb.SweepWith(io, region, reads, out.data(), round % 3 != 2 ? 1 : region_before + 1).ok());
    for (size_t k = 0; k < reads.size(); ++k) {
      ASSERT_EQ(0, std::memcmp(out.data() + k * kRowBytes, model.data() + reads[k] * kRowBytes, kRowBytes))
          << "row " << reads[k] << " in round " << round;
    }
    if (sweep) {
      // The region's staged rows are on the file now, the other regions' still staged.
      for (uint64_t id = lo; id < hi; id += 37) EXPECT_EQ(wb.Find(id), nullptr) << "row " << id;
      EXPECT_EQ(wb.staged(), staged_before - region_before);
    } else {
      EXPECT_EQ(wb.staged(), staged_before);
      EXPECT_EQ(wb.staged_in(region), region_before);
    }
  }
  EXPECT_GT(sweeps, 20u);
  EXPECT_EQ(wb.stats().passes, sweeps);
  EXPECT_EQ(wb.stats().reads_only, 60u - sweeps);
  ASSERT_TRUE(wb.Flush(io).ok());
  std::vector<std::byte> on_disk(kRows * kRowBytes);
  ASSERT_TRUE(file.ReadRange(io, 0, kRows, on_disk.data()).ok());
  EXPECT_EQ(0, std::memcmp(on_disk.data(), model.data(), model.size()));
}

TEST_P(WriteBackBufferTest, AnOutOfRangeIdIsAnError) {
  ASSERT_NO_FATAL_FAILURE(Open(100));
  RowFile& file = *file_;
  IoSession& io = *io_;
  WriteBackBuffer wb(&file, WriteBackOptions{.capacity_rows = 16});
  std::vector<std::byte> row(kRowBytes);
  const uint64_t bad[] = {100};
  Status s = wb.Write(io, bad, row.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  EXPECT_NE(s.ToString().find("row id 100 is out of range"), std::string::npos) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, WriteBackBufferTest,
                         ::testing::Values(BackendKind::kPread, BackendKind::kUring),
                         [](const ::testing::TestParamInfo<BackendKind>& p) {
                           return p.param == BackendKind::kPread ? "pread" : "uring";
                         });

}  // namespace
}  // namespace sluice
