// DeviceRows (train/device_rows.h) against the host path (SumRowGrads + ApplyRowOptimizer): the
// same steps, each staged while the previous one runs, leave the host rows as the host path
// leaves them; the device cache's size changes what is copied, never the rows. On the emulated
// device always; on a GPU when this build has CUDA and one is visible.

#include "train/device_rows.h"

#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "train/model_step.h"

namespace sluice {
namespace {

constexpr int64_t kDim = 6;

struct Step {
  std::vector<RowKey> keys;         // distinct rows
  std::vector<int64_t> use_rows;    // per use, its distinct row
  torch::Tensor grads;              // [uses, dim]
};

// Steps over `rows` rows, with repeats inside a step and across steps (hot rows).
std::vector<Step> MakeSteps(int n, int64_t rows, int uses, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Step> steps(static_cast<size_t>(n));
  torch::manual_seed(seed);
  for (Step& s : steps) {
    std::vector<int64_t> local(static_cast<size_t>(rows), -1);
    for (int u = 0; u < uses; ++u) {
      const int64_t row = (rng() % 4 == 0) ? static_cast<int64_t>(rng() % 8)
                                           : static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
      if (local[static_cast<size_t>(row)] < 0) {
        local[static_cast<size_t>(row)] = static_cast<int64_t>(s.keys.size());
        s.keys.push_back(RowKey{static_cast<uint64_t>(row), 0});
      }
      s.use_rows.push_back(local[static_cast<size_t>(row)]);
    }
    s.grads = torch::randn({uses, kDim});
  }
  return steps;
}

std::vector<float> MakeTable(int64_t rows, int64_t row_floats) {
  std::vector<float> t(static_cast<size_t>(rows * row_floats));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.01f, 1.0f);
  for (float& x : t) x = u(rng);
  return t;
}

std::vector<float*> Addresses(std::vector<float>& table, const Step& s, int64_t row_floats) {
  std::vector<float*> a;
  for (const RowKey& k : s.keys) a.push_back(table.data() + static_cast<int64_t>(k.id) * row_floats);
  return a;
}

void RunOnHost(std::vector<float>& table, const std::vector<Step>& steps, RowOptimizer opt, int64_t rf) {
  for (const Step& s : steps) {
    const std::vector<float*> rows = Addresses(table, s, rf);
    const torch::Tensor sums = SumRowGrads({s.use_rows}, {s.grads}, static_cast<int64_t>(rows.size()), kDim);
    ApplyRowOptimizer(opt, rows, sums, kDim, 0.1f);
  }
}

// The device loop's order: step t + 1 staged between Update(t) and Finish(t). The uses the
// device gathers must be the host rows' current values.
// `lookahead`: the later steps appended to the oracle's window before a step is staged (as
// RunDevicePass appends the steps its sampler has filled).
void RunOnDevice(Accelerator& acc, DeviceRowsOptions o, std::vector<float>& table,
                 const std::vector<Step>& steps, DeviceRowsStats* stats = nullptr, uint32_t* shards = nullptr,
                 size_t lookahead = 0) {
  DeviceRows rows(&acc, o);
  if (shards != nullptr) *shards = rows.cache_shards();
  size_t appended = 0;
  auto stage = [&](size_t t) {
    for (; lookahead > 0 && appended < steps.size() && appended <= t + lookahead; ++appended) {
      rows.Lookahead(steps[appended].keys);
    }
    std::vector<float*> host = Addresses(table, steps[t], o.row_floats);
    ASSERT_TRUE(rows.Stage(steps[t].keys, host, {steps[t].use_rows}, {steps[t].grads}).ok());
  };
  stage(0);
  for (size_t t = 0; t < steps.size(); ++t) {
    DeviceStep step = rows.Begin(/*training=*/true);
    // The uses are the rows as the host has them now: step t - 1 was written back.
    const torch::Tensor uses = step.table.uses.to(torch::kCPU).contiguous();
    ASSERT_EQ(uses.size(0), static_cast<int64_t>(steps[t].use_rows.size()));
    for (size_t u = 0; u < steps[t].use_rows.size(); ++u) {
      const RowKey& k = steps[t].keys[static_cast<size_t>(steps[t].use_rows[u])];
      const float* want = table.data() + static_cast<int64_t>(k.id) * o.row_floats;
      ASSERT_EQ(0, std::memcmp(uses[static_cast<int64_t>(u)].data_ptr<float>(), want, kDim * 4))
          << "step " << t << " use " << u << " (row " << k.id << ") is not the host's row";
    }
    rows.Update({step.extras.at(0)});
    if (t + 1 < steps.size()) stage(t + 1);
    ASSERT_TRUE(rows.Finish().ok());
  }
  if (stats != nullptr) *stats = rows.stats();
}

// Read-only rows (13 floats, all read): each step staged while the one before runs; every
// use the device gathers is its host row.
void ReadOnDevice(DeviceRows& rows, std::vector<float>& table, const std::vector<Step>& steps) {
  auto stage = [&](size_t t) {
    std::vector<float*> host = Addresses(table, steps[t], 13);
    ASSERT_TRUE(rows.Stage(steps[t].keys, host, {steps[t].use_rows}, {}).ok()) << "step " << t;
  };
  stage(0);
  for (size_t t = 0; t < steps.size(); ++t) {
    DeviceStep step = rows.Begin(/*training=*/false);
    const torch::Tensor uses = step.table.uses.to(torch::kCPU).contiguous();
    for (size_t u = 0; u < steps[t].use_rows.size(); ++u) {
      const RowKey& k = steps[t].keys[static_cast<size_t>(steps[t].use_rows[u])];
      ASSERT_EQ(0, std::memcmp(uses[static_cast<int64_t>(u)].data_ptr<float>(), table.data() + k.id * 13, 13 * 4))
          << "step " << t << " use " << u;
    }
    if (t + 1 < steps.size()) stage(t + 1);
    rows.End();
  }
}

class DeviceRowsTest : public ::testing::TestWithParam<DeviceType> {
 protected:
  void SetUp() override {
    DeviceConfig c;
    c.type = GetParam();
    if (c.type == DeviceType::kCuda && (!BuiltWithCuda() || !torch::cuda::is_available())) {
      GTEST_SKIP() << "no GPU (a CUDA build and a visible device are needed)";
    }
    auto acc = OpenAccelerator(c);
    ASSERT_TRUE(acc.ok()) << acc.status().message();
    acc_ = std::move(*acc);
  }
  std::unique_ptr<Accelerator> acc_;
};

DeviceRowsOptions Options(RowOptimizer opt, uint64_t capacity) {
  DeviceRowsOptions o;
  o.dim = kDim;
  o.row_floats = kDim + RowStateFloats(opt, kDim) + 1;  // a padding float, as tables may have
  o.optimizer = opt;
  o.lr = 0.1f;
  o.capacity_rows = capacity;
  return o;
}

TEST_P(DeviceRowsTest, UpdatesRowsAsTheHostPathDoes) {
  for (RowOptimizer opt : {RowOptimizer::kAdagrad, RowOptimizer::kRowwiseAdagrad, RowOptimizer::kSgd}) {
    const DeviceRowsOptions o = Options(opt, 400);
    const std::vector<Step> steps = MakeSteps(30, 300, 90, 11);
    std::vector<float> host = MakeTable(300, o.row_floats), device = host;
    RunOnHost(host, steps, opt, o.row_floats);
    RunOnDevice(*acc_, o, device, steps);
    double worst = 0;
    for (size_t i = 0; i < host.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(host[i]) - device[i]) /
                                  std::max(1.0, std::abs(static_cast<double>(host[i]))));
    }
    EXPECT_LT(worst, 1e-5) << EnumName(opt);
    EXPECT_NE(host, MakeTable(300, o.row_floats)) << "nothing was trained";
  }
}

