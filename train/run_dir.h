#pragma once
// Helpers shared by every task's run directory: human-readable counts, peak RSS, JSON lines,
// and the lock that gives one trainer a run directory.

#include <cstdint>
#include <string>

#include "common/status.h"

namespace sluice {

// 1234567 -> "1.23M"
std::string FormatCount(double x);
// Seconds for people: 12.3456 -> "12.35"
std::string FormatSeconds(double s);
// The process's peak resident set (VmHWM), in bytes; 0 when unknown.
uint64_t PeakRssBytes();
// The process's current resident set (VmRSS), in bytes; 0 when unknown.
uint64_t CurrentRssBytes();
// Appends one line to `path` (metrics.jsonl), flushed.
Status AppendLine(const std::string& path, const std::string& line);

// Exclusive use of a run directory by one trainer: an flock on <run_dir>/lock (which records the
// holder's pid), released when the lock is destroyed or the process ends, kill -9 included.
// Move-only. Readers (eval, export, predict) take no lock: checkpoints never change once
// renamed into place.
class RunDirLock {
 public:
  // Creates run_dir if needed. A held lock is one line naming the directory and the holder.
  static Result<RunDirLock> Acquire(const std::string& run_dir);
  RunDirLock() = default;
  ~RunDirLock();
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  explicit RunDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace sluice
