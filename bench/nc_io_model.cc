// nc_io_model: the io model of node classification out of core, from the real sampler on a
// real dataset (no training). It samples the steps of one epoch exactly as training does (the
// same seeded batch order, the same k-hop draws) and reports, for a feature cache of a given
// size: rows per step, the access skew, and for each planner (none, static by degree, LRU,
// oracle, and superbatch sweeps over a static hot set) the rows missed, the disk requests and
// the bytes read per step, with the io time those take on a disk of the given speed.
//
//   nc_io_model --dataset DIR [--batch 1024] [--fanouts 15,10,5] [--cache-frac 0.25]
//               [--steps 0] [--iops 100000] [--mbps 1500] [--window 8] [--sweep 8,16,32]
//
// Prints markdown. The planners run on the distinct rows of each step (what the row cache
// sees); requests are the merged, 512-byte-aligned reads RowFile would issue (rows whose pages
// touch or lie within --gap-bytes are one read, at most --merge-max bytes).

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cache/row_cache.h"
#include "sampler/batch_order.h"
#include "sampler/csr_graph.h"
#include "sampler/khop_sampler.h"
#include "storage/dataset.h"

namespace sluice {
namespace {

struct Args {
  std::string dataset;
  uint64_t batch = 1024;
  std::string fanouts = "15,10,5";
  double cache_frac = 0.25;
  uint64_t steps = 0;  // 0: the whole epoch
  uint64_t seed = 1;
  double iops = 100000;
  double mbps = 1500;
  uint32_t window = 8;
  std::string sweeps = "4,8,16,32";
  uint32_t gap_bytes = 0;
  uint32_t sweep_gap_bytes = 64 * 1024;
  uint32_t merge_max = 128 * 1024;
};

struct IoCost {
  uint64_t requests = 0;
  uint64_t bytes = 0;
};

constexpr uint64_t kAlign = 512;

// The reads RowFile::ReadRows issues for sorted distinct rows.
IoCost Extents(const std::vector<uint64_t>& sorted, uint64_t row_bytes, uint64_t gap, uint64_t max) {
  IoCost c;
  uint64_t e_begin = 0, e_end = 0;
  bool open = false;
  for (uint64_t r : sorted) {
    const uint64_t start = r * row_bytes / kAlign * kAlign;
    const uint64_t end = ((r + 1) * row_bytes + kAlign - 1) / kAlign * kAlign;
    if (open && end <= e_end) continue;
    if (open && start <= e_end + gap && end - e_begin <= max) {
      e_end = end;
      continue;
    }
    if (open) c.bytes += e_end - e_begin, ++c.requests;
    e_begin = std::max(start, open ? e_end : 0);
    e_end = end;
    open = true;
  }
  if (open) c.bytes += e_end - e_begin, ++c.requests;
  return c;
}

struct Row {
  std::string planner;
  double misses = 0, requests = 0, mb = 0, io_s = 0, held_mb = 0;
};

double IoSeconds(const Args& a, double requests, double bytes) {
  return std::max(requests / a.iops, bytes / (a.mbps * 1e6));
}

Row Summarize(const Args& a, const std::string& name, const std::vector<IoCost>& per_step,
              const std::vector<uint64_t>& misses, double held_bytes) {
  Row r{name};
  const double n = static_cast<double>(per_step.size());
  for (size_t t = 0; t < per_step.size(); ++t) {
    r.misses += static_cast<double>(misses[t]) / n;
    r.requests += static_cast<double>(per_step[t].requests) / n;
    r.mb += static_cast<double>(per_step[t].bytes) / n / 1e6;
  }
  r.io_s = IoSeconds(a, r.requests, r.mb * 1e6);
  r.held_mb = held_bytes / 1e6;
  return r;
}

// Row-cache planners: each step's missed rows are read when the step is planned, or, with
// group > 1, the misses of `group` consecutive steps in one merged read (io runs 2 groups ahead,
// so the cache protects that many steps).
Row RunRowCache(const Args& a, PlannerKind kind, uint32_t window, uint64_t capacity,
                const std::vector<std::vector<uint64_t>>& steps, uint64_t row_bytes, uint32_t group = 1) {
  RowCacheOptions o;
  o.kind = kind;
  o.capacity_rows = capacity;
  o.window_steps = kind == PlannerKind::kOracle ? window : 0;
  o.protect_steps = 2 * group - 1;
  uint64_t max_rows = 0;
  for (const auto& s : steps) max_rows = std::max<uint64_t>(max_rows, s.size());
  o.window_rows = (uint64_t{o.window_steps} + 2) * max_rows;
  RowCache cache(o);
  auto keys = [&](size_t t) {
    std::vector<RowKey> k;
    k.reserve(steps[t].size());
    for (uint64_t v : steps[t]) k.push_back(RowKey{v, 0});
    return k;
  };
  std::vector<IoCost> cost;
  std::vector<uint64_t> misses;
  RowStepPlan plan;
  std::vector<uint64_t> loads;
  size_t appended = 0;
  for (size_t t = 0; t < steps.size(); ++t) {
    while (o.kind == PlannerKind::kOracle && appended < steps.size() && appended <= t + window) {
      cache.Append(keys(appended++));
    }
    Status s = cache.Plan(keys(t), /*writes=*/false, plan);
    if (!s.ok()) {  // the steps in flight do not fit the cache: no such configuration
      Row r{"oracle, io in groups of " + std::to_string(group) + ": does not fit (" + s.message().substr(0, 60) + "...)"};
      r.misses = r.requests = r.mb = r.io_s = std::nan("");
      return r;
    }
    for (const RowKey& k : plan.load_keys) loads.push_back(k.id);
    if ((t + 1) % group != 0 && t + 1 != steps.size()) continue;
    std::sort(loads.begin(), loads.end());
    const IoCost c = group == 1 ? Extents(loads, row_bytes, a.gap_bytes, a.merge_max)
                                : Extents(loads, row_bytes, a.sweep_gap_bytes, 1u << 20);
    const uint64_t k = t % group + 1;
    for (uint64_t i = 0; i < k; ++i) {
      cost.push_back({c.requests / k, c.bytes / k});
      misses.push_back(loads.size() / k);
    }
    loads.clear();
  }
  std::string name = kind == PlannerKind::kOracle ? "oracle (window " + std::to_string(window) + ")" : "lru";
  if (group > 1) name += ", io in groups of " + std::to_string(group) + " steps";
  return Summarize(a, name, cost, misses, static_cast<double>(capacity * row_bytes));
}

// A fixed hot set; every other row is read per step.
Row RunStatic(const Args& a, const std::string& name, const std::vector<uint8_t>& hot,
              const std::vector<std::vector<uint64_t>>& steps, uint64_t row_bytes, uint64_t capacity) {
  std::vector<IoCost> cost;
  std::vector<uint64_t> misses;
  for (const auto& s : steps) {
    std::vector<uint64_t> cold;
    for (uint64_t v : s) {
      if (!hot[v]) cold.push_back(v);
    }
    std::sort(cold.begin(), cold.end());
    cost.push_back(Extents(cold, row_bytes, a.gap_bytes, a.merge_max));
    misses.push_back(cold.size());
  }
  return Summarize(a, name, cost, misses, static_cast<double>(capacity * row_bytes));
}

// Superbatches of k steps over a hot set: the cold rows of a superbatch, read once in file order
// with large gaps merged and held (double-buffered) while the superbatch trains. The hot set
// (the highest-degree rows) shrinks until it and two superbatches' cold rows fit the cache.
Row RunSweep(const Args& a, uint32_t k, const std::vector<uint64_t>& by_degree, uint64_t capacity,
             const std::vector<std::vector<uint64_t>>& steps, uint64_t row_bytes) {
  const uint64_t n = by_degree.size();
  uint64_t hot_rows = capacity;
  std::vector<IoCost> cost;
  std::vector<uint64_t> misses;
  for (int round = 0; round < 4; ++round) {
    std::vector<uint8_t> hot(n, 0);
    for (uint64_t i = 0; i < hot_rows; ++i) hot[by_degree[i]] = 1;
    cost.clear();
    misses.clear();
    uint64_t held_max = 0;
    for (size_t first = 0; first < steps.size(); first += k) {
      std::vector<uint64_t> cold;
      const size_t end = std::min(steps.size(), first + k);
      for (size_t t = first; t < end; ++t) {
        for (uint64_t v : steps[t]) {
          if (!hot[v]) cold.push_back(v);
        }
      }
      std::sort(cold.begin(), cold.end());
      cold.erase(std::unique(cold.begin(), cold.end()), cold.end());
      const IoCost c = Extents(cold, row_bytes, a.sweep_gap_bytes, 1u << 20);
      held_max = std::max<uint64_t>(held_max, cold.size());
      for (size_t t = first; t < end; ++t) {  // spread over the superbatch's steps
        cost.push_back({c.requests / (end - first), c.bytes / (end - first)});
        misses.push_back(cold.size() / (end - first));
      }
    }
    if (hot_rows + 2 * held_max <= capacity) break;
    hot_rows = 2 * held_max >= capacity ? 0 : capacity - 2 * held_max;
  }
  return Summarize(a, "sweep " + std::to_string(k) + " steps + " + std::to_string(hot_rows) + " hot rows",
                   cost, misses, static_cast<double>(capacity * row_bytes));
}

std::vector<int> ParseFanouts(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(std::stoi(part));
  return out;
}

int Main(const Args& a) {
  auto ds = Dataset::Open(a.dataset);
  if (!ds.ok()) {
    std::fprintf(stderr, "nc_io_model: %s\n", ds.status().message().c_str());
    return 1;
  }
  const Manifest& m = ds->manifest();
  auto graph = CsrGraph::Load(*ds, "train", Direction::kIn);
  auto train = ds->ReadInt64("nodes.train");
  auto features = ds->File("nodes.features");
  if (!graph.ok() || !train.ok() || !features.ok()) {
    std::fprintf(stderr, "nc_io_model: cannot read the graph, nodes.train or nodes.features\n");
    return 1;
  }
  const uint64_t n = m.num_nodes;
  const uint64_t row_bytes = (*features)->bytes / n;
  const uint64_t capacity = static_cast<uint64_t>(a.cache_frac * static_cast<double>(n));
  KHopOptions ko;
  ko.fanouts = ParseFanouts(a.fanouts);
  KHopSampler sampler(*graph, ko);
  const std::vector<int64_t> order = EpochPermutation(train->size(), a.seed, 0);
  std::vector<int64_t> nodes(order.size());
  for (size_t i = 0; i < order.size(); ++i) nodes[i] = (*train)[static_cast<size_t>(order[i])];
  uint64_t steps_total = (nodes.size() + a.batch - 1) / a.batch;
  if (a.steps != 0) steps_total = std::min(steps_total, a.steps);
  std::vector<std::vector<uint64_t>> steps(steps_total);
  std::vector<uint32_t> uses(n, 0);
  const auto start = std::chrono::steady_clock::now();
  double edges = 0;
  std::vector<double> layer_sum(ko.fanouts.size() + 1, 0), layer_max(ko.fanouts.size() + 1, 0);
  std::vector<double> edge_sum(ko.fanouts.size(), 0);
  for (uint64_t t = 0; t < steps_total; ++t) {
    const SampledSubgraph s = sampler.Sample(Batch(nodes, a.batch, t), {a.seed, 0, t});
    for (int64_t v : s.nodes()) steps[t].push_back(static_cast<uint64_t>(v)), ++uses[v];
    edges += static_cast<double>(s.blocks.back().src_local.size());
    for (size_t l = 0; l < s.layers.size(); ++l) {
      layer_sum[l] += static_cast<double>(s.layers[l].size());
      layer_max[l] = std::max(layer_max[l], static_cast<double>(s.layers[l].size()));
    }
    for (size_t h = 0; h < s.blocks.size(); ++h) edge_sum[h] += static_cast<double>(s.blocks[h].src_local.size());
  }
  const double sample_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Skew: the share of accesses (distinct rows per step) that hit the 10% most used rows.
  std::vector<uint32_t> sorted_uses(uses);
  std::sort(sorted_uses.begin(), sorted_uses.end(), std::greater<>());
  const double all = std::accumulate(sorted_uses.begin(), sorted_uses.end(), 0.0);
  const double top10 = std::accumulate(sorted_uses.begin(), sorted_uses.begin() + static_cast<int64_t>(n / 10), 0.0);
  uint64_t touched = 0;
  for (uint32_t u : uses) touched += u > 0;
  // The static hot set: the capacity's highest in-degree rows.
  std::vector<uint64_t> by_degree(n);
  std::iota(by_degree.begin(), by_degree.end(), 0);
  std::stable_sort(by_degree.begin(), by_degree.end(),
                   [&](uint64_t x, uint64_t y) { return graph->degree(static_cast<int64_t>(x)) > graph->degree(static_cast<int64_t>(y)); });
  std::vector<uint8_t> hot(n, 0), none(n, 0);
  for (uint64_t i = 0; i < capacity; ++i) hot[by_degree[i]] = 1;
  std::printf("## io model: %s\n\n", a.dataset.c_str());
  std::printf("- %llu nodes, feature rows of %llu bytes (%.2f GB), cache %llu rows (%.0f%%, %.2f GB)\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(row_bytes),
              static_cast<double>(n * row_bytes) / 1e9, static_cast<unsigned long long>(capacity),
              a.cache_frac * 100, static_cast<double>(capacity * row_bytes) / 1e9);
  std::printf("- %llu steps of %llu seeds, fanouts %s: %.0f distinct rows per step (%.1f MB), %.0f sampled "
              "edges in the last hop; %.1f%% of the rows touched in these steps; sampling %.3f s per step\n",
              static_cast<unsigned long long>(steps_total), static_cast<unsigned long long>(a.batch),
              a.fanouts.c_str(), all / static_cast<double>(steps_total),
              all / static_cast<double>(steps_total) * static_cast<double>(row_bytes) / 1e6,
              edges / static_cast<double>(steps_total), 100.0 * static_cast<double>(touched) / static_cast<double>(n),
              sample_s / static_cast<double>(steps_total));
  std::printf("- nodes per layer (seeds first), mean / max:");
  for (size_t l = 0; l < layer_sum.size(); ++l) {
    std::printf(" %.0f / %.0f", layer_sum[l] / static_cast<double>(steps_total), layer_max[l]);
  }
  std::printf("; sampled edges per hop, mean:");
  for (double e : edge_sum) std::printf(" %.0f", e / static_cast<double>(steps_total));
  std::printf("\n- skew: the 10%% most used rows take %.1f%% of the accesses\n", 100 * top10 / all);
  std::printf("- disk: %.0f random reads/s, %.0f MB/s; io time = max(requests / IOPS, bytes / bandwidth)\n\n",
              a.iops, a.mbps);
  std::vector<Row> rows;
  rows.push_back(RunStatic(a, "none", none, steps, row_bytes, 0));
  rows.push_back(RunStatic(a, "static (by degree)", hot, steps, row_bytes, capacity));
  rows.push_back(RunRowCache(a, PlannerKind::kLru, 0, capacity, steps, row_bytes));
  rows.push_back(RunRowCache(a, PlannerKind::kOracle, a.window, capacity, steps, row_bytes));
  std::stringstream ks(a.sweeps);
  for (std::string part; std::getline(ks, part, ',');) {
    const uint32_t k = static_cast<uint32_t>(std::stoul(part));
    rows.push_back(RunSweep(a, k, by_degree, capacity, steps, row_bytes));
    rows.push_back(RunRowCache(a, PlannerKind::kOracle, a.window, capacity, steps, row_bytes, k));
  }
  std::printf("| planner | rows missed / step | requests / step | MB read / step | io s / step | rows held MB |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.0f | %.0f | %.1f | %.3f | %.0f |\n", r.planner.c_str(), r.misses, r.requests, r.mb,
                r.io_s, r.held_mb);
  }
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  sluice::Args a;
  CLI::App app{"nc_io_model: the io model of node classification out of core"};
  app.add_option("--dataset", a.dataset, "a node-classification dataset")->required();
  app.add_option("--batch", a.batch, "seeds per step");
  app.add_option("--fanouts", a.fanouts, "per hop, comma separated");
  app.add_option("--cache-frac", a.cache_frac, "feature cache as a fraction of the rows");
  app.add_option("--steps", a.steps, "steps of epoch 0 to sample (0: all)");
  app.add_option("--seed", a.seed, "train.seed");
  app.add_option("--iops", a.iops, "random reads per second at depth 32");
  app.add_option("--mbps", a.mbps, "sequential MB/s");
  app.add_option("--window", a.window, "oracle lookahead in steps");
  app.add_option("--sweep", a.sweeps, "superbatch sizes in steps, comma separated");
  app.add_option("--gap-bytes", a.gap_bytes, "per-step reads: merge rows this close");
  app.add_option("--sweep-gap-bytes", a.sweep_gap_bytes, "sweeps: merge rows this close");
  app.add_option("--merge-max", a.merge_max, "largest per-step read");
  CLI11_PARSE(app, argc, argv);
  return sluice::Main(a);
}
