#include "prefetch/lookahead_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <list>
#include <unordered_map>

#include "common/units.h"

namespace sluice {
namespace {

struct KeyHash {
  size_t operator()(const RowKey& k) const { return std::hash<uint64_t>()(k.id * 0x9E3779B97F4A7C15ull ^ k.table); }
};

std::string Ms(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", s * 1e3);
  return text;
}

// 15,412
std::string Count(double x) {
  std::string digits = std::to_string(static_cast<uint64_t>(std::max(0.0, x) + 0.5)), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

bool InRowSample(const RowKey& key, uint32_t every) {
  return every <= 1 || (KeyHash()(key) >> 20) % every == 0;
}

double SimulateLruReads(const std::vector<std::vector<RowKey>>& steps, uint64_t capacity, uint64_t staged,
                        bool fresh, double* evictions) {
  if (evictions != nullptr) *evictions = 0;
  if (steps.empty()) return 0;
  std::unordered_map<RowKey, bool, KeyHash> seen;  // rows evicted before (true) or only used
  std::list<RowKey> order;  // most recent first
  std::unordered_map<RowKey, std::list<RowKey>::iterator, KeyHash> where;
  std::deque<RowKey> fifo;  // evicted rows, oldest first (a row may appear again once reloaded)
  std::unordered_map<RowKey, uint32_t, KeyHash> in_fifo;  // row -> its entries in fifo
  const size_t counted_from = steps.size() / 2;
  uint64_t reads = 0, evicted = 0;
  for (size_t t = 0; t < steps.size(); ++t) {
    for (const RowKey& k : steps[t]) {
      auto it = where.find(k);
      if (it != where.end()) {
        order.splice(order.begin(), order, it->second);
        continue;
      }
      auto staged_it = in_fifo.find(k);
      const bool from_buffer = staged_it != in_fifo.end();
      if (from_buffer && --staged_it->second == 0) in_fifo.erase(staged_it);
      auto s = seen.try_emplace(k, false).first;
      const bool stored = s->second || !fresh;  // the file holds a value to read
      if (t >= counted_from && !from_buffer && stored) ++reads;
      order.push_front(k);
      where[k] = order.begin();
    }
    // The step's rows stay; older ones go once the cache is full, into the buffer.
    while (order.size() > std::max<uint64_t>(capacity, steps[t].size())) {
      const RowKey old = order.back();
      where.erase(old);
      order.pop_back();
      seen[old] = true;
      if (t >= counted_from) ++evicted;
      if (staged == 0) continue;
      fifo.push_back(old);
      ++in_fifo[old];
      while (fifo.size() > staged) {
        auto f = in_fifo.find(fifo.front());
        if (f != in_fifo.end() && --f->second == 0) in_fifo.erase(f);
        fifo.pop_front();
      }
    }
  }
  const auto counted = static_cast<double>(steps.size() - counted_from);
  if (evictions != nullptr) *evictions = static_cast<double>(evicted) / counted;
  return static_cast<double>(reads) / counted;
}

double WriteBackSeconds(double evictions, uint64_t staged, uint64_t table_bytes, double bytes_per_s) {
  if (staged == 0 || bytes_per_s <= 0) return 0;
  return 2 * static_cast<double>(table_bytes) * std::min(1.0, evictions / static_cast<double>(staged)) / bytes_per_s;
}

LookaheadChoice ChooseLookahead(const LookaheadInput& in) {
  LookaheadChoice c;
  c.disk = in.disk;
  c.read_ahead_rows = in.read_ahead_rows;
  const uint32_t every = std::max<uint32_t>(in.sample_every, 1);
  auto reads = [&](uint64_t cache, uint64_t staged, double& evictions) {
    const double r = every * SimulateLruReads(in.steps, cache / every, staged / every, in.fresh, &evictions);
    evictions *= every;
    return r;
  };
  c.reads_plain = reads(in.cache_rows_plain, in.staged_rows_plain, c.evictions_plain);
  c.reads_read_ahead = reads(in.cache_rows_read_ahead, in.staged_rows_read_ahead, c.evictions_read_ahead);
  const double iops = std::max(in.disk.random_reads_per_s, 1.0);
  const double bw = std::max(in.disk.sequential_bytes_per_s, 1.0);
  const double horizon = std::max<double>(in.horizon, 1);
  c.write_back_plain_s = WriteBackSeconds(c.evictions_plain, in.staged_rows_plain, in.table_bytes, bw);
  c.write_back_read_ahead_s = WriteBackSeconds(c.evictions_read_ahead, in.staged_rows_read_ahead, in.table_bytes, bw);
  c.random_s = c.reads_plain / iops + c.write_back_plain_s;
  // Each region is read once per horizon, so a row read ahead waits half a horizon on average
  // before its step takes it: read-ahead holds reads x horizon / 2 rows, or covers that share.
  const double uncovered =
      std::max(0.0, c.reads_read_ahead - static_cast<double>(in.read_ahead_rows) / (horizon / 2));
  c.read_ahead_s = static_cast<double>(in.table_bytes) / horizon / bw + uncovered / iops + c.write_back_read_ahead_s;
  c.read_ahead = in.read_ahead_rows > 0 && c.read_ahead_s < c.random_s;
  c.planner = c.read_ahead ? PlannerKind::kLru : PlannerKind::kOracle;
  const auto write_backs = [&](double s, double evictions, uint64_t staged) {
    return staged == 0 ? std::string()
                       : " and " + Ms(s) + " of write-back sweeps (" + Count(evictions) + " rows a step into " +
                             Count(static_cast<double>(staged)) + ")";
  };
  const std::string random = Ms(c.random_s) + ": random reads (" + Count(c.reads_plain) +
                             " disk reads a step at " + Count(iops) + " reads/s)" +
                             write_backs(c.write_back_plain_s, c.evictions_plain, in.staged_rows_plain);
  const std::string sweeps = Ms(c.read_ahead_s) + ": read-ahead (" +
                             FormatBytes(in.table_bytes) + " swept every " + std::to_string(in.horizon) +
                             " steps at " + FormatBytes(static_cast<uint64_t>(bw)) + "/s)" +
                             write_backs(c.write_back_read_ahead_s, c.evictions_read_ahead, in.staged_rows_read_ahead);
  c.reason = c.read_ahead ? "read-ahead with LRU: predicted io per step " + sweeps + " against " + random
                          : "oracle without read-ahead: predicted io per step " + random + " against " + sweeps;
  return c;
}

double SimulateOracleLoads(const std::vector<std::vector<RowKey>>& steps, uint64_t capacity, uint32_t window,
                           uint32_t protect) {
  if (steps.empty()) return 0;
  size_t most = 0;
  for (const auto& rows : steps) most = std::max(most, rows.size());
  RowCacheOptions o;
  o.kind = PlannerKind::kOracle;
  o.capacity_rows = std::max<uint64_t>(capacity, 1);
  o.window_steps = window;
  o.protect_steps = protect;
  o.window_rows = (uint64_t{window} + 1) * most;
  RowCache cache(o);
  RowStepPlan plan;
  const size_t counted_from = steps.size() / 2;
  uint64_t loads = 0;
  size_t appended = 0;
  for (size_t t = 0; t < steps.size(); ++t) {
    // As the prefetcher does: the steps up to t + window are known before step t is planned.
    while (appended < steps.size() && appended <= t + window) cache.Append(steps[appended++]);
    if (!cache.Plan(steps[t], /*writes=*/true, plan).ok()) return std::numeric_limits<double>::infinity();
    if (t >= counted_from) loads += plan.load_keys.size();
  }
  return static_cast<double>(loads) / static_cast<double>(steps.size() - counted_from);
}

WindowChoice ChooseWindow(const std::vector<std::vector<RowKey>>& steps, uint32_t sample_every, uint32_t protect,
                          std::vector<WindowCandidate> candidates, const DiskProbe& disk, uint64_t table_bytes) {
  WindowChoice c;
  const uint32_t every = std::max<uint32_t>(sample_every, 1);
  const bool costed = disk.sequential_bytes_per_s > 0 && disk.random_reads_per_s > 0;
  const WindowCandidate* best = nullptr;
  auto cost = [&](const WindowCandidate& w) { return costed ? w.cost_s : w.loads; };
  for (WindowCandidate& w : candidates) {
    w.loads = every * SimulateOracleLoads(steps, w.cache_rows / every, w.window, protect);
    w.cost_s = w.loads / std::max(disk.random_reads_per_s, 1.0) +
               WriteBackSeconds(w.loads, w.staged_rows, table_bytes, disk.sequential_bytes_per_s);
    if (best == nullptr || cost(w) < 0.99 * cost(*best)) best = &w;
  }
  std::string loads;
  for (const WindowCandidate& w : candidates) {
    loads += (loads.empty() ? "" : ", ") + std::to_string(w.window) + ": " +
             (std::isinf(w.loads) ? std::string("does not fit")
                                  : Count(w.loads) + (costed ? " (" + Ms(w.cost_s) + ")" : std::string()));
  }
  if (best == nullptr || std::isinf(best->loads)) {
    c.window = candidates.empty() ? 0 : candidates.front().window;
    c.reason = "window " + std::to_string(c.window) + " steps (auto: no window's cache holds the steps in flight)";
  } else {
    c.window = best->window;
    c.reason = "window " + std::to_string(c.window) + " steps (auto: " +
               (costed ? "the least io a step, loads as random reads and write-back sweeps, among the "
                       : "the fewest simulated loads a step among the ") +
               "windows whose ring fits the budget, " + loads + ")";
  }
  c.candidates = std::move(candidates);
  return c;
}

}  // namespace sluice
