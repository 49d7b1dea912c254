// RowPreloader against a model: a simulated cache loads each step's rows (Take, else a read),
// updates some and writes them back (file write + Drop). Every row a load takes must equal the
// model's latest value, rows the caller skips are never read ahead, and rows read ahead that no
// step takes are forgotten.

#include "prefetch/row_preloader.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::Session;
using testing::TempDir;

constexpr uint32_t kRowBytes = 72;
constexpr uint64_t kRows = 30000;

class RowPreloaderTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    auto f = RowFile::Create(dir_.File("t.rows"), kRowBytes, kRows, RowFileOptions{});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(f).value();
    io_ = Session(GetParam());
    std::mt19937_64 rng(3);
    model_.resize(kRows * kRowBytes);
    for (auto& b : model_) b = static_cast<std::byte>(rng());
    ASSERT_TRUE(file_->WriteRange(*io_, 0, kRows, model_.data()).ok());
    // Steps of 300 rows: a hot set shared by all steps, the rest spread over the file.
    for (int s = 0; s < 120; ++s) {
      std::vector<uint64_t> rows;
      for (int i = 0; i < 300; ++i) rows.push_back(i % 3 == 0 ? rng() % 200 : rng() % kRows);
      steps_.push_back(rows);
    }
  }

  RowPreloader::StepRows StepRows() {
    return [this](uint64_t s, std::vector<uint64_t>& out) -> Result<bool> {
      if (s >= steps_.size()) return false;
      out.insert(out.end(), steps_[s].begin(), steps_[s].end());
      return true;
    };
  }

  // Runs every step: rows the "cache" holds (used in the last `keep` steps) need no load; the
  // others are taken from the preloader or read. Each used row is updated and, once it leaves the
  // cache, written back. Returns the loads and the loads that had to read.
  std::pair<uint64_t, uint64_t> Run(RowPreloader& p, const std::set<uint64_t>& skipped, int keep = 2) {
    std::mt19937_64 rng(11);
    std::vector<std::vector<uint64_t>> cached_by_step;
    std::set<uint64_t> cached;
    in_cache_ = &cached;
    uint64_t loads = 0, reads = 0;
    std::vector<std::byte> row(kRowBytes);
    for (uint64_t t = 0; t < steps_.size(); ++t) {
      std::vector<uint64_t> rows = steps_[t];
      std::sort(rows.begin(), rows.end());
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      for (uint64_t r : rows) {
        if (cached.count(r)) continue;
        ++loads;
        if (!p.Take(r, row.data())) {
          const uint64_t ids[] = {r};
          EXPECT_TRUE(file_->ReadRows(*io_, ids, row.data()).ok());
          ++reads;
        } else {
          EXPECT_FALSE(skipped.count(r)) << "row " << r << " was to be skipped";
        }
        EXPECT_EQ(0, std::memcmp(row.data(), model_.data() + r * kRowBytes, kRowBytes))
            << "step " << t << " row " << r << " is stale";
        cached.insert(r);
      }
      // Update in the cache (the model holds the cache's value).
      for (uint64_t r : rows) {
        for (uint32_t b = 0; b < kRowBytes; b += 8) model_[r * kRowBytes + b] = static_cast<std::byte>(rng());
      }
      cached_by_step.push_back(rows);
      // Evict rows not used in the last `keep` steps: write back, then Drop.
      if (cached_by_step.size() > static_cast<size_t>(keep)) {
        std::set<uint64_t> recent;
        for (size_t k = cached_by_step.size() - keep; k < cached_by_step.size(); ++k) {
          recent.insert(cached_by_step[k].begin(), cached_by_step[k].end());
        }
        std::vector<uint64_t> evict;
        for (uint64_t r : cached) {
          if (!recent.count(r)) evict.push_back(r);
        }
        std::vector<std::byte> rows_out(evict.size() * kRowBytes);
        for (size_t i = 0; i < evict.size(); ++i) {
          std::memcpy(rows_out.data() + i * kRowBytes, model_.data() + evict[i] * kRowBytes, kRowBytes);
        }
        EXPECT_TRUE(file_->WriteRows(*io_, evict, rows_out.data(), 4096).ok());
        for (uint64_t r : evict) {
          p.Drop(r);
          cached.erase(r);
        }
      }
      EXPECT_TRUE(p.Advance(*io_, t).ok());
      EXPECT_LE(p.held(), capacity_);
    }
    in_cache_ = nullptr;
    return {loads, reads};
  }

  TempDir dir_;
  std::unique_ptr<RowFile> file_;
  std::unique_ptr<IoSession> io_;
  std::vector<std::byte> model_;
  std::vector<std::vector<uint64_t>> steps_;
  const std::set<uint64_t>* in_cache_ = nullptr;
  uint64_t capacity_ = 0;
};

TEST_P(RowPreloaderTest, LoadsTakeTheLatestRowsAndMostLoadsNeedNoRead) {
  std::set<uint64_t> skipped;
  for (uint64_t r = 0; r < kRows; r += 7) skipped.insert(r);  // e.g. staged elsewhere
  capacity_ = 3000;
  RowPreloader on(file_.get(), StepRows(),
                  [&](uint64_t r) { return skipped.count(r) > 0 || (in_cache_ && in_cache_->count(r) > 0); },
                  RowPreloaderOptions{.capacity_rows = capacity_, .horizon_steps = 8, .regions = 16,
                                      .gap_bytes = 8192});
  const auto [loads, reads] = Run(on, skipped);
  const RowPreloaderStats& s = on.stats();
  EXPECT_EQ(s.rows_taken + reads, loads) << "every load is a read or a take";
  // The first steps have nothing read ahead, skipped rows and rows evicted and needed again
  // within a horizon are read; most of the rest are taken.
  EXPECT_LT(reads, loads / 3) << "taken " << s.rows_taken;
  EXPECT_EQ(s.passes, 120u * 16 / 8);
}

TEST_P(RowPreloaderTest, RowsNoStepTakesAreForgottenAndRoomIsBounded) {
  // The skip function says nothing is cached, so hot rows the "cache" keeps are read ahead and
  // never taken: they must expire, and the held count stay within the capacity.
  capacity_ = 500;
  RowPreloader p(file_.get(), StepRows(), [](uint64_t) { return false; },
                 RowPreloaderOptions{.capacity_rows = capacity_, .horizon_steps = 6, .regions = 12});
  Run(p, {}, /*keep=*/4);
  EXPECT_GT(p.stats().rows_expired, 0u);
  EXPECT_GT(p.stats().rows_left, 0u) << "500 rows cannot hold 6 steps of 300";
  EXPECT_LE(p.stats().peak_held, capacity_);
}

TEST_P(RowPreloaderTest, AStepRowOutsideTheFileIsAnError) {
  steps_[3].push_back(kRows);
  RowPreloader p(file_.get(), StepRows(), [](uint64_t) { return false; },
                 RowPreloaderOptions{.capacity_rows = 100, .horizon_steps = 4, .regions = 4});
  Status st = p.Advance(*io_, 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, RowPreloaderTest, ::testing::Values(BackendKind::kPread, BackendKind::kUring),
                         [](const ::testing::TestParamInfo<BackendKind>& p) {
                           return p.param == BackendKind::kPread ? "pread" : "uring";
                         });

}  // namespace
}  // namespace sluice
