// cache_bench: loads and bytes read by the oracle, LRU, static and none planners on Zipf traces
// and on access traces derived from real datasets, all measured in one run; plus the planner's
// speed and a window-size sweep; first the device row cache's planning speed, one cache and in
// shards (--row-cache-only: those alone). Prints markdown tables.
//
//   cache_bench [--universe 1000000] [--length-factor 20] [--step 2048] [--row-bytes 64]
//               [--datasets ../shared/datasets] [--row-cache-only]

#include <CLI/CLI.hpp>
#include <tbb/task_arena.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/partition_order.h"
#include "cache/planner.h"
#include "cache/row_cache.h"
#include "cache/sharded_row_cache.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  uint32_t universe = 1'000'000;
  uint32_t length_factor = 20;
  uint32_t step = 2048;
  uint32_t row_bytes = 64;  // a dim-16 float32 row
  std::string datasets = "../shared/datasets";
};

AccessTrace ZipfTrace(uint32_t universe, uint64_t accesses, uint32_t step, double alpha,
                      uint64_t seed) {
  std::vector<double> cdf(universe);
  double sum = 0;
  for (uint32_t r = 0; r < universe; ++r) cdf[r] = sum += std::pow(r + 1.0, -alpha);
  std::vector<BlockId> rank_to_block(universe);
  std::iota(rank_to_block.begin(), rank_to_block.end(), 0u);
  std::mt19937_64 rng(seed);
  std::shuffle(rank_to_block.begin(), rank_to_block.end(), rng);  // hot ids scattered
  std::uniform_real_distribution<double> u(0, sum);
  AccessTrace trace(universe);
  std::vector<BlockId> blocks(step);
  for (uint64_t done = 0; done < accesses; done += step) {
    for (auto& b : blocks) {
      const auto r = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      b = rank_to_block[std::min<size_t>(static_cast<size_t>(r), universe - 1)];
    }
    trace.AddStep(blocks, true);
  }
  return trace;
}

struct Row {
  std::string policy;
  uint64_t loads = 0;
  uint64_t write_backs = 0;
  double seconds = 0;
};

Row Run(const AccessTrace& trace, PlannerKind kind, uint32_t capacity, uint64_t window) {
  PlannerOptions options;
  options.capacity_blocks = capacity;
  options.window_steps = window;
  auto start = Clock::now();
  auto plan = MakePlan(trace, kind, options);
  Row row;
  row.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  SLUICE_CHECK(plan.ok(), "%s", plan.status().ToString().c_str());
  row.policy = PlannerKindName(kind);
  if (kind == PlannerKind::kOracle) {
    row.policy += window == kWholeTrace ? " (W=all)" : " (W=" + std::to_string(window) + ")";
  }
  row.loads = plan->stats.loads;
  row.write_backs = plan->stats.write_backs;
  return row;
}

void Table(const char* title, const AccessTrace& trace, const std::vector<double>& fractions,
           uint32_t row_bytes) {
  std::printf("\n### %s\n\n%llu steps, %llu accesses, %u blocks (rows of %u B)\n\n", title,
              static_cast<unsigned long long>(trace.num_steps()),
              static_cast<unsigned long long>(trace.num_accesses()), trace.num_blocks(),
              row_bytes);
  std::printf("| capacity | policy | loads | MB read | write-backs | vs lru | plan Maccess/s |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|\n");
  uint64_t largest_step = 0;
  {
    std::vector<uint64_t> stamp(trace.num_blocks(), 0);
    for (uint64_t t = 0; t < trace.num_steps(); ++t) {
      uint64_t distinct = 0;
      for (BlockId b : trace.step(t)) distinct += stamp[b] != t + 1 ? (stamp[b] = t + 1, 1) : 0;
      largest_step = std::max(largest_step, distinct);
    }
  }
  for (double f : fractions) {
    const auto capacity = static_cast<uint32_t>(f * trace.num_blocks());
    if (capacity < largest_step) {
      std::printf("| %.0f%% | (a step needs %llu blocks, more than %u) | | | | | |\n", f * 100,
                  static_cast<unsigned long long>(largest_step), capacity);
      continue;
    }
    std::vector<Row> rows = {Run(trace, PlannerKind::kOracle, capacity, kWholeTrace),
                             Run(trace, PlannerKind::kOracle, capacity, 200),
                             Run(trace, PlannerKind::kLru, capacity, 0),
                             Run(trace, PlannerKind::kStatic, capacity, 0),
                             Run(trace, PlannerKind::kNone, capacity, 0)};
    const double lru = static_cast<double>(rows[2].loads);
    for (const Row& r : rows) {
      std::printf("| %.0f%% | %s | %llu | %.1f | %llu | %.3f | %.1f |\n", f * 100,
                  r.policy.c_str(), static_cast<unsigned long long>(r.loads),
                  static_cast<double>(r.loads) * row_bytes / 1e6,
                  static_cast<unsigned long long>(r.write_backs),
                  static_cast<double>(r.loads) / lru,
                  static_cast<double>(trace.num_accesses()) / r.seconds / 1e6);
    }
    std::fflush(stdout);
  }
}

