// SpillBacking against the file it sweeps: every row a step's loads ask for must come back with
// the file's bytes, from the step's pack when it holds the row and from the source otherwise;
// with a ring large enough no pack is dropped and only skipped rows go to the source; with a
// ring too small the loads are still exact; a pass that continues a chain keeps the packs the
// pass before filled for it, and one that cannot (the pass before stopped early, or listed past
// its end) starts afresh, exact either way.

#include "prefetch/spill_backing.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "prefetch/row_backings.h"
#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::Session;
using testing::TempDir;

constexpr uint64_t kRows = 20000;
constexpr uint64_t kHot = 300;  // rows [0, kHot) are skipped (pinned)

struct Param {
  BackendKind backend;
  uint32_t row_bytes;
};

class SpillBackingTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const uint32_t rb = GetParam().row_bytes;
    auto f = RowFile::Create(dir_.File("f.rows"), rb, kRows, RowFileOptions{});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    io_ = Session(GetParam().backend);
    std::mt19937_64 rng(5);
    model_.resize(kRows * rb);
    for (auto& b : model_) b = static_cast<std::byte>(rng());
    ASSERT_TRUE((*f)->WriteRange(*io_, 0, kRows, model_.data()).ok());
    file_ = f->get();
    source_ = ArrayBacking::Wrap(std::move(f).value(), DType::kFloat32, rb / 4);
    // Steps of 500 rows: a third hot, the rest anywhere (repeats allowed).
    for (int s = 0; s < 40; ++s) {
      std::vector<uint64_t> rows;
      for (int i = 0; i < 500; ++i) rows.push_back(i % 3 == 0 ? rng() % kHot : rng() % kRows);
      steps_.push_back(rows);
    }
  }

  // A pass of steps_[first, first + count).
  SpillBacking::StepRows StepRows(uint64_t first = 0, uint64_t count = ~uint64_t{0}) {
    return [this, first, count](uint64_t s, std::vector<uint64_t>& out) -> Result<bool> {
      if (s >= count || first + s >= steps_.size()) return false;
      out.insert(out.end(), steps_[first + s].begin(), steps_[first + s].end());
      return true;
    };
  }

  // A spill over the source with `o`, its file sized for steps of 500 rows.
  Result<std::unique_ptr<SpillBacking>> OpenSpill(SpillOptions o) {
    o.file_bytes = SpillBacking::RingBytes(o, 500, GetParam().row_bytes);
    return SpillBacking::Create(source_.get(), file_, dir_.File("spill"), o);
  }

  // Loads each step's distinct rows (in a shuffled order) through the backing and checks them:
  // `steps` of the pass of steps_[first, first + count), naming `next` as the pass after it.
  // With `resident` d, a step loads only the rows its d previous steps of the pass did not use,
  // as a RowCache with d protected steps asks for them.
  void RunPass(SpillBacking& b, uint64_t steps, uint64_t first = 0, uint64_t count = ~uint64_t{0},
               SpillBacking::StepRows next = nullptr, bool continues = false, uint32_t resident = 0) {
    const uint32_t rb = GetParam().row_bytes;
    b.StartPass(StepRows(first, count), [](uint64_t row) { return row < kHot; }, next, continues);
    std::mt19937_64 rng(9);
    for (uint64_t t = 0; t < steps; ++t) {
      std::vector<uint64_t> ids = steps_[first + t];
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (uint64_t back = 1; back <= resident && back <= t; ++back) {
        const std::vector<uint64_t>& before = steps_[first + t - back];
        std::erase_if(ids, [&](uint64_t id) { return std::find(before.begin(), before.end(), id) != before.end(); });
      }
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<RowKey> keys;
      for (uint64_t id : ids) keys.push_back(RowKey{id, 0});
      std::vector<std::byte> out(ids.size() * rb);
      std::vector<std::byte*> dest;
      for (size_t i = 0; i < ids.size(); ++i) dest.push_back(out.data() + i * rb);
      ASSERT_TRUE(b.ReadScatter(*io_, keys, dest, rb, 0).ok());
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(std::memcmp(dest[i], model_.data() + ids[i] * rb, rb), 0) << "step " << t << " row " << ids[i];
      }
      hot_loads_ += static_cast<uint64_t>(std::count_if(ids.begin(), ids.end(), [](uint64_t r) { return r < kHot; }));
      loads_ += ids.size();
      ASSERT_TRUE(b.Advance(*io_, t).ok());
    }
    b.EndPass();
  }

  TempDir dir_;
  std::unique_ptr<IoSession> io_;
  std::vector<std::byte> model_;
  RowFile* file_ = nullptr;
  std::unique_ptr<ArrayBacking> source_;
  std::vector<std::vector<uint64_t>> steps_;
  uint64_t loads_ = 0, hot_loads_ = 0;
};

