#include "common/thread_plan.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(ThreadPlanTest, DefaultsUseEveryCore) {
  ThreadPlan plan = MakeThreadPlan(ThreadConfig{}, 8);
  EXPECT_EQ(plan.total, 8);
  EXPECT_EQ(plan.compute_threads, 8);
  EXPECT_EQ(plan.blas_threads, 8);
  EXPECT_EQ(plan.tbb_threads, 8);
}

TEST(ThreadPlanTest, OneSettingDecidesTheRest) {
  ThreadConfig config;
  config.total = 2;
  ThreadPlan plan = MakeThreadPlan(config, 16);
  EXPECT_EQ(plan.total, 2);
  EXPECT_EQ(plan.compute_threads, 2);
  EXPECT_EQ(plan.tbb_threads, 2);
  config.compute = 1;
  config.tbb = 1;
  plan = MakeThreadPlan(config, 16);
  EXPECT_EQ(plan.compute_threads, 1);
  EXPECT_EQ(plan.blas_threads, 1);
  EXPECT_EQ(plan.tbb_threads, 1);
  EXPECT_NE(plan.ToString().find("TBB 1"), std::string::npos);
}

}  // namespace
}  // namespace sluice
