#pragma once
// The lookahead's cost model (recommendation, storage.planner: auto): which of the oracle cache
// and read-ahead sweeps a run uses, chosen at start-up from the disk (measured: random 4 KiB
// reads per second and sequential bandwidth, storage/disk_probe.h) and the run's own first
// steps (an LRU simulation of the planned cache gives the rows each step loads).
//
//   without read-ahead, a step's disk reads are random: reads / (random reads per second),
//   where a load reads the disk only if its row was written back before (a fresh table's rows
//   are made from the seed) and does not still wait in the write-back buffer (evicted rows are
//   staged there, and a load takes a staged row without io);
//   with it, each step reads 1/horizon of the row file in large sequential extents:
//   table bytes / horizon / bandwidth, plus the reads the read-ahead memory cannot hold as
//   random reads (each region is read once per horizon, so a row waits half a horizon on
//   average: it holds reads x horizon / 2 rows, or covers that share of the reads).
// The cheaper one wins. With read-ahead the planner is LRU: loads come from read-ahead memory,
// so the oracle's fewer loads save little, while LRU keeps more rows (no window ring) and plans
// faster. Without it the oracle: every load it avoids is a random read saved.
//
// Both pay for write-backs: every row a step evicts was updated, so it goes to the write-back
// buffer, whose sweeps read and rewrite a region's touched extents. At worst the file is read
// and rewritten once per buffer's worth of write-backs: 2 x table bytes x min(1, evictions a
// step / buffer rows) / bandwidth (WriteBackSeconds). Without it a plan that starves the buffer
// (the oracle's window ring takes its memory at a tight budget) looked free of io and swept the
// file every step. Without read-ahead the buffer is the oracle's (its plan at the shortest
// window), not LRU's.
//
// Compute time per step is not in the model: loads that a pipeline hides behind compute still
// cost this 2-core machine's CPU in completions, and the measured ranking of the variants
// followed their disk requests (docs/benchmarks.md). The model counts every row as written
// (the steady state after the first pass); fresh tables read less at first.

#include <cstdint>
#include <string>
#include <vector>

#include "cache/planner.h"
#include "cache/row_cache.h"
#include "storage/disk_probe.h"

namespace sluice {

struct LookaheadInput {
  std::vector<std::vector<RowKey>> steps;  // the first steps' distinct rows (a sample of the rows: see below)
  uint32_t sample_every = 1;           // steps hold the rows whose hash falls in 1 of this many
  bool fresh = true;                   // no row written yet (else every row was)
  uint64_t cache_rows_plain = 0;       // the oracle's cache without read-ahead
  uint64_t staged_rows_plain = 0;      // its write-back buffer (0: write-backs not modelled)
  uint64_t cache_rows_read_ahead = 0;  // LRU's cache with read-ahead's share taken
  uint64_t staged_rows_read_ahead = 0;
  uint64_t read_ahead_rows = 0;        // rows read-ahead can hold
  uint32_t horizon = 32;
  uint64_t table_bytes = 0;
  DiskProbe disk;
};

struct LookaheadChoice {
  bool read_ahead = false;
  PlannerKind planner = PlannerKind::kOracle;
  double reads_plain = 0, reads_read_ahead = 0;  // disk reads per step, simulated
  double evictions_plain = 0, evictions_read_ahead = 0;  // write-backs per step, simulated
  double random_s = 0, read_ahead_s = 0;         // predicted io per step, write-backs included
  double write_back_plain_s = 0, write_back_read_ahead_s = 0;  // of which write-back sweeps
  std::string reason;                            // one line for the summary
  DiskProbe disk;                                // what the model was given
  uint64_t read_ahead_rows = 0;
};

// Disk reads per step of an LRU cache of `capacity` rows over `steps` (each step's rows made
// resident together) whose evicted rows wait in a first-in-first-out buffer of `staged` rows
// (a load of a staged row reads nothing), averaged over the second half (the first warms the
// cache). A load reads when its row was evicted before, or, unless `fresh`, on its first use.
double SimulateLruReads(const std::vector<std::vector<RowKey>>& steps, uint64_t capacity, uint64_t staged,
                        bool fresh = false, double* evictions = nullptr);
// `evictions`, when given: rows evicted per step over the same steps (each a write-back).

// Seconds a step's write-backs cost in sweeps: `evictions` rows a step into a buffer of
// `staged` rows over a row file of `table_bytes`, read and written at `bytes_per_s`. 0 when
// `staged` is 0 (not modelled).
double WriteBackSeconds(double evictions, uint64_t staged, uint64_t table_bytes, double bytes_per_s);
// Whether `key` is in the spatial sample of 1 in `every` rows (SHARDS: the rows whose hash falls
// in the sample keep their reuse pattern, so a cache of capacity / every over them misses at
// the rate the whole cache would).
bool InRowSample(const RowKey& key, uint32_t every);

LookaheadChoice ChooseLookahead(const LookaheadInput& in);

// Rows an oracle cache of `capacity` rows loads per step over `steps` (distinct rows each), its
// window `window` steps and `protect` steps in flight: the real RowCache plans them, averaged
// over the second half (the first warms the cache). Infinity when the cache cannot hold the
// steps in flight.
double SimulateOracleLoads(const std::vector<std::vector<RowKey>>& steps, uint64_t capacity, uint32_t window,
                           uint32_t protect);

// The oracle's window sized by the budget (storage.window: 0): among the candidate windows whose
// ring fits the budget, each with the cache the rest of the budget holds, the one whose
// simulated loads are fewest; a longer window must save at least 1% of the loads to win (its
// ring costs memory and planning time).
struct WindowCandidate {
  uint32_t window = 0;
  uint64_t cache_rows = 0;  // the plan's cache with that window's ring
  double loads = 0;         // per step, simulated (filled by ChooseWindow)
  uint64_t staged_rows = 0;  // the plan's write-back buffer
  double cost_s = 0;         // predicted io per step (filled by ChooseWindow when given a disk)
};
struct WindowChoice {
  uint32_t window = 0;
  std::vector<WindowCandidate> candidates;
  std::string reason;  // one line for the summary
};
// `sample_every`: steps hold the rows of 1 in that many (InRowSample); capacities are scaled.
// Given a disk (`disk` with a bandwidth, `table_bytes`), a window's cost is its io per step: its
// loads as random reads and its evictions (as many as its loads) in write-back sweeps
// (WriteBackSeconds), and the cheapest wins (by at least 1%); without one, the fewest loads.
WindowChoice ChooseWindow(const std::vector<std::vector<RowKey>>& steps, uint32_t sample_every, uint32_t protect,
                          std::vector<WindowCandidate> candidates, const DiskProbe& disk = {},
                          uint64_t table_bytes = 0);

}  // namespace sluice
