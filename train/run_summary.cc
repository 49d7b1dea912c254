#include "train/run_summary.h"

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

}  // namespace sluice
