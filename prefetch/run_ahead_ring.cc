#include "prefetch/run_ahead_ring.h"

#include <algorithm>
#include <limits>

#include "common/check.h"
#include "common/clock.h"

namespace sluice {
namespace {
constexpr uint64_t kOpen = std::numeric_limits<uint64_t>::max();  // a stage not ended
}  // namespace

RunAheadRing::RunAheadRing(uint64_t capacity, uint32_t stages)
    : capacity_(capacity), published_(stages, 0), total_(stages, kOpen) {
  SLUICE_CHECK(capacity >= 1 && stages >= 1, "a run-ahead ring needs a slot and a stage");
}

RingWait RunAheadRing::Interrupted() const {
  if (aborted_) return RingWait::kAborted;
  if (stopped_) return RingWait::kStopped;
  return RingWait::kOk;
}

void RunAheadRing::Wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& pred) {
  if (pred()) return;
  waiters_.push_back(&pred);
  cv_.wait(lock, pred);
  waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &pred));
}

bool RunAheadRing::AnyWaiterReady() const {
  for (const std::function<bool()>* w : waiters_) {
    if ((*w)()) return true;
  }
  return false;
}

uint64_t RunAheadRing::ReadyLocked() const {
  return *std::min_element(published_.begin(), published_.end());
}

RingWait RunAheadRing::Reserve(uint64_t t) {
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [&] { return stopped_ || aborted_ || t < computed_ + capacity_; });
  return Interrupted();
}

RingWait RunAheadRing::TryReserve(uint64_t t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (RingWait w = Interrupted(); w != RingWait::kOk) return w;
  return t < computed_ + capacity_ ? RingWait::kOk : RingWait::kFull;
}

RingWait RunAheadRing::WaitPublished(uint32_t stage, uint64_t t) {
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [&] {
    return stopped_ || aborted_ || published_[stage] > t || total_[stage] <= t;
  });
  if (RingWait w = Interrupted(); w != RingWait::kOk) return w;
  return published_[stage] > t ? RingWait::kOk : RingWait::kEnded;
}

RingWait RunAheadRing::WaitComputed(uint64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [&] { return stopped_ || aborted_ || computed_ >= n; });
  if (aborted_) return RingWait::kAborted;
  return computed_ >= n ? RingWait::kOk : RingWait::kStopped;
}

void RunAheadRing::Publish(uint32_t stage, uint64_t t) {
  std::unique_lock<std::mutex> lock(mu_);
  SLUICE_CHECK(t == published_[stage], "stage %u published step %llu out of order", stage,
               static_cast<unsigned long long>(t));
  published_[stage] = t + 1;
  if (!AnyWaiterReady()) return;
  lock.unlock();
  cv_.notify_all();
}

void RunAheadRing::End(uint32_t stage, uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  total_[stage] = total;
  cv_.notify_all();
}

bool RunAheadRing::Published(uint32_t stage, uint64_t t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_[stage] > t;
}

Status RunAheadRing::WaitReady(uint64_t t) {
  const auto start = SteadyClock::now();
  std::unique_lock<std::mutex> lock(mu_);
  auto ended_before = [&] {
    for (uint64_t total : total_) {
      if (total <= t) return true;
    }
    return false;
  };
  Wait(lock, [&] { return aborted_ || stopped_ || ReadyLocked() > t || ended_before(); });
  compute_wait_s_ += SecondsSince(start);
  if (aborted_) return error_.ok() ? Aborted("pipeline aborted") : error_;
  if (ReadyLocked() > t) return Status::Ok();
  if (stopped_) return Aborted("pipeline stopped");
  uint64_t total = kOpen;
  for (uint64_t x : total_) total = std::min(total, x);
  return OutOfRange("step " + std::to_string(t) + " does not exist (the pass ended at " +
                    std::to_string(total) + " steps)");
}

void RunAheadRing::Computed(uint64_t t) {
  std::unique_lock<std::mutex> lock(mu_);
  computed_ = std::max(computed_, t + 1);
  if (!AnyWaiterReady()) return;
  lock.unlock();
  cv_.notify_all();
}

void RunAheadRing::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  cv_.notify_all();
}

void RunAheadRing::Abort(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) error_ = std::move(status);
  aborted_ = true;
  cv_.notify_all();
}

bool RunAheadRing::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

Status RunAheadRing::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

double RunAheadRing::compute_wait_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compute_wait_s_;
}

}  // namespace sluice
