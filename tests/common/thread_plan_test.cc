#include "common/thread_plan.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

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

// Pipeline threads carry their role's name (top -H, perf --sort comm), cut to the kernel's 15
// characters.
TEST(ThreadPlanTest, ThreadsTakeTheirNames) {
  std::string name, cut;
  std::thread([&] {
    char buf[32] = {};
    NameThisThread("sluice-rows");
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    name = buf;
    NameThisThread("sluice-a-name-far-too-long");
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    cut = buf;
  }).join();
  EXPECT_EQ(name, "sluice-rows");
  EXPECT_EQ(cut, "sluice-a-name-f");
}

}  // namespace
}  // namespace sluice