void Sweep(const AccessTrace& trace, uint32_t capacity) {
  std::printf("\n### Window sweep: Zipf 1.0, capacity 10%%\n\n");
  std::printf("| window (steps) | loads | vs lru | plan Maccess/s |\n|---:|---:|---:|---:|\n");
  const double lru = static_cast<double>(Run(trace, PlannerKind::kLru, capacity, 0).loads);
  for (uint64_t w : {uint64_t{0}, uint64_t{1}, uint64_t{10}, uint64_t{50}, uint64_t{200},
                     uint64_t{1000}, kWholeTrace}) {
    Row r = Run(trace, PlannerKind::kOracle, capacity, w);
    std::printf("| %s | %llu | %.3f | %.1f |\n",
                w == kWholeTrace ? "all" : std::to_string(w).c_str(),
                static_cast<unsigned long long>(r.loads), static_cast<double>(r.loads) / lru,
                static_cast<double>(trace.num_accesses()) / r.seconds / 1e6);
    std::fflush(stdout);
  }
}

// FB15k-237: entity accesses of a seeded shuffle of the train triples, 1000 per step (heads
// and tails) plus 500 shared uniform negatives per step, for `epochs` epochs.
bool Fb15kTrace(const std::string& dir, int epochs, AccessTrace* out) {
  std::unordered_map<std::string, uint32_t> ids;
  std::ifstream dict(dir + "/entities.dict");
  std::string line;
  while (std::getline(dict, line)) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) ids.emplace(line.substr(tab + 1), static_cast<uint32_t>(ids.size()));
  }
  gzFile gz = gzopen((dir + "/train.txt.gz").c_str(), "rb");
  if (ids.empty() || gz == nullptr) return false;
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  char buffer[4096];
  while (gzgets(gz, buffer, sizeof(buffer)) != nullptr) {
    std::istringstream fields(buffer);
    std::string h, r, t;
    if (fields >> h >> r >> t) edges.emplace_back(ids.at(h), ids.at(t));
  }
  gzclose(gz);
  const auto entities = static_cast<uint32_t>(ids.size());
  *out = AccessTrace(entities);
  std::mt19937_64 rng(2026);
  std::vector<BlockId> step;
  for (int e = 0; e < epochs; ++e) {
    std::shuffle(edges.begin(), edges.end(), rng);
    for (size_t first = 0; first < edges.size(); first += 1000) {
      step.clear();
      for (size_t i = first; i < std::min(edges.size(), first + 1000); ++i) {
        step.push_back(edges[i].first);
        step.push_back(edges[i].second);
      }
      for (int n = 0; n < 500; ++n) step.push_back(static_cast<BlockId>(rng() % entities));
      out->AddStep(step, true);
    }
  }
  return true;
}

