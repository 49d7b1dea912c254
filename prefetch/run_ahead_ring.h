#pragma once
// The run-ahead ring: the one protocol between a pipeline's stages and compute, for the steps
// 0, 1, 2, ... of one pass (an epoch, an evaluation).
//
// Stages are numbered 0 .. stages-1 (e.g. 0: the sampler, 1: the planner and io). Each
// publishes the steps it finished, in order; a step is ready for compute once every stage has
// published it. Step t's payload lives in slot t % capacity (SamplerStage owns the slots).
// Compute calls Computed(t) once its updates are in place: only then may slot t be reused
// (Reserve(t + capacity)) and may io that depends on step t's final rows start
// (WaitComputed). Capacity is backpressure: no stage gets more than capacity steps ahead.
//
// Ending a pass:
//   End(stage, total)  the stage's source ran out: it has no step past `total`; compute's
//                      WaitReady(t >= total) returns OutOfRange.
//   Stop()             compute has stopped for good (the pass ends early). Waits return
//                      kStopped; a stage finishes the step in hand, including its io (a planned
//                      step's evictions are already counted by the cache, so its write-backs
//                      must happen), and ends. Safe only once compute touches no row any more.
//   Abort(status)      from any thread (a stage failed, or shutdown): waits return kAborted and
//                      stages return without further io; compute's WaitReady returns the
//                      status. The pass has failed: its cache contents are not to be flushed.
//
// Thread safety: every method may be called from any thread (one mutex, one condition
// variable). A change wakes the waiters only when one of them can go on: with steps of a few
// milliseconds, a wake-up of every waiter at every publish preempted compute's threads on a
// 2-core machine often enough to cost several percent.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace sluice {

// Seconds a stage spent working and waiting.
struct StageTime {
  double busy_s = 0;
  double wait_s = 0;
};

// What a stage's wait ended with (kFull: only from TryReserve, the slot is still in use).
enum class RingWait { kOk, kEnded, kStopped, kAborted, kFull };

class RunAheadRing {
 public:
  // Requires capacity >= 1 and stages >= 1.
  RunAheadRing(uint64_t capacity, uint32_t stages);
  RunAheadRing(const RunAheadRing&) = delete;
  RunAheadRing& operator=(const RunAheadRing&) = delete;

  uint64_t capacity() const { return capacity_; }
  uint32_t stages() const { return static_cast<uint32_t>(published_.size()); }

  // Stage side. Blocks until slot t is free (step t - capacity computed).
  RingWait Reserve(uint64_t t) EXCLUDES(mu_);
  // Reserve without blocking: kFull while step t - capacity is not computed yet.
  RingWait TryReserve(uint64_t t) EXCLUDES(mu_);
  // Blocks until `stage` has published step t (kEnded: it ended before t).
  RingWait WaitPublished(uint32_t stage, uint64_t t) EXCLUDES(mu_);
  // Blocks until compute has finished steps [0, n).
  RingWait WaitComputed(uint64_t n) EXCLUDES(mu_);
  void Publish(uint32_t stage, uint64_t t) EXCLUDES(mu_);
  void End(uint32_t stage, uint64_t total) EXCLUDES(mu_);

  // Whether `stage` has published step t (without waiting).
  bool Published(uint32_t stage, uint64_t t) const EXCLUDES(mu_);

  // Compute side. Ok when every stage published step t; else the abort status, Aborted when
  // stopped, OutOfRange when a stage ended before t.
  Status WaitReady(uint64_t t) EXCLUDES(mu_);
  void Computed(uint64_t t) EXCLUDES(mu_);

  void Stop() EXCLUDES(mu_);
  void Abort(Status status) EXCLUDES(mu_);
  bool aborted() const EXCLUDES(mu_);
  // The abort status (Ok when not aborted, or aborted without an error).
  Status error() const EXCLUDES(mu_);
  // Seconds compute spent in WaitReady.
  double compute_wait_s() const EXCLUDES(mu_);

 private:
  RingWait Interrupted() const REQUIRES(mu_);
  // Waits on cv_ until pred() holds, registered so that a change wakes it (only) when it can
  // go on.
  void Wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& pred) REQUIRES(mu_);
  // After a change under the lock: whether a registered waiter can now go on.
  bool AnyWaiterReady() const REQUIRES(mu_);
  uint64_t ReadyLocked() const REQUIRES(mu_);

  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> published_ GUARDED_BY(mu_);  // per stage: steps [0, n) published
  std::vector<uint64_t> total_ GUARDED_BY(mu_);      // per stage: its step count once ended
  uint64_t computed_ GUARDED_BY(mu_) = 0;            // steps [0, computed_) computed
  bool stopped_ GUARDED_BY(mu_) = false;
  bool aborted_ GUARDED_BY(mu_) = false;
  Status error_ GUARDED_BY(mu_);
  double compute_wait_s_ GUARDED_BY(mu_) = 0;
  std::vector<const std::function<bool()>*> waiters_ GUARDED_BY(mu_);
};

}  // namespace sluice
