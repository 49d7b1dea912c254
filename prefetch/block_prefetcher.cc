#include "prefetch/block_prefetcher.h"

#include <chrono>

namespace sluice {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

BlockPrefetcher::BlockPrefetcher(BlockCache* cache, PrefetcherOptions options, StepSource source)
    : cache_(cache), options_(std::move(options)), source_(std::move(source)) {}

BlockPrefetcher::~BlockPrefetcher() {
  Abort();
  if (thread_.joinable()) thread_.join();
}

Status BlockPrefetcher::Start() {
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void BlockPrefetcher::Run() {
  // A ring belongs to the thread that submits to it (io_uring's single-issuer rule).
  auto session = IoSession::Create(options_.io);
  Status s = session.ok() ? Status::Ok() : session.status();
  if (s.ok()) {
    io_session_ = std::move(*session);
    s = RunSteps();
    io_session_.reset();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok() && error_.ok()) error_ = s;
  finished_ = true;
  cv_.notify_all();
}

Status BlockPrefetcher::RunSteps() {
  PlannerOptions po;
  po.capacity_blocks = cache_->capacity_blocks();
  po.window_steps = options_.window_steps;
  po.protect_steps = options_.run_ahead;
  HeapPlanner planner(options_.planner, cache_->num_blocks(), po);
  std::vector<BlockId> blocks;
  uint64_t appended = 0;
  bool more = true;
  for (uint64_t t = 0;; ++t) {
    auto start = std::chrono::steady_clock::now();
    while (more && !planner.Ready()) {
      blocks.clear();
      if (source_(appended, blocks)) {
        planner.Append(blocks, /*writes=*/true);
        ++appended;
      } else {
        more = false;
        planner.Finish();
      }
    }
    if (t >= appended) {
      std::lock_guard<std::mutex> lock(mu_);
      total_steps_ = appended;
      cv_.notify_all();
      return Status::Ok();
    }
    Plan plan;
    SLUICE_RETURN_IF_ERROR(planner.PlanNext(plan));
    plan_stats_.steps += plan.stats.steps;
    plan_stats_.accesses += plan.stats.accesses;
    plan_stats_.loads += plan.stats.loads;
    plan_stats_.evictions += plan.stats.evictions;
    plan_stats_.write_backs += plan.stats.write_backs;
    plan_.busy_s += Since(start);
    // Wait until the blocks this step evicts are final: compute has passed t - run_ahead.
    start = std::chrono::steady_clock::now();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || computed_ + options_.run_ahead >= t; });
      if (stop_) return Aborted("prefetcher stopped");
    }
    io_.wait_s += Since(start);
    start = std::chrono::steady_clock::now();
    SLUICE_RETURN_IF_ERROR(cache_->RunIo(*io_session_, plan, 0, 1));
    io_.busy_s += Since(start);
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = t + 1;
    cv_.notify_all();
  }
}

Status BlockPrefetcher::WaitReady(uint64_t t) {
  auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_ > t || !error_.ok() || finished_ || stop_; });
  compute_wait_s_ += Since(start);
  if (ready_ > t) return Status::Ok();
  if (!error_.ok()) return error_;
  if (stop_) return Aborted("prefetcher stopped");
  return FailedPrecondition("step " + std::to_string(t) + " was never produced (the source ended at " +
                            std::to_string(total_steps_) + " steps)");
}

void BlockPrefetcher::Computed(uint64_t t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (t + 1 > computed_) computed_ = t + 1;
  cv_.notify_all();
}

Status BlockPrefetcher::Stop() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      computed_ = ~uint64_t{0} / 2;  // nothing computes any more: let io finish what it started
    }
    cv_.notify_all();
    thread_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok() && error_.code() != StatusCode::kAborted) return error_;
  return Status::Ok();
}

void BlockPrefetcher::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

Status BlockPrefetcher::FlushDirty() {
  SLUICE_ASSIGN_OR_RETURN(auto session, IoSession::Create(options_.io));  // this thread's ring
  return cache_->FlushDirty(*session);
}

}  // namespace sluice
