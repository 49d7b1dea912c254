#pragma once
// The sampler stage: stage 0 of a RunAheadRing. It fills each step's payload (link
// prediction's queries, negatives and unique rows; DLRM's records and keys; k-hop sampled
// blocks) ahead of the later stages and of compute. For t = 0, 1, ...: reserve slot t, Fill
// into slot t % capacity, Publish(0, t). Fill returns false when the pass has no step t (the
// stage Ends there); an error aborts the pass with it.
//
// Two ways to run (StageMode):
//   kThread  a thread of its own, blocking in Reserve. For stages whose steps are long (k-hop
//            sampling), so they run beside compute whatever it does.
//   kTask    no thread: compute calls Kick() after each Computed(t), which starts (when none is
//            pending) a TBB task in compute's own pool that fills every step it can reserve.
//            For steps of a few milliseconds on few cores: a third runnable thread preempts
//            one of compute's TBB threads in the middle of a parallel loop and the whole step
//            waits for it; a task takes its turn between chunks instead. Compute calls Help()
//            before waiting for a step, so a pass also runs with a single TBB thread.
//
// The slots belong to the stage; a slot is written only between its reserve and Publish and
// read by later stages and compute between Publish and Computed. Thread safety: slot(t) may be
// used by any thread that has waited for step t; Start/Kick/Help/Join from the compute thread;
// time() after Join.

#include <tbb/task_group.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/thread_plan.h"
#include "common/status.h"
#include "prefetch/run_ahead_ring.h"

namespace sluice {

enum class StageMode { kThread, kTask };

template <class Payload>
class SamplerStage {
 public:
  using Fill = std::function<Result<bool>(uint64_t t, Payload& out)>;

  // `ring` must outlive the stage; its capacity is the number of slots.
  SamplerStage(RunAheadRing* ring, Fill fill, StageMode mode = StageMode::kThread)
      : ring_(ring), fill_(std::move(fill)), slots_(ring->capacity()), mode_(mode) {}
  ~SamplerStage() {
    if (thread_.joinable() || mode_ == StageMode::kTask) {
      ring_->Abort(Aborted("sampler stage destroyed while running"));
      Join();
    }
  }
  SamplerStage(const SamplerStage&) = delete;
  SamplerStage& operator=(const SamplerStage&) = delete;

  void Start() {
    if (mode_ == StageMode::kThread) {
      thread_ = std::thread([this] {
        NameThisThread("sluice-sampler");
        RunThread();
      });
    } else {
      Kick();
    }
  }
  // kTask: a slot may have come free (compute called Computed): fill what can be filled.
  void Kick() {
    if (mode_ != StageMode::kTask || done_.load(std::memory_order_acquire)) return;
    if (scheduled_.exchange(true, std::memory_order_acq_rel)) return;  // the pending one re-checks
    group_.run([this] { RunTask(); });
  }
  // kTask: compute is about to wait for step t: when it is not filled yet, run (or wait for)
  // the pending fill here.
  void Help(uint64_t t) {
    if (mode_ != StageMode::kTask || filled_.load(std::memory_order_acquire) > t) return;
    group_.wait();
  }
  // Waits for the stage (after the ring ended, stopped or aborted).
  void Join() {
    if (thread_.joinable()) thread_.join();
    if (mode_ == StageMode::kTask) group_.wait();
  }
  Payload& slot(uint64_t t) { return slots_[t % slots_.size()]; }
  const StageTime& time() const { return time_; }
  StageMode mode() const { return mode_; }

 private:
  // Fills step t: false when the stage is done (ended or aborted).
  bool FillOne(uint64_t t) {
    const auto busy = SteadyClock::now();
    Result<bool> more = fill_(t, slot(t));
    time_.busy_s += SecondsSince(busy);
    if (!more.ok()) {
      ring_->Abort(more.status());
      return false;
    }
    if (!*more) {
      ring_->End(0, t);
      return false;
    }
    ring_->Publish(0, t);
    filled_.store(t + 1, std::memory_order_release);
    return true;
  }

  void RunThread() {
    for (uint64_t t = 0;; ++t) {
      const auto wait = SteadyClock::now();
      if (ring_->Reserve(t) != RingWait::kOk) return;
      time_.wait_s += SecondsSince(wait);
      if (!FillOne(t)) return;
    }
  }

  // One task at a time (scheduled_): fills every reservable step, then re-checks after
  // clearing scheduled_ so that a Kick that saw it still set is not lost.
  void RunTask() {
    for (;;) {
      uint64_t t = next_.load(std::memory_order_relaxed);
      for (RingWait w; (w = ring_->TryReserve(t)) != RingWait::kFull; ++t) {
        if (w != RingWait::kOk || !FillOne(t)) {
          done_.store(true, std::memory_order_release);
          break;
        }
      }
      next_.store(t, std::memory_order_relaxed);
      scheduled_.store(false, std::memory_order_release);
      if (done_.load(std::memory_order_acquire) || ring_->TryReserve(t) != RingWait::kOk) return;
      if (scheduled_.exchange(true, std::memory_order_acq_rel)) return;  // a new task took over
    }
  }

  RunAheadRing* ring_;
  Fill fill_;
  std::vector<Payload> slots_;
  const StageMode mode_;
  std::thread thread_;
  tbb::task_group group_;
  std::atomic<bool> scheduled_{false};
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> next_{0};    // kTask: the next step to fill
  std::atomic<uint64_t> filled_{0};  // steps [0, filled_) published
  StageTime time_;
};

}  // namespace sluice
