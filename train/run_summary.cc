#include "train/run_summary.h"

#include "cache/planner.h"
#include "common/units.h"
#include "train/run_dir.h"

namespace sluice {

void RunSummary::Line(const std::string& text) {
  lines_.push_back(lines_.empty() ? text : "  " + text);
}

JsonObject& RunSummary::Section(const std::string& name) {
  for (auto& [n, o] : sections_) {
    if (n == name) return o;
  }
  sections_.emplace_back(name, JsonObject{});
  return sections_.back().second;
}

std::string RunSummary::Text() const {
  std::string out;
  for (const std::string& l : lines_) out += l + "\n";
  return out;
}

std::string RunSummary::Json() const {
  JsonObject root;
  for (const auto& [name, o] : sections_) {
    if (name.empty()) root = o;
  }
  for (const auto& [name, o] : sections_) {
    if (!name.empty()) root.AddRaw(name, o.str());
  }
  return root.str() + "\n";
}

void SummarizeDisk(RunSummary& s, const std::string& what, uint64_t requests, uint64_t bytes, double steps) {
  steps = steps > 0 ? steps : 1;
  s.Line("disk" + (what.empty() ? "" : " (" + what + ")") + ": " + std::to_string(requests) + " requests, " +
         FormatBytes(bytes) + " (" + FormatCount(static_cast<double>(requests) / steps) + " requests and " +
         FormatBytes(static_cast<uint64_t>(static_cast<double>(bytes) / steps)) + " per step)");
  s.Set("io", "requests", requests), s.Set("io", "bytes", bytes);
}

void SummarizeDrainedSteps(RunSummary& s, uint64_t drained_steps) {
  s.Set("cache", "drained_steps", drained_steps);
  if (drained_steps == 0) return;
  s.Line("  " + std::to_string(drained_steps) +
         " steps did not fit the row cache beside the steps in flight and waited for them to compute (their io "
         "ran at most one step ahead of compute; a larger cache, storage.budget or storage.cache_rows, avoids it)");
}

void SummarizeQueueDepth(RunSummary& s, int depth, const DepthChoice* choice) {
  s.Set("io", "queue_depth", static_cast<uint64_t>(depth));
  s.Set("io", "queue_depth_chosen", choice != nullptr);
  if (choice == nullptr) return;
  s.Line("  io queue depth " + choice->reason);
  std::string rates = "{";
  for (const DepthRate& r : choice->rates) {
    rates += (rates.size() > 1 ? "," : "") + ("\"" + std::to_string(r.depth) + "\":") +
             std::to_string(static_cast<uint64_t>(r.reads_per_s));
  }
  s.SetRaw("io", "queue_depth_reads_per_s", rates + "}");
}

void SummarizeEpochStartLoads(RunSummary& s, const std::string& section, const std::string& what,
                              const std::vector<uint64_t>& loads) {
  if (loads.empty()) return;
  std::string line = what + " loaded in each epoch's first " + std::to_string(kPassHeadSteps) + " steps:";
  std::string json = "[";
  for (size_t e = 0; e < loads.size(); ++e) {
    line += (e ? ", " : " ") + std::to_string(loads[e]);
    json += (e ? "," : "") + std::to_string(loads[e]);
  }
  s.Line(line);
  s.Set(section, "epoch_start_loads_steps", kPassHeadSteps);
  s.SetRaw(section, "epoch_start_loads", json + "]");
}

}  // namespace sluice