TEST_P(DeviceRowsTest, RowsDoNotDependOnTheDeviceCache) {
  const std::vector<Step> steps = MakeSteps(40, 500, 120, 5);
  std::vector<float> small = MakeTable(500, 13), big = small;
  DeviceRowsStats small_stats, big_stats;
  // Two steps' rows at most (everything reloaded) against every row fitting.
  RunOnDevice(*acc_, Options(RowOptimizer::kAdagrad, 2 * 120), small, steps, &small_stats);
  RunOnDevice(*acc_, Options(RowOptimizer::kAdagrad, 500), big, steps, &big_stats);
  EXPECT_EQ(small, big);  // bit for bit
  EXPECT_EQ(small_stats.rows, big_stats.rows);
  EXPECT_LT(big_stats.loads, small_stats.loads);
  EXPECT_LE(big_stats.loads, 500u);  // each row copied in once
  // The device cache planned in shards on the host's cores (steps of at most 120 rows known,
  // room to spare): the same rows, bit for bit.
  std::vector<float> sharded = MakeTable(500, 13);
  DeviceRowsOptions o = Options(RowOptimizer::kAdagrad, 3000);
  o.max_step_rows = 120;
  uint32_t shards = 0;
  RunOnDevice(*acc_, o, sharded, steps, nullptr, &shards);
  EXPECT_EQ(shards, DeviceCacheShards(o));
  if (tbb::this_task_arena::max_concurrency() > 1) {
    EXPECT_GT(shards, 1u);
  }
  EXPECT_EQ(sharded, small);
}

