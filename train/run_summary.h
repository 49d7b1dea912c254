#pragma once
// What a run reports when it ends, built once and written twice: summary.txt (lines for people,
// also printed) and summary.json (fields for scripts; bench/ reads it). The runner adds what
// every task shares (units trained, time, checkpoints, threads, memory, peak RSS); each task adds
// its stages, cache and memory plan. A field's section groups it in the JSON ("" = top level).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "storage/disk_probe.h"

namespace sluice {

class RunSummary {
 public:
  // A line of summary.txt; indented by two spaces unless it is the first.
  void Line(const std::string& text);
  template <typename T>
  void Set(const std::string& section, const std::string& key, const T& value) {
    Section(section).Add(key, value);
  }
  // `json` must be valid JSON (e.g. a list).
  void SetRaw(const std::string& section, const std::string& key, const std::string& json) {
    Section(section).AddRaw(key, json);
  }
  std::string Text() const;
  std::string Json() const;

 private:
  JsonObject& Section(const std::string& name);

  std::vector<std::string> lines_;
  std::vector<std::pair<std::string, JsonObject>> sections_;
};

// The disk line ("disk[ (what)]: N requests, B (n requests and b per step)") and io.requests /
// io.bytes, for any workload's prefetcher.
void SummarizeDisk(RunSummary& s, const std::string& what, uint64_t requests, uint64_t bytes, double steps);

// cache.drained_steps, and when there were any a line saying that so many steps did not fit the
// row cache beside the steps in flight and waited for them (RowCache::PlaceAfterDrain).
void SummarizeDrainedSteps(RunSummary& s, uint64_t drained_steps);

// io.queue_depth as the run used it, and the start-up probe's choice when it made one.
void SummarizeQueueDepth(RunSummary& s, int depth, const DepthChoice* choice);

// The loads of each epoch's first kPassHeadSteps steps ("<what> loaded in each epoch's first 100
// steps: a, b, ...") and <section>.epoch_start_loads (a list), for a cache that carries over.
void SummarizeEpochStartLoads(RunSummary& s, const std::string& section, const std::string& what,
                              const std::vector<uint64_t>& loads);

}  // namespace sluice