// Criteo sample: the 26 categorical ids of each sample, one row per distinct (feature, value)
// (an empty value is its own row), batches of 128 samples, seeded shuffles per epoch.
bool CriteoTrace(const std::string& path, int epochs, AccessTrace* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::unordered_map<std::string, uint32_t> ids;
  std::vector<std::vector<BlockId>> samples;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<BlockId> cats;
    size_t start = 0;
    for (int col = 0; col < 40; ++col) {
      const size_t tab = line.find('\t', start);
      const std::string field = line.substr(start, tab == std::string::npos ? tab : tab - start);
      if (col >= 14) {
        auto [it, added] = ids.emplace(std::to_string(col) + ":" + field,
                                       static_cast<uint32_t>(ids.size()));
        cats.push_back(it->second);
      }
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (cats.size() == 26) samples.push_back(std::move(cats));
  }
  *out = AccessTrace(static_cast<uint32_t>(ids.size()));
  std::mt19937_64 rng(2026);
  std::vector<BlockId> step;
  for (int e = 0; e < epochs; ++e) {
    std::shuffle(samples.begin(), samples.end(), rng);
    for (size_t first = 0; first < samples.size(); first += 128) {
      step.clear();
      for (size_t i = first; i < std::min(samples.size(), first + 128); ++i) {
        step.insert(step.end(), samples[i].begin(), samples[i].end());
      }
      out->AddStep(step, true);
    }
  }
  return !samples.empty();
}

// Partition swaps per epoch for BETA and the randomized ordering against the lower bound.
void Orderings() {
  std::printf("\n### Partition orderings: swaps per epoch\n\n");
  std::printf("| partitions p | resident c | lower bound | beta | beta / bound | randomized "
              "(median of 5 seeds) |\n|---:|---:|---:|---:|---:|---:|\n");
  for (uint32_t p : {8u, 16u, 32u, 64u, 128u}) {
    for (uint32_t c : {2u, 4u, 8u}) {
      if (c >= p) continue;
      const uint64_t bound = SwapLowerBound(p, c);
      const uint64_t beta = MakePartitionOrder(p, c, OrderingKind::kBeta, 0)->swaps;
      std::vector<uint64_t> random;
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        random.push_back(MakePartitionOrder(p, c, OrderingKind::kRandomized, seed)->swaps);
      }
      std::sort(random.begin(), random.end());
      std::printf("| %u | %u | %llu | %llu | %.2f | %llu |\n", p, c,
                  static_cast<unsigned long long>(bound), static_cast<unsigned long long>(beta),
                  static_cast<double>(beta) / static_cast<double>(bound),
                  static_cast<unsigned long long>(random[2]));
    }
  }
}

// Planning speed of the incremental oracle, W=200, as the pipeline would drive it.
void PlannerSpeed(const AccessTrace& trace, uint32_t capacity) {
  PlannerOptions options;
  options.capacity_blocks = capacity;
  options.window_steps = 200;
  HeapPlanner planner(PlannerKind::kOracle, trace.num_blocks(), options);
  Plan plan;
  auto start = Clock::now();
  for (uint64_t t = 0; t < trace.num_steps(); ++t) {
    planner.Append(trace.step(t), true);
    while (planner.Ready()) SLUICE_CHECK(planner.PlanNext(plan).ok(), "plan");
    if (plan.loads.size() > (1u << 22)) {  // a pipeline consumes plans as it goes
      plan = Plan();
    }
  }
  planner.Finish();
  while (planner.Ready()) SLUICE_CHECK(planner.PlanNext(plan).ok(), "plan");
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("\nIncremental oracle (W=200, capacity 10%%, Zipf 1.0): %.1f M block accesses "
              "planned per second on one core (%llu accesses in %.2f s)\n",
              static_cast<double>(trace.num_accesses()) / s / 1e6,
              static_cast<unsigned long long>(trace.num_accesses()), s);
}

