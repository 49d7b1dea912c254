#pragma once
// One link-prediction epoch through the pipeline (prefetch/block_pipeline.h): the sampler stage
// samples each step's queries, negatives and unique rows ahead of compute, reading each buffer
// state's edges through an EdgeReader a state ahead; the block prefetcher plans the partitions
// and runs their io up to run_ahead steps ahead; compute trains (train/lp/lp_step.h).

#include <cstdint>
#include <vector>

#include "cache/block_cache.h"
#include "cache/planner.h"
#include "common/status.h"
#include "prefetch/edge_schedule.h"
#include "prefetch/run_ahead_ring.h"
#include "sampler/link_batch.h"
#include "sampler/link_neighbors.h"
#include "train/lp/lp_config.h"
#include "train/lp/lp_step.h"
#include "train/task.h"

namespace sluice {

// What the epochs of a run spent, summed.
struct LpEpochStats {
  double wait_s = 0;  // compute waiting for the pipeline (samples, edges, io)
  StageTime sampler, edges, plan, io;
  PlanStats plan_stats;
  std::vector<uint64_t> epoch_start_loads;  // per epoch trained from its start: kPassHeadSteps' loads
  double device_wall_s = 0;  // wall time of the epochs on a device
};

struct LpEpochContext {
  const LpConfig& config;
  const NodeTableLayout& layout;
  const EdgeSchedule& schedule;
  LinkBatchSampler& sampler;  // used by the sampler stage only
  LpStepper& stepper;
  BlockCache* cache = nullptr;        // out of core
  std::byte* memory_table = nullptr;  // in memory (every block, in order; null when data parallel)
  uint32_t slots = 0;                 // out of core: cache slots
  LpEpochStats& stats;
  DeviceRows* device_rows = nullptr;  // a device run's (the stepper uses it)
  // model.encoder: each step's neighbourhoods, drawn in the sampler stage from every training
  // edge among the step's resident partitions (read when its buffer state begins; every
  // training edge under the shuffle).
  LinkNeighborSampler* neighbors = nullptr;
};

// Trains epoch `epoch` from step `first_step`. When the sink asks to stop, the pipeline is
// stopped (every issued io complete) and the outcome says where to resume; the slots may still
// hold dirty blocks (flush them before reading the table file).
Result<EpochOutcome> TrainLpEpoch(LpEpochContext& ctx, uint64_t epoch, uint64_t first_step,
                                  StepSink& sink);

}  // namespace sluice
