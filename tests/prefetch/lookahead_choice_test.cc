#include "prefetch/lookahead_choice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "storage/disk_probe.h"
#include "storage/file.h"
#include "tests/storage/test_util.h"

namespace sluice {
namespace {

RowKey K(uint64_t id) { return RowKey{id, 0}; }

TEST(LookaheadChoiceTest, LruSimulationCountsTheSecondHalfsReads) {
  // Capacity 2: step 1 loads 3 (2 goes), step 2 loads 2 and 4.
  const std::vector<std::vector<RowKey>> steps = {{K(1), K(2)}, {K(1), K(3)}, {K(2), K(4)}};
  EXPECT_DOUBLE_EQ(SimulateLruReads(steps, 2, 0), 1.5);
  // With a buffer of one evicted row, 2 comes back from it: no read.
  EXPECT_DOUBLE_EQ(SimulateLruReads(steps, 2, 1), 1.0);
  // Everything fits: only rows new to the cache are read.
  EXPECT_DOUBLE_EQ(SimulateLruReads(steps, 10, 0), 1.0);  // 3 and 4, each once
  // Rows of another table are other rows.
  const std::vector<std::vector<RowKey>> tables = {{RowKey{1, 0}}, {RowKey{1, 1}}};
  EXPECT_DOUBLE_EQ(SimulateLruReads(tables, 10, 0), 1.0);
}

TEST(LookaheadChoiceTest, AFreshTableReadsOnlyRowsWrittenBack) {
  const std::vector<std::vector<RowKey>> steps = {{K(1), K(2)}, {K(3)}, {K(1)}};
  // Capacity 2: step 1 evicts 1 (3 is new: made from the seed), step 2 reads 1 back.
  EXPECT_DOUBLE_EQ(SimulateLruReads(steps, 2, 0, /*fresh=*/true), 0.5);
  EXPECT_DOUBLE_EQ(SimulateLruReads(steps, 2, 0, /*fresh=*/false), 1.0);
}

TEST(LookaheadChoiceTest, LruSimulationCountsTheSecondHalfsEvictions) {
  // Capacity 2: step 1 evicts 2, step 2 evicts 1 and 3; the second half (steps 1-2) averages 1.5.
  const std::vector<std::vector<RowKey>> steps = {{K(1), K(2)}, {K(1), K(3)}, {K(2), K(4)}};
  double evictions = -1;
  SimulateLruReads(steps, 2, 0, false, &evictions);
  EXPECT_DOUBLE_EQ(evictions, 1.5);
  SimulateLruReads(steps, 10, 0, false, &evictions);
  EXPECT_DOUBLE_EQ(evictions, 0);
}

TEST(LookaheadChoiceTest, WriteBacksCostTheFileReadAndWrittenOncePerBufferOfEvictions) {
  // 1,000 evictions a step into 4,000 rows: a quarter of a 64 MiB file read and written a step.
  EXPECT_DOUBLE_EQ(WriteBackSeconds(1000, 4000, 64 << 20, 1e9), 2.0 * (64 << 20) / 4 / 1e9);
  // A buffer smaller than a step's evictions: the whole file, at most, each step.
  EXPECT_DOUBLE_EQ(WriteBackSeconds(9000, 4000, 64 << 20, 1e9), 2.0 * (64 << 20) / 1e9);
  EXPECT_DOUBLE_EQ(WriteBackSeconds(1000, 0, 64 << 20, 1e9), 0);  // no buffer: not modelled
}

TEST(LookaheadChoiceTest, TheRowSampleKeepsAboutOneInEvery) {
  uint64_t kept = 0;
  for (uint64_t id = 0; id < 16000; ++id) kept += InRowSample(RowKey{id, static_cast<uint32_t>(id % 26)}, 16);
  EXPECT_GT(kept, 700u);
  EXPECT_LT(kept, 1300u);
  EXPECT_TRUE(InRowSample(K(5), 1));
}

TEST(LookaheadChoiceTest, OracleSimulationKeepsRowsTheWindowSees) {
  // Capacity 2, nothing in flight: row 1 comes back at step 4. A window that reaches step 4
  // from step 2 keeps it (2 and 3 go instead); a window of 1 evicts it (used least recently).
  const std::vector<std::vector<RowKey>> steps = {{K(1)}, {K(2)}, {K(3)}, {K(4)}, {K(1)}};
  EXPECT_DOUBLE_EQ(SimulateOracleLoads(steps, 2, 4, 0), 2.0 / 3);  // steps 2-4 load 3, 4
  EXPECT_DOUBLE_EQ(SimulateOracleLoads(steps, 2, 1, 0), 1.0);      // and 1 again
  // A cache that cannot hold the steps in flight (2 rows a step, 1 in flight): infinite.
  EXPECT_TRUE(std::isinf(SimulateOracleLoads({{K(1), K(2)}, {K(3), K(4)}}, 3, 0, 1)));
}

TEST(LookaheadChoiceTest, TheWindowWithFewerLoadsWinsWhenItSavesAtLeastOnePercent) {
  const std::vector<std::vector<RowKey>> steps = {{K(1)}, {K(2)}, {K(3)}, {K(4)}, {K(1)}};
  // The same cache: the longer window saves a third of the loads.
  WindowChoice c = ChooseWindow(steps, 1, 0, {{1, 2, 0}, {4, 2, 0}});
  EXPECT_EQ(c.window, 4u);
  ASSERT_EQ(c.candidates.size(), 2u);
  EXPECT_DOUBLE_EQ(c.candidates[0].loads, 1.0);
  EXPECT_DOUBLE_EQ(c.candidates[1].loads, 2.0 / 3);
  EXPECT_NE(c.reason.find("window 4 steps (auto"), std::string::npos) << c.reason;
  // Its ring leaves the cache one row: every step loads, as with the short window: the short one stays.
  c = ChooseWindow(steps, 1, 0, {{1, 2, 0}, {4, 1, 0}});
  EXPECT_EQ(c.window, 1u);
  // No window's cache holds the steps in flight: the first candidate, said so.
  c = ChooseWindow({{K(1), K(2)}, {K(3), K(4)}}, 1, 1, {{2, 3, 0}});
  EXPECT_EQ(c.window, 2u);
  EXPECT_NE(c.reason.find("no window's cache"), std::string::npos) << c.reason;
}

TEST(LookaheadChoiceTest, AWindowThatStarvesTheWriteBackBufferLosesGivenADisk) {
  const std::vector<std::vector<RowKey>> steps = {{K(1)}, {K(2)}, {K(3)}, {K(4)}, {K(1)}};
  // The longer window loads a third fewer rows, but its ring leaves its write-back buffer one
  // row against the short window's 20: evictions (as many as loads) sweep much more of the file.
  WindowCandidate short_window{1, 2, 0}, long_window{4, 2, 0};
  short_window.staged_rows = 20;
  long_window.staged_rows = 1;  // 2/3 of a row evicted a step: two thirds of the file swept
  DiskProbe disk;
  disk.random_reads_per_s = 1000, disk.sequential_bytes_per_s = 1e9;
  WindowChoice c = ChooseWindow(steps, 1, 0, {short_window, long_window}, disk, 64 << 20);
  EXPECT_EQ(c.window, 1u) << c.reason;
  EXPECT_NEAR(c.candidates[0].cost_s, 1.0 / 1000 + 2.0 * (64 << 20) / 20 / 1e9, 1e-9);
  EXPECT_NE(c.reason.find("write-back sweeps"), std::string::npos) << c.reason;
  // Without a disk, the fewest loads, as before.
  EXPECT_EQ(ChooseWindow(steps, 1, 0, {short_window, long_window}).window, 4u);
  // With a buffer as large as the short window's, the longer window's fewer loads win again.
  long_window.staged_rows = 20;
  EXPECT_EQ(ChooseWindow(steps, 1, 0, {short_window, long_window}, disk, 64 << 20).window, 4u);
}

LookaheadInput Input(double reads_per_s, double bytes_per_s) {
  LookaheadInput in;
  for (uint64_t t = 0; t < 40; ++t) {  // 1000 new rows a step: every row a load
    std::vector<RowKey> rows;
    for (uint64_t i = 0; i < 1000; ++i) rows.push_back(K(t * 1000 + i));
    in.steps.push_back(rows);
  }
  in.cache_rows_plain = 4000, in.cache_rows_read_ahead = 3000, in.read_ahead_rows = 100000;
  in.fresh = false;  // every row stored: each load a read
  in.horizon = 32;
  in.table_bytes = 64ull << 20;  // 2 MiB a step swept
  in.disk.random_reads_per_s = reads_per_s, in.disk.sequential_bytes_per_s = bytes_per_s;
  return in;
}

TEST(LookaheadChoiceTest, SlowRandomReadsChooseReadAheadWithLru) {
  const LookaheadChoice c = ChooseLookahead(Input(10000, 1e9));  // 100 ms against 2 ms
  EXPECT_TRUE(c.read_ahead);
  EXPECT_EQ(c.planner, PlannerKind::kLru);
  EXPECT_DOUBLE_EQ(c.reads_plain, 1000);
  EXPECT_NEAR(c.random_s, 0.1, 1e-9);
  EXPECT_NEAR(c.read_ahead_s, (64 << 20) / 32 / 1e9, 1e-9);
  EXPECT_NE(c.reason.find("read-ahead with LRU"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("1,000 disk reads a step at 10,000 reads/s"), std::string::npos) << c.reason;
}

TEST(LookaheadChoiceTest, FastRandomReadsOrASlowSweepKeepTheOracle) {
  const LookaheadChoice fast = ChooseLookahead(Input(1e7, 1e9));  // 0.1 ms against 2 ms
  EXPECT_FALSE(fast.read_ahead);
  EXPECT_EQ(fast.planner, PlannerKind::kOracle);
  EXPECT_NE(fast.reason.find("oracle without read-ahead"), std::string::npos) << fast.reason;
  EXPECT_FALSE(ChooseLookahead(Input(10000, 1e7)).read_ahead);  // 210 ms of sweeps a step
  LookaheadInput none = Input(10000, 1e9);
  none.read_ahead_rows = 0;
  EXPECT_FALSE(ChooseLookahead(none).read_ahead);
}

TEST(LookaheadChoiceTest, AStarvedWriteBackBufferCostsTheOracleItsFreeReads) {
  // A fresh table: no disk reads either way, so reads alone kept the oracle. Its buffer holds
  // a tenth of a step's evictions (1,000 a step once the cache is full): it sweeps the whole
  // file each step, against read-ahead's buffer of 20 steps of them.
  LookaheadInput in = Input(10000, 1e9);
  in.fresh = true;
  in.staged_rows_plain = 100, in.staged_rows_read_ahead = 20000;
  const LookaheadChoice c = ChooseLookahead(in);
  EXPECT_DOUBLE_EQ(c.reads_plain, 0);
  EXPECT_DOUBLE_EQ(c.evictions_plain, 1000);
  EXPECT_NEAR(c.write_back_plain_s, 2.0 * (64 << 20) / 1e9, 1e-9);
  EXPECT_NEAR(c.write_back_read_ahead_s, 2.0 * (64 << 20) / 20 / 1e9, 1e-9);
  EXPECT_NEAR(c.random_s, c.write_back_plain_s, 1e-9);
  EXPECT_TRUE(c.read_ahead) << c.reason;
  EXPECT_NE(c.reason.find("write-back sweeps (1,000 rows a step into 100)"), std::string::npos) << c.reason;
  // A buffer as large as read-ahead's: the oracle's reads stay free and it wins.
  in.staged_rows_plain = 20000;
  EXPECT_FALSE(ChooseLookahead(in).read_ahead);
}

TEST(LookaheadChoiceTest, LoadsReadAheadCannotHoldStayRandomReads) {
  LookaheadInput in = Input(10000, 1e9);
  in.read_ahead_rows = 1000 * 32 / 4;  // half of the half horizon's reads it should hold
  const LookaheadChoice c = ChooseLookahead(in);
  EXPECT_NEAR(c.read_ahead_s, (64 << 20) / 32 / 1e9 + 500.0 / 10000, 1e-9);
}

TEST(DiskProbeTest, MeasuresRandomAndSequentialReads) {
  testing::TempDir dir;
  std::vector<std::byte> bytes(8 << 20, std::byte{7});
  ASSERT_TRUE(WriteFileDurable(dir.File("t"), bytes).ok());
  auto file = File::Open(dir.File("t"), OpenMode::kRead, true);
  ASSERT_TRUE(file.ok());
  auto io = testing::Session(BackendKind::kAuto);
  auto p = ProbeDisk(*io, *file, bytes.size(), 0.1);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_GT(p->random_reads_per_s, 100);
  EXPECT_GT(p->sequential_bytes_per_s, 1e6);
  EXPECT_GE(p->seconds, 0.1);
  EXPECT_FALSE(ProbeDisk(*io, *file, 100, 0.1).ok());
}

TEST(DiskProbeTest, MeasuresEachDepthWithinTheSessionsRing) {
  testing::TempDir dir;
  std::vector<std::byte> bytes(8 << 20, std::byte{7});
  ASSERT_TRUE(WriteFileDurable(dir.File("t"), bytes).ok());
  auto file = File::Open(dir.File("t"), OpenMode::kRead, true);
  ASSERT_TRUE(file.ok());
  IoConfig config;
  config.queue_depth = 16;
  auto io = IoSession::Create(config);
  ASSERT_TRUE(io.ok());
  const std::vector<uint32_t> depths = {4, 8, 32};
  auto rates = ProbeDepths(**io, *file, bytes.size(), depths, 0.06);
  ASSERT_TRUE(rates.ok()) << rates.status().ToString();
  ASSERT_EQ(rates->size(), 3u);
  EXPECT_EQ((*rates)[0].depth, 4u);
  EXPECT_EQ((*rates)[2].depth, 16u);  // no deeper than the session's ring
  for (const DepthRate& r : *rates) EXPECT_GT(r.reads_per_s, 100);
  EXPECT_FALSE(ProbeDepths(**io, *file, 100, depths, 0.06).ok());
}

TEST(DiskProbeTest, TheShallowestDepthNearTheBestRateIsChosen) {
  // A disk that saturates at 32: 64 is 2% faster, so 32 (within 10%) wins; the order of the
  // measurements does not matter.
  DepthChoice c = ChooseQueueDepth({{64, 102'000}, {4, 30'000}, {8, 55'000}, {16, 80'000}, {32, 100'000}});
  EXPECT_EQ(c.depth, 32u);
  EXPECT_EQ(c.reason, "32 (auto: the shallowest within 10% of the best random 4 KiB reads/s, "
                      "4: 30k, 8: 55k, 16: 80k, 32: 100k, 64: 102k)");
  ASSERT_EQ(c.rates.size(), 5u);
  EXPECT_EQ(c.rates.front().depth, 4u);
  // One that gains nothing from depth (a page cache, a RAM disk): the shallowest.
  EXPECT_EQ(ChooseQueueDepth({{4, 500'000}, {8, 480'000}, {16, 510'000}}).depth, 4u);
  // Within 30%: 16.
  EXPECT_EQ(ChooseQueueDepth({{4, 30'000}, {8, 55'000}, {16, 80'000}, {32, 100'000}}, 0.3).depth, 16u);
}

}  // namespace
}  // namespace sluice
