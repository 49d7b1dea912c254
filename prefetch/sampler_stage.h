#pragma once
// The sampler stage: stage 0 of a RunAheadRing, a thread that fills each step's payload (link
// prediction's queries, negatives and unique rows; DLRM's records and keys; k-hop sampled
// blocks) ahead of the later stages and of compute. For t = 0, 1, ...: Reserve(t), Fill into
// slot t % capacity, Publish(0, t). Fill returns false when the pass has no step t (the stage
// Ends there); an error aborts the pass with it.
//
// The slots belong to the stage; a slot is written only between its Reserve and Publish and
// read by later stages and compute between Publish and Computed. Thread safety: slot(t) may be
// used by any thread that has waited for step t; time() after Join.

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "prefetch/run_ahead_ring.h"

namespace sluice {

template <class Payload>
class SamplerStage {
 public:
  using Fill = std::function<Result<bool>(uint64_t t, Payload& out)>;

  // `ring` must outlive the stage; its capacity is the number of slots.
  SamplerStage(RunAheadRing* ring, Fill fill)
      : ring_(ring), fill_(std::move(fill)), slots_(ring->capacity()) {}
  ~SamplerStage() {
    if (thread_.joinable()) {
      ring_->Abort(Aborted("sampler stage destroyed while running"));
      thread_.join();
    }
  }
  SamplerStage(const SamplerStage&) = delete;
  SamplerStage& operator=(const SamplerStage&) = delete;

  void Start() { thread_ = std::thread([this] { Run(); }); }
  // Waits for the thread (after the ring ended, stopped or aborted).
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  Payload& slot(uint64_t t) { return slots_[t % slots_.size()]; }
  const StageTime& time() const { return time_; }

 private:
  void Run() {
    for (uint64_t t = 0;; ++t) {
      const auto wait = SteadyClock::now();
      if (ring_->Reserve(t) != RingWait::kOk) return;
      time_.wait_s += SecondsSince(wait);
      const auto busy = SteadyClock::now();
      Result<bool> more = fill_(t, slot(t));
      time_.busy_s += SecondsSince(busy);
      if (!more.ok()) {
        ring_->Abort(more.status());
        return;
      }
      if (!*more) {
        ring_->End(0, t);
        return;
      }
      ring_->Publish(0, t);
    }
  }

  RunAheadRing* ring_;
  Fill fill_;
  std::vector<Payload> slots_;
  std::thread thread_;
  StageTime time_;
};

}  // namespace sluice
