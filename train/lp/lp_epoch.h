#pragma once
// One link-prediction epoch through the pipeline (prefetch/block_pipeline.h): the sampler stage
// samples each step's queries, negatives and unique rows ahead of compute, reading each buffer
// state's edges through an EdgeReader a state ahead; the block prefetcher plans the partitions
// and runs their io up to run_ahead steps ahead; compute trains (train/lp/lp_step.h).
// Data parallel out of core (train.virtual_shards, storage.mode: out_of_core) the rows go
// through a row cache instead (prefetch/row_pipeline.h): each step's rows this process owns are
// its keys, planned (the oracle's window) and loaded ahead; the others come from their owners.

#include <cstdint>
#include <vector>

#include "cache/block_cache.h"
#include "cache/planner.h"
#include "cache/row_cache.h"
#include "prefetch/row_prefetcher.h"
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
  uint64_t rows_loaded = 0, rows_written = 0;  // the row cache's
};

// Data parallel out of core: this process's rows through a row cache (keys: table rows).
struct LpRowCache {
  RowCache* cache = nullptr;
  std::byte* arena = nullptr;
  RowBacking* backing = nullptr;
  uint32_t run_ahead = 0;
  uint64_t own_begin = 0, own_end = 0;  // the table rows this process owns
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
  const LpRowCache* rows = nullptr;  // data parallel out of core (the global shuffle only)
};

// Trains epoch `epoch` from step `first_step`. When the sink asks to stop, the pipeline is
// stopped (every issued io complete) and the outcome says where to resume; the slots may still
// hold dirty blocks (flush them before reading the table file).
Result<EpochOutcome> TrainLpEpoch(LpEpochContext& ctx, uint64_t epoch, uint64_t first_step,
                                  StepSink& sink);

}  // namespace sluice
