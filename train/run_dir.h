#pragma once
// Helpers shared by every task's run directory: human-readable counts, peak RSS, JSON lines.

#include <cstdint>
#include <string>

#include "common/status.h"

namespace sluice {

// 1234567 -> "1.23M"
std::string FormatCount(double x);
// The process's peak resident set (VmHWM), in bytes; 0 when unknown.
uint64_t PeakRssBytes();
// The process's current resident set (VmRSS), in bytes; 0 when unknown.
uint64_t CurrentRssBytes();
// Appends one line to `path` (metrics.jsonl), flushed.
Status AppendLine(const std::string& path, const std::string& line);

}  // namespace sluice
