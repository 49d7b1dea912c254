#pragma once
// Process-wide fault injection for the fault-matrix tests (tests/e2e/test_fault_matrix.py):
// SLUICE_FAULT=<op>:<fault>:<path>[:<first>[:<times>]] makes io on files whose path contains
// <path> fail or misbehave, wherever sluice does io: the synchronous helpers (PreadFull,
// PwriteFull: manifests, edge and record files, checkpoints, the run directory), every io
// session's backend (row files: tables, features, write-back) and RocksDB's file system.
//   op     read | write
//   fault  eio | enospc (the op fails with that errno) | short (it transfers part of the
//          bytes; the io layer must finish the rest) | latency (it waits 20 ms first)
//   first  the 0-based index, among matching ops, of the first that faults (default 0)
//   times  how many consecutive matching ops fault (default 1; "all": every one from first)
// Unset, each io pays one branch. A malformed value stops the process with one line. With
// SLUICE_FAULT_REPORT=<file>, "<faults fired> <matching ops>" is written there at exit.

#include <atomic>
#include <cstdint>
#include <string>

#include "storage/io_backend.h"

namespace sluice {

enum class FaultKind { kNone, kError, kShort, kLatency };

struct FaultAction {
  FaultKind kind = FaultKind::kNone;
  int error = 0;  // kError: the errno
};

class ProcessFaults {
 public:
  // The faults SLUICE_FAULT asks for, or nullptr (parsed once).
  static ProcessFaults* Get();

  // Counts `op` on `path` and says what to do with it.
  FaultAction Next(IoKind op, const std::string& path);
  // The same for an fd (its path from /proc/self/fd).
  FaultAction NextFd(IoKind op, int fd);
  bool Applies(IoKind op) const { return op == op_; }
  uint64_t fired() const { return fired_.load(); }
  uint64_t seen() const { return seen_.load(); }  // matching ops, faulted or not

  static constexpr uint64_t kLatencyNs = 20'000'000;

 private:
  IoKind op_ = IoKind::kRead;
  FaultAction action_;
  std::string path_;
  uint64_t first_ = 0, times_ = 1;
  std::atomic<uint64_t> seen_{0}, fired_{0};
};

// Applies a latency action (sleeps); other kinds are the caller's.
void SleepForFault(const FaultAction& a);

}  // namespace sluice
