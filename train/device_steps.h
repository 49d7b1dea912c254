#pragma once
// The step loop of a training pass on a device (train/device_rows.h), one for every task: step
// t + 1 is made ready and staged (its rows planned, packed and copied on the copy stream) after
// step t's kernels are queued and before the host waits for them, so the copy and the host's
// packing run while the device computes. When step t + 1's readiness waits for step t to be
// computed (link prediction's next buffer state evicts partitions step t uses), overlap(t) says
// no, and step t + 1 is staged after step t finished.
//
//   DeviceLoop<Batch> loop{ready, stage, launch, finish, overlap};
//   SLUICE_ASSIGN_OR_RETURN(uint64_t next, RunDeviceSteps(first, end, loop));
//
// On an error the loop returns it at once: the caller aborts its pipeline and resets its
// DeviceRows (a step may be staged or running).

#include <cstdint>
#include <functional>

#include "common/status.h"

namespace sluice {

template <class Payload>
struct DeviceLoop {
  std::function<Result<Payload*>(uint64_t t)> ready;   // blocks until step t's host rows are in place
  std::function<Status(uint64_t t, Payload&)> stage;   // DeviceRows::Stage and what it needs
  std::function<Status(uint64_t t, Payload&)> launch;  // Begin, the model, Update (queued)
  std::function<Result<bool>(uint64_t t, Payload&)> finish;  // Finish, Computed; true: stop after t
  std::function<bool(uint64_t t)> overlap;              // may step t + 1 be staged while t runs
};

// Runs steps [first, end); returns the step after the last one run (end, unless finish stopped
// the pass).
template <class Payload>
Result<uint64_t> RunDeviceSteps(uint64_t first, uint64_t end, const DeviceLoop<Payload>& loop) {
  if (first >= end) return end;
  SLUICE_ASSIGN_OR_RETURN(Payload* current, loop.ready(first));
  SLUICE_RETURN_IF_ERROR(loop.stage(first, *current));
  for (uint64_t t = first; t < end; ++t) {
    SLUICE_RETURN_IF_ERROR(loop.launch(t, *current));
    Payload* next = nullptr;
    const bool ahead = t + 1 < end && loop.overlap(t);
    if (ahead) {
      SLUICE_ASSIGN_OR_RETURN(next, loop.ready(t + 1));
      SLUICE_RETURN_IF_ERROR(loop.stage(t + 1, *next));
    }
    SLUICE_ASSIGN_OR_RETURN(const bool stop, loop.finish(t, *current));
    if (stop) return t + 1;
    if (t + 1 < end && !ahead) {
      SLUICE_ASSIGN_OR_RETURN(next, loop.ready(t + 1));
      SLUICE_RETURN_IF_ERROR(loop.stage(t + 1, *next));
    }
    current = next;
  }
  return end;
}

}  // namespace sluice