// A pack's loads read it a chunk at a time, in runs of 3 chunks (the last run of a pack
// shorter) or of a whole 128 KiB: rows at a chunk's slack-shifted offsets, the same bytes.
TEST_P(SpillBackingTest, PackReadsOfSeveralChunksServeTheSameRows) {
  for (const uint32_t read : {4096u, 3 * 4096u, 128u << 10}) {
    SCOPED_TRACE("reads of " + std::to_string(read) + " bytes");
    SpillOptions o;
    o.horizon_steps = 3;
    o.chunk_bytes = 4096;  // 72-byte rows leave 64 bytes of slack at each chunk's end
    o.read_bytes = read;
    auto b = OpenSpill(o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    loads_ = hot_loads_ = 0;
    RunPass(**b, steps_.size());
    EXPECT_EQ((*b)->stats().rows_served, loads_ - hot_loads_);
    EXPECT_EQ((*b)->stats().rows_direct, hot_loads_);
  }
}

// Packs written on the io thread and by the writer thread (a pool of a few chunks: the sweep
// waits for the writer often) hold the same rows: the same loads, bytes and passes.
TEST_P(SpillBackingTest, LoadsComeFromPacksAndEqualTheFile) {
  std::vector<uint64_t> written;  // by K, written on the io thread
  for (const bool async : {false, true}) {
    for (uint32_t k : {1u, 3u, 8u}) {
      SCOPED_TRACE(async ? "written by the writer thread" : "written on the io thread");
      SpillOptions o;
      o.horizon_steps = k;
      o.chunk_bytes = 4096;  // many chunks a pack, rows straddling none
      o.sweep_rows = 97;     // sweeps in several pieces
      o.write_batch = 3;
      o.async_writes = async;
      auto b = OpenSpill(o);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      loads_ = hot_loads_ = 0;
      RunPass(**b, steps_.size());
      const SpillStats& st = (*b)->stats();
      EXPECT_EQ(st.packs_dropped, 0u) << "K " << k;
      EXPECT_EQ(st.rows_direct, hot_loads_) << "K " << k;  // only the skipped rows
      EXPECT_EQ(st.rows_served, loads_ - hot_loads_) << "K " << k;
      EXPECT_GT(st.bytes_written, 0u);
      if (async) {
        EXPECT_EQ(st.bytes_written, written.at(k == 1 ? 0 : k == 3 ? 1 : 2)) << "K " << k;
      } else {
        written.push_back(st.bytes_written);
      }
      EXPECT_EQ(st.passes, k + steps_.size());  // the first sweep's K regions, one a step
      // Nameless while it lives: a killed process leaves no spill file behind.
      EXPECT_FALSE(std::filesystem::exists(dir_.File("spill")));
    }
  }
}

TEST_P(SpillBackingTest, PassesRepeatAndStopEarly) {
  SpillOptions o;
  o.horizon_steps = 5;
  o.chunk_bytes = 8192;
  auto b = OpenSpill(o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  RunPass(**b, 7);  // stops long before the listed steps
  RunPass(**b, steps_.size());
  RunPass(**b, 2);  // shorter than the horizon
  EXPECT_EQ((*b)->stats().packs_dropped, 0u);
  EXPECT_EQ((*b)->stats().rows_direct, hot_loads_);
}

TEST_P(SpillBackingTest, AChainedPassKeepsThePacksThePassBeforeFilled) {
  for (uint32_t k : {1u, 3u, 8u}) {
    SpillOptions o;
    o.horizon_steps = k;
    o.chunk_bytes = 4096;
    o.sweep_rows = 97;
    auto b = OpenSpill(o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    loads_ = hot_loads_ = 0;
    // Three passes of 15, 13 and 12 steps, each naming the next.
    RunPass(**b, 15, 0, 15, StepRows(15, 13));
    EXPECT_FALSE((*b)->continued());
    RunPass(**b, 13, 15, 13, StepRows(28, 12), /*continues=*/true);
    EXPECT_TRUE((*b)->continued()) << "K " << k;
    RunPass(**b, 12, 28, 12, nullptr, /*continues=*/true);
    EXPECT_TRUE((*b)->continued()) << "K " << k;
    const SpillStats& st = (*b)->stats();
    EXPECT_EQ(st.full_sweeps, 1u) << "K " << k;
    EXPECT_EQ(st.passes_continued, 2u) << "K " << k;
    EXPECT_EQ(st.packs_dropped, 0u) << "K " << k;
    EXPECT_EQ(st.rows_direct, hot_loads_) << "K " << k;  // every other load from its pack
    EXPECT_EQ(st.rows_served, loads_ - hot_loads_) << "K " << k;
    EXPECT_EQ(st.passes, k + steps_.size());  // as one pass of 40 steps
  }
}

// Rows the previous steps' (resident, as the cache keeps them) are packed no more: every packed
// row is then served, and no load goes to the source that the packs would have served, across
// a chain of passes too (a pass's first steps find nothing resident from the pass before).
TEST_P(SpillBackingTest, RowsOfThePreviousStepsAreLeftOutOfPacks) {
  // Steps that share many rows: half of the others from 600 warm rows.
  std::mt19937_64 rng(11);
  for (auto& step : steps_) {
    for (size_t i = 0; i < step.size(); ++i) {
      if (i % 3 != 0 && i % 2 == 0) step[i] = kHot + rng() % 600;
    }
  }
  for (uint32_t d : {0u, 1u, 2u}) {
    SpillOptions o;
    o.horizon_steps = 4;
    o.chunk_bytes = 4096;
    o.sweep_rows = 97;
    o.resident_steps = d;
    auto b = OpenSpill(o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    loads_ = hot_loads_ = 0;
    RunPass(**b, 20, 0, 20, StepRows(20, 20), false, /*resident=*/2);
    RunPass(**b, 20, 20, 20, nullptr, /*continues=*/true, /*resident=*/2);
    EXPECT_TRUE((*b)->continued());
    const SpillStats& st = (*b)->stats();
    EXPECT_EQ(st.packs_dropped, 0u) << "d " << d;
    EXPECT_EQ(st.rows_direct, hot_loads_) << "d " << d;
    EXPECT_EQ(st.rows_served, loads_ - hot_loads_) << "d " << d;
    if (d == 2) {
      EXPECT_EQ(st.rows_packed, st.rows_served);  // nothing packed in vain
    } else {
      EXPECT_GT(st.rows_packed, st.rows_served + 400) << "d " << d;
    }
    if (d == 0) {
      EXPECT_EQ(st.rows_resident, 0u);
    } else {
      EXPECT_GT(st.rows_resident, 0u);
    }
  }
}

TEST_P(SpillBackingTest, APassThatCannotContinueStartsAfreshAndStaysExact) {
  SpillOptions o;
  o.horizon_steps = 6;
  o.chunk_bytes = 4096;
  auto b = OpenSpill(o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  RunPass(**b, 10, 0, 15, StepRows(15, 13));  // stopped before its last step
  RunPass(**b, 13, 15, 13, nullptr, /*continues=*/true);
  EXPECT_FALSE((*b)->continued());
  RunPass(**b, 13, 15, 13, nullptr, /*continues=*/true);  // the pass before named no next
  EXPECT_FALSE((*b)->continued());
  RunPass(**b, 20, 0, 20, StepRows(20, 3));  // the next pass is shorter than the horizon
  RunPass(**b, 3, 20, 3, StepRows(23, 17), /*continues=*/true);
  EXPECT_FALSE((*b)->continued());
  RunPass(**b, 17, 23, 17, nullptr, /*continues=*/true);
  EXPECT_TRUE((*b)->continued());
  EXPECT_EQ((*b)->stats().full_sweeps, 5u);
  EXPECT_EQ((*b)->stats().packs_dropped, 0u);
  EXPECT_EQ((*b)->stats().rows_direct, hot_loads_);
}

TEST_P(SpillBackingTest, ARingTooSmallDropsPacksAndStaysExact) {
  SpillOptions o;
  o.horizon_steps = 6;
  o.chunk_bytes = 4096;
  o.file_bytes = SpillBacking::RingBytes(o, 500, GetParam().row_bytes) / 4;
  auto b = SpillBacking::Create(source_.get(), file_, dir_.File("spill"), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  RunPass(**b, steps_.size());
  EXPECT_GT((*b)->stats().packs_dropped, 0u);
  EXPECT_GT((*b)->stats().rows_served, 0u);
  EXPECT_GT((*b)->stats().rows_direct, hot_loads_);
}

TEST_P(SpillBackingTest, OutsideAPassEverythingReadsTheSource) {
  SpillOptions o;
  o.file_bytes = 1 << 20;
  auto b = SpillBacking::Create(source_.get(), file_, dir_.File("spill"), o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const uint32_t rb = GetParam().row_bytes;
  std::vector<RowKey> keys{{17, 0}, {kRows - 1, 0}};
  std::vector<std::byte> out(2 * rb);
  std::vector<std::byte*> dest{out.data(), out.data() + rb};
  ASSERT_TRUE((*b)->ReadScatter(*io_, keys, dest, rb, 0).ok());
  EXPECT_EQ(std::memcmp(out.data(), model_.data() + 17 * rb, rb), 0);
  EXPECT_EQ(std::memcmp(out.data() + rb, model_.data() + (kRows - 1) * rb, rb), 0);
  EXPECT_EQ((*b)->stats().rows_served, 0u);
  EXPECT_FALSE((*b)->Write(*io_, keys, out.data()).ok());  // the source is read-only
}

TEST_P(SpillBackingTest, BadOptionsAreRefusedInOneLine) {
  SpillOptions o;
  o.chunk_bytes = 1000;
  auto b = SpillBacking::Create(source_.get(), file_, dir_.File("spill"), o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("multiple of 4 KiB"), std::string::npos) << b.status().ToString();
  o = SpillOptions{};
  o.file_bytes = 1 << 20;
  b = SpillBacking::Create(source_.get(), file_, dir_.File("no-such-dir/spill"), o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("no-such-dir"), std::string::npos) << b.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Rows, SpillBackingTest,
                         ::testing::Values(Param{BackendKind::kPread, 72}, Param{BackendKind::kUring, 72},
                                           Param{BackendKind::kUring, 512}),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(p.param.backend == BackendKind::kPread ? "pread" : "uring") + "_" +
                                  std::to_string(p.param.row_bytes);
                         });

}  // namespace
}  // namespace sluice
