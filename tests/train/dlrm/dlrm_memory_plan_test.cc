#include "train/dlrm/dlrm_memory_plan.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

// The planted-log shapes: 26 tables, dim 16 with the linear term, batch 2048, 1 GiB.
DlrmPlanInput Planted() {
  DlrmPlanInput in;
  in.budget_bytes = 1ull << 30;
  in.batch = 2048;
  in.tables = 26;
  in.width = 17;
  in.row_bytes = 72;
  in.record_bytes = 8 * 26 + 4 * 13 + 4;
  in.dense_params = 500'000;
  in.layer_widths = 16 + 512 + 256 + 512 + 256;
  in.total_rows = 26'000'000;
  in.io_merge_max_bytes = 64 << 10;
  in.sampled_rows_per_step = 30'000;
  return in;
}

TEST(DlrmMemoryPlanTest, FitsTheBudgetAndHoldsTheStepsInFlight) {
  auto p = PlanDlrmMemory(Planted());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_LE(p->predicted_bytes, 1ull << 30);
  EXPECT_GT(p->predicted_bytes, (1ull << 30) * 9 / 10);  // the rest of the budget holds rows
  EXPECT_GE(p->cache_rows, p->min_rows);
  EXPECT_GT(p->staging_rows, 0u);
  EXPECT_EQ(p->window, 16u);
}

TEST(DlrmMemoryPlanTest, RawIdsInRocksDbPlanNoRowFileParts) {
  // model.ids: raw has no dense tables (total_rows 0). The old inline plan read the last row
  // offset of an empty vector here (found by UBSan); the plan must not touch it.
  DlrmPlanInput in = Planted();
  in.total_rows = 0;
  in.raw_ids = true;
  in.rocksdb = true;
  in.kv_bytes = 48ull << 20;
  in.preload_share = 0.25;  // asked for, but a row file feature
  auto p = PlanDlrmMemory(in);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->preload_rows, 0u);
  EXPECT_EQ(p->staging_rows, 0u);
  EXPECT_EQ(p->kv_bytes, 48ull << 20);
  EXPECT_LE(p->predicted_bytes, in.budget_bytes);
}

TEST(DlrmMemoryPlanTest, ReadAheadTakesItsShare) {
  DlrmPlanInput in = Planted();
  in.preload_share = 0.25;
  auto p = PlanDlrmMemory(in);
  ASSERT_TRUE(p.ok());
  EXPECT_GT(p->preload_rows, 0u);
  EXPECT_LE(p->predicted_bytes, in.budget_bytes);
}

TEST(DlrmMemoryPlanTest, TooSmallABudgetNamesWhatOneStepNeeds) {
  DlrmPlanInput in = Planted();
  in.budget_bytes = 20 << 20;
  auto p = PlanDlrmMemory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("cannot hold one step's working set"), std::string::npos);
  in.budget_bytes = 1ull << 30;
  in.cache_rows = 10;  // fewer than a step's rows
  p = PlanDlrmMemory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("rows of the steps in flight"), std::string::npos);
}

TEST(DlrmMemoryPlanTest, TheWindowShrinksToFitItsRing) {
  DlrmPlanInput in = Planted();
  in.budget_bytes = 400ull << 20;
  in.window = 1000;
  auto p = PlanDlrmMemory(in);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_LT(p->window, 1000u);
  EXPECT_LE(p->predicted_bytes, in.budget_bytes);
}

}  // namespace
}  // namespace sluice