// The oracle: the steps ahead appended to its window keep their rows on the device, which
// copies fewer rows than lru in the same slots; the rows trained are the same bits. Staged with
// nothing appended ahead, a step is appended alone (the window is the staged step).
TEST_P(DeviceRowsTest, TheOracleCopiesFewerRowsAndTrainsTheSameBits) {
  const std::vector<Step> steps = MakeSteps(60, 3000, 120, 9);
  const std::vector<float> start = MakeTable(3000, 13);
  std::vector<float> lru = start, oracle = start, alone = start;
  DeviceRowsStats lru_stats, oracle_stats, alone_stats;
  DeviceRowsOptions o = Options(RowOptimizer::kAdagrad, 400);
  o.max_step_rows = 120;
  RunOnDevice(*acc_, o, lru, steps, &lru_stats);
  o.planner = PlannerKind::kOracle;
  uint32_t shards = 0;
  RunOnDevice(*acc_, o, oracle, steps, &oracle_stats, &shards, kDeviceLookahead);
  RunOnDevice(*acc_, o, alone, steps, &alone_stats);
  EXPECT_EQ(oracle, lru);  // bit for bit
  EXPECT_EQ(alone, lru);
  EXPECT_NE(lru, start) << "nothing was trained";
  EXPECT_LT(oracle_stats.loads, lru_stats.loads);
  uint64_t ahead = 0;  // step t sees min(4, 59 - t) steps after it
  for (uint64_t t = 0; t < steps.size(); ++t) ahead += std::min<uint64_t>(kDeviceLookahead, steps.size() - 1 - t);
  EXPECT_EQ(oracle_stats.lookahead_steps, ahead);
  EXPECT_EQ(alone_stats.lookahead_steps, 0u);
  EXPECT_EQ(shards, DeviceCacheShards(o));
}

TEST_P(DeviceRowsTest, StepsTooLargeForTheSlotsFail) {
  const std::vector<Step> steps = MakeSteps(2, 500, 200, 3);
  std::vector<float> table = MakeTable(500, 13);
  DeviceRows rows(acc_.get(), Options(RowOptimizer::kAdagrad, 50));
  std::vector<float*> host = Addresses(table, steps[0], 13);
  Status s = rows.Stage(steps[0].keys, host, {steps[0].use_rows}, {});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("device.gpu_budget"), std::string::npos) << s.message();
}

// Read-only rows without a device cache (direct): each step's uses are its host rows, every row
// is copied in each step, and the rows never change (End, not Update).
TEST_P(DeviceRowsTest, DirectRowsAreTheHostRowsAndCopiedEveryStep) {
  const std::vector<Step> steps = MakeSteps(12, 500, 120, 8);
  std::vector<float> table = MakeTable(500, 13);
  const std::vector<float> before = table;
  DeviceRowsOptions o = Options(RowOptimizer::kSgd, 2 * 120);
  o.row_floats = 13;
  o.dim = 13;
  o.direct = true;
  DeviceRows rows(acc_.get(), o);
  uint64_t distinct = 0;
  for (const Step& st : steps) distinct += st.keys.size();
  ReadOnDevice(rows, table, steps);
  EXPECT_EQ(table, before);
  EXPECT_EQ(rows.stats().loads, distinct);  // no cache: every row of every step copied
  EXPECT_EQ(rows.stats().shared_steps, 0u);
  // A step larger than the slots is refused.
  const std::vector<Step> big = MakeSteps(1, 500, 1000, 2);
  ASSERT_GT(big[0].keys.size(), 240u);
  std::vector<float*> host = Addresses(table, big[0], 13);
  rows.Reset();
  EXPECT_EQ(rows.Stage(big[0].keys, host, {big[0].use_rows}, {}).code(), StatusCode::kFailedPrecondition);
}

