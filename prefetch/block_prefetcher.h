#pragma once
// BlockPrefetcher: the pipeline's sample -> plan -> io stages for block-granular training.
//
// A producer (the sampler stage) describes step after step: which blocks it needs. One thread
// appends them to the incremental planner, plans each step, and runs its io through the block
// cache, up to `run_ahead` steps ahead of compute. Compute calls WaitReady(t) before it touches
// step t's blocks and Computed(t) after its updates are in the slots.
//
// Why this is safe: step t is planned with protect_steps = run_ahead, so its evictions only hit
// blocks last used before step t - run_ahead; its io is issued only once compute has finished
// that step (their dirty bits are final). Its loads land in slots no step in flight uses. So
// compute and io touch disjoint slots, and a write-back always carries the final rows.
//
// Everything is bounded (run_ahead steps of plan and io) and every stage records busy and wait
// time. An error in any stage stops the pipeline; WaitReady returns it. Abort() stops it from
// outside (Ctrl-C).

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/block_cache.h"
#include "cache/planner.h"
#include "common/status.h"
#include "storage/io_session.h"

namespace sluice {

struct StageTime {
  double busy_s = 0;
  double wait_s = 0;
};

struct PrefetcherOptions {
  PlannerKind planner = PlannerKind::kOracle;
  uint64_t window_steps = 1024;
  uint32_t run_ahead = 4;  // steps whose io may be issued before compute reaches them
  IoConfig io;
};

class BlockPrefetcher {
 public:
  // Fills `blocks` with step t's blocks; returns false when there are no more steps.
  using StepSource = std::function<bool(uint64_t t, std::vector<BlockId>& blocks)>;

  BlockPrefetcher(BlockCache* cache, PrefetcherOptions options, StepSource source);
  ~BlockPrefetcher();
  BlockPrefetcher(const BlockPrefetcher&) = delete;
  BlockPrefetcher& operator=(const BlockPrefetcher&) = delete;

  Status Start();
  // Blocks until step t's blocks are resident (or the pipeline failed: its error).
  Status WaitReady(uint64_t t);
  // Compute has finished step t (its updates are in the slots, MarkDirty done).
  void Computed(uint64_t t);
  // Stops the io thread after the steps already issued; then FlushDirty may run.
  Status Stop();
  void Abort();
  // Writes back every dirty block (call after Stop, or before Start).
  Status FlushDirty();

  StageTime plan_time() const { return plan_; }
  StageTime io_time() const { return io_; }
  double compute_wait_s() const { return compute_wait_s_; }
  const PlanStats& plan_stats() const { return plan_stats_; }

 private:
  void Run();
  Status RunSteps();

  BlockCache* cache_;
  PrefetcherOptions options_;
  StepSource source_;
  std::unique_ptr<IoSession> io_session_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t ready_ = 0;     // steps [0, ready_) have their blocks resident
  uint64_t computed_ = 0;  // steps [0, computed_) have computed
  bool stop_ = false;
  bool finished_ = false;  // the io thread has exited
  uint64_t total_steps_ = ~uint64_t{0};
  Status error_;
  StageTime plan_, io_;
  double compute_wait_s_ = 0;
  PlanStats plan_stats_;
};

}  // namespace sluice
