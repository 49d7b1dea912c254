#include "train/run_summary.h"

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

}  // namespace sluice
