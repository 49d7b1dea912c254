#pragma once
// An IoSession is one thread's io context: an executor over its own backend (a ring per
// thread), a staging arena of queue_depth aligned slots, one request per slot, and scratch space
// reused across calls so steady-state reads and writes allocate nothing.

#include <cstdint>
#include <memory>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/config.h"
#include "storage/io_backend.h"

namespace sluice {

struct IoConfig {
  BackendKind backend = BackendKind::kAuto;
  int queue_depth = 0;                   // io requests in flight per thread (0: sized, below)
  Bytes merge_max{128 * 1024};           // largest merged read of neighbouring rows
  Bytes merge_gap{0};                    // rows this close are merged, reading the gap too
  bool direct = true;                    // O_DIRECT where the filesystem allows it

  static constexpr int kDefaultQueueDepth = 32;
  // queue_depth, 0 read as the default (for what does not size it).
  int EffectiveQueueDepth() const { return queue_depth > 0 ? queue_depth : kDefaultQueueDepth; }

  template <class V>
  void VisitFields(V& v) {
    v.Field("backend", backend, "io backend: auto (io_uring, else pread), uring, pread");
    v.Field("queue_depth", queue_depth,
            "io requests in flight per io thread; 0: probed at start-up where a run reads a row "
            "file out of core (the shallowest depth within 10% of the disk's best random-read "
            "rate, at most what the budget's io share holds), else 32",
            InRange(0, 4096));
    v.Field("merge_max", merge_max,
            "largest read made by merging neighbouring rows (4KiB: no merging)",
            InRange(Bytes{4096}, Bytes{64 * 1024 * 1024}));
    v.Field("merge_gap", merge_gap, "rows at most this far apart are read together, gap included",
            InRange(Bytes{0}, Bytes{64 * 1024 * 1024}));
    v.Field("direct", direct, "use O_DIRECT (falls back to buffered io where refused)");
  }
};

// A backend of `kind` for the calling thread, with the process's SLUICE_FAULT faults applied
// when it names any (as every session's): for a thread of io that needs no session's slots.
Result<std::unique_ptr<IoBackend>> MakeProcessBackend(BackendKind kind, uint32_t queue_depth);

class IoSession {
 public:
  // Creates the backend named in config.backend with config.queue_depth entries and slots of
  // config.merge_max bytes.
  static Result<std::unique_ptr<IoSession>> Create(const IoConfig& config);
  // For tests: a session over a given backend (e.g. a FaultBackend).
  IoSession(std::unique_ptr<IoBackend> backend, uint32_t slot_bytes);

  IoExecutor& executor() { return executor_; }
  uint32_t queue_depth() const { return executor_.queue_depth(); }
  uint32_t slot_bytes() const { return slot_bytes_; }
  // Grows the slots to at least `bytes` (aligned up); allocation happens only when it grows.
  void EnsureSlotBytes(uint32_t bytes);
  std::byte* slot_buffer(uint32_t slot) { return staging_.data() + uint64_t{slot} * slot_bytes_; }
  IoRequest& slot_request(uint32_t slot) { return requests_[slot]; }

  // Scratch for RowFile: (row id, position in the caller's list) sorted by id, and extents.
  struct Extent {
    uint64_t offset_bytes;
    uint32_t length_bytes;
    uint32_t first;  // index into sorted_ of the extent's first row
    uint32_t end;    // one past its last row
  };
  std::vector<std::pair<uint64_t, uint32_t>>& sorted() { return sorted_; }
  std::vector<Extent>& extents() { return extents_; }

 private:
  IoExecutor executor_;
  uint32_t slot_bytes_;
  AlignedBuffer staging_;
  std::vector<IoRequest> requests_;
  std::vector<std::pair<uint64_t, uint32_t>> sorted_;
  std::vector<Extent> extents_;
};

}  // namespace sluice
