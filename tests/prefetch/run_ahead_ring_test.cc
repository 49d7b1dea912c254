// RunAheadRing and SamplerStage: the one protocol between a pipeline's stages and compute.
// Capacity bounds how far ahead a stage gets, a step is ready once every stage published it,
// io that needs step t's final rows waits for Computed(t), End/Stop/Abort unblock every wait.
// Runs under TSan (torch-free).

#include "prefetch/run_ahead_ring.h"

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "prefetch/sampler_stage.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(RunAheadRingTest, CapacityBoundsHowFarTheFirstStageGetsAhead) {
  RunAheadRing ring(3, 1);
  std::atomic<uint64_t> reserved{0};
  std::thread stage([&] {
    for (uint64_t t = 0; t < 10; ++t) {
      ASSERT_EQ(ring.Reserve(t), RingWait::kOk);
      reserved = t + 1;
      ring.Publish(0, t);
    }
    ring.End(0, 10);
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(reserved.load(), 3u);  // slots 0..2, and step 3 waits for step 0 to compute
  for (uint64_t t = 0; t < 10; ++t) {
    ASSERT_TRUE(ring.WaitReady(t).ok());
    EXPECT_LE(reserved.load(), t + 3);
    ring.Computed(t);
  }
  stage.join();
  EXPECT_EQ(ring.WaitReady(10).code(), StatusCode::kOutOfRange);
}

TEST(RunAheadRingTest, AStepIsReadyOnceEveryStageHasPublishedIt) {
  RunAheadRing ring(8, 2);
  ring.Publish(0, 0);
  ring.Publish(0, 1);
  std::atomic<bool> ready{false};
  std::thread compute([&] {
    EXPECT_TRUE(ring.WaitReady(0).ok());
    ready = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ready.load());
  EXPECT_EQ(ring.WaitPublished(0, 1), RingWait::kOk);
  ring.Publish(1, 0);
  compute.join();
  EXPECT_TRUE(ready.load());
  ring.End(0, 2);
  EXPECT_EQ(ring.WaitPublished(0, 2), RingWait::kEnded);
}

TEST(RunAheadRingTest, WaitComputedHoldsIoUntilComputeFinishedTheStep) {
  RunAheadRing ring(4, 1);
  std::atomic<bool> passed{false};
  std::thread io([&] {
    EXPECT_EQ(ring.WaitComputed(2), RingWait::kOk);
    passed = true;
  });
  ring.Computed(0);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(passed.load());
  ring.Computed(1);
  io.join();
  EXPECT_TRUE(passed.load());
}

TEST(RunAheadRingTest, StopLetsAStageFinishAndAbortCarriesTheError) {
  {
    RunAheadRing ring(1, 1);
    ASSERT_EQ(ring.Reserve(0), RingWait::kOk);
    std::thread stage([&] { EXPECT_EQ(ring.WaitComputed(1), RingWait::kStopped); });
    std::this_thread::sleep_for(10ms);
    ring.Stop();
    stage.join();
    EXPECT_EQ(ring.Reserve(5), RingWait::kStopped);
    EXPECT_EQ(ring.WaitReady(0).code(), StatusCode::kAborted);
  }
  {
    RunAheadRing ring(2, 2);
    std::thread compute([&] {
      Status s = ring.WaitReady(0);
      EXPECT_EQ(s.code(), StatusCode::kIoError);
      EXPECT_EQ(s.message(), "disk gone");
    });
    std::this_thread::sleep_for(10ms);
    ring.Abort(IoError("disk gone"));
    compute.join();
    EXPECT_EQ(ring.WaitComputed(1), RingWait::kAborted);
    EXPECT_EQ(ring.WaitPublished(1, 0), RingWait::kAborted);
  }
}

TEST(SamplerStageTest, FillsSlotsAheadInOrderAndEndsWithTheSource) {
  RunAheadRing ring(4, 1);
  SamplerStage<std::vector<int>> stage(&ring, [](uint64_t t, std::vector<int>& out) -> Result<bool> {
    if (t >= 50) return false;
    out.assign(3, static_cast<int>(t));
    return true;
  });
  stage.Start();
  for (uint64_t t = 0; t < 50; ++t) {
    ASSERT_TRUE(ring.WaitReady(t).ok());
    EXPECT_EQ(stage.slot(t), std::vector<int>(3, static_cast<int>(t)));
    ring.Computed(t);
  }
  EXPECT_EQ(ring.WaitReady(50).code(), StatusCode::kOutOfRange);
  stage.Join();
  EXPECT_GT(stage.time().busy_s, 0.0);
}

TEST(SamplerStageTest, AFillErrorAbortsThePass) {
  RunAheadRing ring(4, 1);
  SamplerStage<int> stage(&ring, [](uint64_t t, int& out) -> Result<bool> {
    if (t == 3) return Corruption("record 3 is damaged");
    out = static_cast<int>(t);
    return true;
  });
  stage.Start();
  uint64_t t = 0;
  Status s;
  for (; t < 10; ++t) {
    s = ring.WaitReady(t);
    if (!s.ok()) break;
    ring.Computed(t);
  }
  EXPECT_LE(t, 3u);  // an aborted pass fails at once, whatever was published before
  EXPECT_EQ(s.message(), "record 3 is damaged");
  stage.Join();
}

// Compute's side of a pass with a task-mode sampler: help, wait, check, computed, kick.
// Returns the number of steps it saw ready and the status that ended the pass.
template <class Payload, class Check>
std::pair<uint64_t, Status> ComputeLoop(RunAheadRing& ring, SamplerStage<Payload>& stage,
                                        uint64_t steps, Check check) {
  for (uint64_t t = 0; t <= steps; ++t) {
    stage.Help(t);
    Status s = ring.WaitReady(t);
    if (!s.ok()) return {t, s};
    check(t, stage.slot(t));
    ring.Computed(t);
    stage.Kick();
  }
  return {steps + 1, Status::Ok()};
}

TEST(SamplerStageTest, TaskModeFillsEveryStepInOrderWithinCapacityAtOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    RunAheadRing ring(3, 1);
    std::atomic<uint64_t> computed{0};
    std::atomic<uint64_t> too_far{0};
    SamplerStage<uint64_t> stage(
        &ring,
        [&](uint64_t t, uint64_t& out) -> Result<bool> {
          if (t >= 2000) return false;
          if (t >= computed.load() + 3) too_far.fetch_add(1);
          out = t * 7;
          return true;
        },
        StageMode::kTask);
    stage.Start();
    auto [seen, status] = ComputeLoop(ring, stage, 2000, [&](uint64_t t, uint64_t v) {
      EXPECT_EQ(v, t * 7);
      computed.store(t + 1);
    });
    EXPECT_EQ(seen, 2000u) << threads << " threads";
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
    stage.Join();
    EXPECT_EQ(too_far.load(), 0u);
    EXPECT_GT(stage.time().busy_s, 0.0);
  }
}

TEST(SamplerStageTest, TaskModeFeedsAStageThreadAndStopsOnAnError) {
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    RunAheadRing ring(4, 2);
    SamplerStage<int> stage(
        &ring,
        [](uint64_t t, int& out) -> Result<bool> {
          if (t == 500) return Corruption("record 500 is damaged");
          out = static_cast<int>(t);
          return true;
        },
        StageMode::kTask);
    std::thread io([&] {  // stage 1 publishes what stage 0 published, like a prefetcher
      for (uint64_t t = 0; ring.WaitPublished(0, t) == RingWait::kOk; ++t) ring.Publish(1, t);
    });
    stage.Start();
    auto [seen, status] = ComputeLoop(ring, stage, 1000, [](uint64_t t, int v) {
      EXPECT_EQ(v, static_cast<int>(t));
    });
    EXPECT_LE(seen, 500u);
    EXPECT_EQ(status.message(), "record 500 is damaged");
    stage.Join();
    io.join();
  }
}

TEST(RunAheadRingTest, TryReserveSaysFullInsteadOfWaiting) {
  RunAheadRing ring(2, 1);
  EXPECT_EQ(ring.TryReserve(1), RingWait::kOk);
  EXPECT_EQ(ring.TryReserve(2), RingWait::kFull);
  ring.Computed(0);
  EXPECT_EQ(ring.TryReserve(2), RingWait::kOk);
  ring.Stop();
  EXPECT_EQ(ring.TryReserve(2), RingWait::kStopped);
}

}  // namespace
}  // namespace sluice
