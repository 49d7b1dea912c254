#pragma once
// BlockPrefetcher: the planner + io stage of a pipeline for block-granular training (link
// prediction's partitions), one stage of a RunAheadRing.
//
// A block source describes step after step: which blocks it needs (a pure function of the
// schedule, so the planner may look far ahead of the sampler). The stage's thread appends them
// to the incremental planner, plans each step, and runs its io through the block cache, up to
// `run_ahead` steps ahead of compute; then publishes the step. Compute waits on the ring
// (WaitReady) before it touches step t's blocks and calls Computed(t) after its updates are in
// the slots.
//
// Why this is safe: step t is planned with protect_steps = run_ahead, so its evictions only hit
// blocks last used before step t - run_ahead; its io is issued only once compute has finished
// that step (their dirty bits are final). Its loads land in slots no step in flight uses. So
// compute and io touch disjoint slots, and a write-back always carries the final rows. When
// compute stops for good (RunAheadRing::Stop) the step being planned still runs its io, so the
// cache stays consistent and may be flushed; an abort leaves at once (the pass failed).
//
// The planner adopts the blocks the cache holds when the pass starts (a previous pass's, e.g.
// the last buffer state of the previous epoch), so a pass that begins with them loads nothing.
//
// Bounded: run_ahead steps of io, window_steps of planning. Records busy and wait time.

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "cache/block_cache.h"
#include "cache/planner.h"
#include "common/status.h"
#include "prefetch/run_ahead_ring.h"
#include "storage/io_session.h"

namespace sluice {

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

  // The stage publishes as `stage` of `ring` (both must outlive it).
  BlockPrefetcher(BlockCache* cache, PrefetcherOptions options, StepSource source,
                  RunAheadRing* ring, uint32_t stage);
  // Aborts the ring if the stage still runs, then joins.
  ~BlockPrefetcher();
  BlockPrefetcher(const BlockPrefetcher&) = delete;
  BlockPrefetcher& operator=(const BlockPrefetcher&) = delete;

  void Start();
  // Waits for the thread (the ring ended, stopped or aborted); returns the stage's own error.
  Status Join();
  // Writes back every dirty block (after Join, or before Start).
  Status FlushDirty();

  StageTime plan_time() const { return plan_; }
  StageTime io_time() const { return io_; }
  const PlanStats& plan_stats() const { return plan_stats_; }
  // Blocks loaded for the pass's first kPassHeadSteps steps.
  uint64_t head_loads() const { return head_loads_; }

 private:
  Status RunSteps();
  // Appends steps to the planner until it can plan the next one; false when the source ended.
  bool Feed(HeapPlanner& planner, uint64_t& appended, bool& more);

  BlockCache* cache_;
  PrefetcherOptions options_;
  StepSource source_;
  RunAheadRing* ring_;
  uint32_t stage_;
  std::unique_ptr<IoSession> io_session_;
  std::thread thread_;
  Status status_;  // the thread's result, read after Join
  StageTime plan_, io_;
  PlanStats plan_stats_;
  uint64_t head_loads_ = 0;
};

}  // namespace sluice
