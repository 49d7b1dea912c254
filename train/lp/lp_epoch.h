#pragma once
// One link-prediction epoch through the pipeline: the partition prefetcher (planner + io) runs
// up to run_ahead steps ahead of compute, the next buffer state's edges are read on another
// worker while the current one trains, and the next step is sampled on another worker while
// this one trains (not across a change of buffer state: its edges come first).

#include <cstdint>
#include <vector>

#include "cache/block_cache.h"
#include "cache/planner.h"
#include "common/status.h"
#include "prefetch/block_prefetcher.h"
#include "train/lp/lp_config.h"
#include "train/lp/lp_schedule.h"
#include "train/lp/lp_step.h"
#include "train/task.h"

namespace sluice {

// What the epochs of a run spent, summed.
struct LpEpochStats {
  double wait_s = 0;    // compute waiting for io
  double sample_s = 0;  // compute waiting for (or running) the step's sampling
  double edges_s = 0;   // compute waiting for a buffer state's edges
  PlanStats plan;
  StageTime plan_time, io_time;
};

struct LpEpochContext {
  const LpConfig& config;
  const NodeTableLayout& layout;
  const LpSchedule& schedule;
  LpStepper& stepper;
  BlockCache* cache = nullptr;           // out of core
  std::byte* memory_table = nullptr;     // in memory (every block, in order)
  uint32_t slots = 0;                    // out of core: cache slots
  LpEpochStats& stats;
};

// Trains epoch `epoch` from step `first_step`. When the sink asks to stop, the prefetcher is
// stopped (every issued io complete) and the outcome says where to resume; the slots may still
// hold dirty blocks (flush them before reading the table file).
Result<EpochOutcome> TrainLpEpoch(LpEpochContext& ctx, uint64_t epoch, uint64_t first_step,
                                  StepSink& sink);

}  // namespace sluice
