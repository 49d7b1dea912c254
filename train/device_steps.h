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

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/check.h"
#include "common/clock.h"
#include "common/status.h"
#include "prefetch/row_prefetcher.h"
#include "train/device_rows.h"
#include "train/task.h"

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

// The device cache's oracle (DeviceRows::wants_lookahead): before step s is staged, appends to
// its window the steps from `appended` (the first not appended yet; it advances) through
// s + kDeviceLookahead, below `end`, as far as `keys_of(u)` gives step u's distinct rows without
// waiting (nullptr: not filled yet). Step s is ready, so it is always appended.
template <class KeysOf>
void AppendLookahead(DeviceRows& rows, uint64_t s, uint64_t end, uint64_t& appended, const KeysOf& keys_of) {
  if (!rows.wants_lookahead()) return;
  for (appended = std::max(appended, s); appended < end && appended <= s + kDeviceLookahead; ++appended) {
    const std::vector<RowKey>* keys = keys_of(appended);
    if (keys == nullptr) break;
    rows.Lookahead(*keys);
  }
  SLUICE_CHECK(appended > s, "device pass: step %llu is ready but not filled", static_cast<unsigned long long>(s));
}

// A training pass of steps [first, steps) on a device, fed by a row pipeline already started
// (WaitReady, Peek, Computed, Abort): each step staged, launched and finished by the task (with
// the device cache's oracle, the steps the sampler has filled appended to its window first); its
// units and loss go to the sink once its updates are in place, then the pipeline may refill
// its slot. Every task's device pass; `finish_pass` stops the pipeline and adds its times.
template <class Batch, class Pipeline>
struct DevicePass {
  Pipeline* pipeline = nullptr;
  DeviceRows* rows = nullptr;
  uint64_t first = 0, steps = 0;
  std::function<Status(Batch&)> stage;
  std::function<Status(uint64_t step, Batch&)> launch;
  std::function<Result<double>(Batch&)> finish;  // waits for the step; its mean loss
  std::function<uint32_t(const Batch&)> units;
  std::function<Status(Pipeline&)> finish_pass;
};

template <class Batch, class Pipeline>
Result<EpochOutcome> RunDevicePass(const DevicePass<Batch, Pipeline>& d, StepSink& sink, double& wall_s) {
  const auto start = SteadyClock::now();
  Pipeline& p = *d.pipeline;
  const uint64_t first = d.first, steps = d.steps;
  DeviceLoop<Batch> loop;
  loop.ready = [&](uint64_t s) -> Result<Batch*> {
    Status st;
    Batch* b = p.WaitReady(s - first, st);
    if (b == nullptr) return st;
    return b;
  };
  uint64_t appended = first;  // the device cache's oracle: steps appended to its window so far
  loop.stage = [&](uint64_t s, Batch& b) {
    AppendLookahead(*d.rows, s, steps, appended, [&](uint64_t u) -> const std::vector<RowKey>* {
      const RowBatch* later = p.Peek(u - first);
      return later != nullptr ? &later->unique : nullptr;
    });
    return d.stage(b);
  };
  loop.launch = [&](uint64_t s, Batch& b) { return d.launch(s, b); };
  loop.finish = [&](uint64_t s, Batch& b) -> Result<bool> {
    SLUICE_ASSIGN_OR_RETURN(const double loss, d.finish(b));
    const uint32_t n = d.units(b);  // the slot is refilled once the step is computed
    p.Computed(s - first);
    const bool last = s + 1 == steps;
    return sink.StepDone(n, loss * n, last) && !last;
  };
  // Step t + 1's plan never evicts step t's rows (run-ahead at least 1), so it is ready without
  // waiting for step t.
  loop.overlap = [](uint64_t) { return true; };
  Result<uint64_t> end = RunDeviceSteps(first, steps, loop);
  wall_s += SecondsSince(start);
  if (!end.ok()) {
    d.rows->Reset();
    p.Abort(end.status());
    (void)d.finish_pass(p);
    return end.status();
  }
  if (*end < steps) d.rows->Reset();  // a staged step is dropped
  SLUICE_RETURN_IF_ERROR(d.finish_pass(p));
  return *end < steps ? EpochOutcome{true, *end} : EpochOutcome{};
}

}  // namespace sluice