// The device row cache's planning speed, as node classification drives it on a GPU: steps of
// `step_rows` distinct rows of a `universe`-row table (hot rows first: id = universe * u^3),
// one step protected while the next is planned. Configurations: every row fits (lru, capacity
// the table: features in GPU memory), a quarter static (the lowest ids pinned, as in-degree
// ranks them), a quarter lru, a quarter oracle looking 4 steps ahead (its appends timed with
// its plans). Nanoseconds per row planned, on one core.
void RowCacheSpeed(uint32_t universe, uint32_t step_rows, uint32_t steps) {
  constexpr uint32_t kAhead = 4;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<RowKey>> trace(steps);
  std::vector<uint32_t> seen(universe, ~0u);
  for (uint32_t t = 0; t < steps; ++t) {
    while (trace[t].size() < step_rows) {
      const auto id = static_cast<uint32_t>(universe * std::pow(u(rng), 3.0));
      if (seen[id] != t) seen[id] = t, trace[t].push_back(RowKey{id, 0});
    }
  }
  const uint64_t quarter = universe / 4;
  std::vector<uint64_t> pinned((universe + 63) / 64, 0);
  for (uint64_t id = 0; id + 2 * step_rows < quarter; ++id) pinned[id / 64] |= uint64_t{1} << (id % 64);
  struct Config {
    const char* name;
    PlannerKind kind;
    uint64_t capacity;
    bool hashed = false;  // not told the table's rows: a hashed index, as each shard of a cache has
  };
  std::printf("\n## Device row cache planning (%u-row table, %u distinct rows a step, %u steps, "
              "one step protected)\n\n| configuration | capacity rows | ns per row | loads per step |\n"
              "|---|---:|---:|---:|\n", universe, step_rows, steps);
  for (const Config& c : {Config{"lru, every row fits", PlannerKind::kLru, universe},
                          Config{"static, a quarter (hot ids pinned)", PlannerKind::kStatic, quarter},
                          Config{"lru, a quarter", PlannerKind::kLru, quarter},
                          Config{"oracle (4 steps ahead), a quarter", PlannerKind::kOracle, quarter},
                          Config{"oracle (4 steps ahead), a quarter, hashed index", PlannerKind::kOracle, quarter,
                                 true}}) {
    RowCacheOptions o;
    o.kind = c.kind;
    o.capacity_rows = c.capacity;
    o.protect_steps = 1;
    o.total_rows = c.hashed ? 0 : universe;
    if (c.kind == PlannerKind::kStatic) o.pinned = &pinned;
    const bool oracle = c.kind == PlannerKind::kOracle;
    if (oracle) {  // as the device cache looks ahead: the steps the sampler filled, at most 4
      o.window_steps = kAhead;
      o.window_rows = uint64_t{kAhead + 1} * step_rows;
    }
    RowCache cache(o);
    RowStepPlan plan;
    uint64_t loads = 0;
    const auto start = Clock::now();
    for (size_t t = 0; t < trace.size(); ++t) {
      for (size_t a = t + cache.appended_unplanned(); oracle && a < trace.size() && a <= t + kAhead; ++a) {
        cache.Append(trace[a]);
      }
      SLUICE_CHECK(cache.Plan(trace[t], false, plan).ok(), "row cache plan");
      loads += plan.load_keys.size();
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("| %s | %llu | %.1f | %llu |\n", c.name, static_cast<unsigned long long>(c.capacity),
                s * 1e9 / (static_cast<double>(step_rows) * steps), static_cast<unsigned long long>(loads / steps));
  }
}

// The same plan for recommendation's rows on a GPU (gpu_bench's DLRM: 8 tables of 25M rows,
// device.gpu_budget 0.5 GiB = 8.4M rows of 64 bytes, batch 65536: about 524K distinct rows a
// step, a hashed index): one cache against the cache cut into shards planned in parallel on this
// machine's cores (ShardedRowCache; the device cache takes ShardedRowCache::Shards of them).
void ShardedRowCacheSpeed(uint32_t step_rows, uint32_t steps) {
  constexpr uint32_t kTables = 8;
  constexpr uint64_t kRows = 25'165'824, kCapacity = 8'388'608;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<RowKey>> trace(steps);
  for (auto& step : trace) {
    std::unordered_set<uint64_t> seen;
    while (step.size() < step_rows) {
      const RowKey k{static_cast<uint64_t>(static_cast<double>(kRows) * std::pow(u(rng), 3.0)),
                     static_cast<uint32_t>(rng() % kTables)};
      if (seen.insert(k.id * kTables + k.table).second) step.push_back(k);
    }
  }
  const auto threads = static_cast<uint32_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  const uint32_t chosen = ShardedRowCache::Shards(PlannerKind::kLru, kCapacity, 1, step_rows, 0, threads);
  std::printf("\n## Device row cache planning in shards (%u tables x %llu rows, capacity %llu rows, %u distinct "
              "rows a step, %u steps, lru, one step protected; %u threads, Shards() picks %u)\n\n"
              "| shards | ms per step (median) | ns per row | loads per step |\n|---:|---:|---:|---:|\n",
              kTables, static_cast<unsigned long long>(kRows), static_cast<unsigned long long>(kCapacity), step_rows,
              steps, threads, chosen);
  std::set<uint32_t> counts{1, 2, chosen};
  for (uint32_t shards : counts) {
    RowCacheOptions o;
    o.kind = PlannerKind::kLru;
    o.capacity_rows = kCapacity;
    o.protect_steps = 1;
    ShardedRowCache cache(o, shards);
    RowStepPlan plan;
    uint64_t loads = 0;
    std::vector<double> ms;
    for (const auto& rows : trace) {
      const auto start = Clock::now();
      SLUICE_CHECK(cache.Plan(rows, false, plan).ok(), "sharded row cache plan");
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      loads += plan.load_keys.size();
    }
    std::sort(ms.begin(), ms.end());
    std::printf("| %u | %.1f | %.1f | %llu |\n", shards, ms[ms.size() / 2], ms[ms.size() / 2] * 1e6 / step_rows,
                static_cast<unsigned long long>(loads / steps));
  }
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  sluice::Args a;
  CLI::App app{"sluice cache planner benchmark"};
  app.add_option("--universe", a.universe, "blocks in the Zipf traces");
  app.add_option("--length-factor", a.length_factor, "Zipf trace length / universe");
  app.add_option("--step", a.step, "accesses per step in the Zipf traces");
  app.add_option("--row-bytes", a.row_bytes, "bytes per block, for MB read");
  app.add_option("--datasets", a.datasets, "the shared datasets directory");
  bool row_cache_only = false;
  app.add_flag("--row-cache-only", row_cache_only, "only the device row cache's planning speed");
  CLI11_PARSE(app, argc, argv);
  using namespace sluice;  // NOLINT(google-build-using-namespace): main only
  RowCacheSpeed(4'000'000, 128'000, 64);
  ShardedRowCacheSpeed(524'288, 12);
  if (row_cache_only) return 0;
  const std::vector<double> fractions = {0.05, 0.10, 0.25, 0.50};
  const uint64_t length = uint64_t{a.universe} * a.length_factor;
  std::printf("# Cache planners: loads at capacities 5/10/25/50%% (oracle W=all and W=200, "
              "lru, static, none)\n");
  Orderings();
  AccessTrace zipf10 = ZipfTrace(a.universe, length, a.step, 1.0, 1);
  PlannerSpeed(zipf10, a.universe / 10);
  for (double alpha : {0.8, 1.0, 1.2}) {
    char title[64];
    std::snprintf(title, sizeof(title), "Zipf alpha %.1f", alpha);
    if (alpha == 1.0) {
      Table(title, zipf10, fractions, a.row_bytes);
    } else {
      Table(title, ZipfTrace(a.universe, length, a.step, alpha, 1), fractions, a.row_bytes);
    }
  }
  Sweep(zipf10, a.universe / 10);
  AccessTrace real(1);
  if (Fb15kTrace(a.datasets + "/fb15k-237", 3, &real)) {
    Table("FB15k-237 entities (3 epochs, batch 1000 + 500 negatives)", real, fractions, 200);
  } else {
    std::printf("\nFB15k-237 not found under %s: skipped\n", a.datasets.c_str());
  }
  if (CriteoTrace(a.datasets + "/criteo-sample/train.csv", 10, &real)) {
    Table("Criteo sample categorical ids (10 epochs, batch 128)", real, fractions, a.row_bytes);
  } else {
    std::printf("\nCriteo sample not found under %s: skipped\n", a.datasets.c_str());
  }
  return 0;
}