// Steps of about 300 and 1,100 distinct rows (uses 400 and 1,650 over 5,000 rows) alternating,
// in slots for the largest step and a tenth more: a step does not fit beside the running one
// and takes its slots. The rows are those of the run whose slots hold every row, bit for bit,
// with the cache planned in one piece and in shards, and read-only rows copied directly (a
// step larger than its lane's half of the slots takes them all).
TEST_P(DeviceRowsTest, StepsLargerThanTheSlotsBesideTheRunningOneTakeItsSlots) {
  constexpr int64_t kRows = 5000;
  std::vector<Step> steps;
  for (int t = 0; t < 16; ++t) {
    steps.push_back(MakeSteps(1, kRows, t % 2 == 1 ? 1650 : 400, static_cast<uint32_t>(40 + t))[0]);
  }
  uint64_t largest = 0;
  for (const Step& s : steps) largest = std::max<uint64_t>(largest, s.keys.size());
  const uint64_t capacity = largest + largest / 10 + 64;
  const std::vector<float> start = MakeTable(kRows, 13);
  std::vector<float> roomy = start;
  DeviceRowsStats stats;
  RunOnDevice(*acc_, Options(RowOptimizer::kAdagrad, kRows), roomy, steps, &stats);
  EXPECT_EQ(stats.shared_steps, 0u);
  // One cache; shards on 2+ cores (a small max_step_rows leaves room for them).
  for (uint64_t max_step_rows : {uint64_t{0}, uint64_t{16}}) {
    DeviceRowsOptions o = Options(RowOptimizer::kAdagrad, capacity);
    o.max_step_rows = max_step_rows;
    std::vector<float> tight = start;
    uint32_t shards = 0;
    RunOnDevice(*acc_, o, tight, steps, &stats, &shards);
    EXPECT_EQ(tight, roomy) << shards << " shards";
    EXPECT_GE(stats.shared_steps, 8u) << shards << " shards";
    if (max_step_rows > 0 && tbb::this_task_arena::max_concurrency() > 1) {
      EXPECT_GT(shards, 1u);
    }
  }
  // Read-only rows, direct: half the slots a lane; the large steps take them all.
  DeviceRowsOptions o = Options(RowOptimizer::kSgd, capacity);
  o.row_floats = o.dim = 13;
  o.direct = true;
  std::vector<float> table = start;
  DeviceRows rows(acc_.get(), o);
  ReadOnDevice(rows, table, steps);
  EXPECT_EQ(rows.stats().shared_steps, 8u);
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceRowsTest,
                         ::testing::Values(DeviceType::kEmulated, DeviceType::kCuda),
                         [](const auto& p) { return std::string(EnumName(p.param)); });

TEST(DeviceCapacityRowsTest, FromTheBudget) {
  DeviceRowsOptions o = Options(RowOptimizer::kAdagrad, 0);
  DeviceConfig c;
  c.type = DeviceType::kEmulated;
  // No budget: the two steps in flight.
  auto none = DeviceCapacityRows(c, o, 1000, 600, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 1200u);
  // Too small for two steps and their staging: one line naming the numbers.
  c.gpu_budget = Bytes{64 << 10};
  auto small = DeviceCapacityRows(c, o, 1000, 600, 0);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("cannot hold two steps"), std::string::npos);
  // A large budget: the rest, in rows.
  c.gpu_budget = Bytes{1 << 30};
  auto big = DeviceCapacityRows(c, o, 1000, 600, 0);
  ASSERT_TRUE(big.ok());
  const uint64_t row_bytes = static_cast<uint64_t>(o.row_floats) * 4;
  EXPECT_GT(*big, (uint64_t{1} << 30) / row_bytes * 9 / 10);
  EXPECT_LE(*big, (uint64_t{1} << 30) / row_bytes);
  // Never more slots than the table has rows (a direct lane needs its step's rows whatever the size).
  o.total_rows = 5000;
  EXPECT_EQ(*DeviceCapacityRows(c, o, 1000, 600, 0), 5000u);
  o.total_rows = 1000;
  c.gpu_budget = Bytes{0};
  EXPECT_EQ(*DeviceCapacityRows(c, o, 1000, 600, 0), 1000u);
  o.direct = true;
  EXPECT_EQ(*DeviceCapacityRows(c, o, 1000, 600, 0), 1200u);
  o = Options(RowOptimizer::kAdagrad, 0);
  c.gpu_budget = Bytes{1 << 30};
  // planner none keeps the steps in flight only, whatever the budget.
  c.planner = PlannerKind::kNone;
  EXPECT_EQ(*DeviceCapacityRows(c, o, 1000, 600, 0), 1200u);
}

}  // namespace
}  // namespace sluice
