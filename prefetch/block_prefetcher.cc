#include "prefetch/block_prefetcher.h"

#include "common/clock.h"
#include "common/thread_plan.h"

namespace sluice {

BlockPrefetcher::BlockPrefetcher(BlockCache* cache, PrefetcherOptions options, StepSource source,
                                 RunAheadRing* ring, uint32_t stage)
    : cache_(cache), options_(std::move(options)), source_(std::move(source)), ring_(ring),
      stage_(stage) {}

BlockPrefetcher::~BlockPrefetcher() {
  if (thread_.joinable()) {
    ring_->Abort(Aborted("block prefetcher destroyed while running"));
    thread_.join();
  }
}

void BlockPrefetcher::Start() {
  thread_ = std::thread([this] {
    NameThisThread("sluice-blocks");
    // A ring belongs to the thread that submits to it (io_uring's single-issuer rule).
    auto session = IoSession::Create(options_.io);
    status_ = session.ok() ? Status::Ok() : session.status();
    if (status_.ok()) {
      io_session_ = std::move(*session);
      status_ = RunSteps();
      io_session_.reset();
    }
    if (!status_.ok()) ring_->Abort(status_);
  });
}

Status BlockPrefetcher::Join() {
  if (thread_.joinable()) thread_.join();
  return status_;
}

bool BlockPrefetcher::Feed(HeapPlanner& planner, uint64_t& appended, bool& more) {
  std::vector<BlockId> blocks;
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
  return more;
}

Status BlockPrefetcher::RunSteps() {
  PlannerOptions po;
  po.capacity_blocks = cache_->capacity_blocks();
  po.window_steps = options_.window_steps;
  po.protect_steps = options_.run_ahead;
  HeapPlanner planner(options_.planner, cache_->num_blocks(), po);
  for (const BlockCache::Resident& r : cache_->Residents()) planner.Adopt(r.block, r.slot, r.dirty);
  uint64_t appended = 0;
  bool more = true;
  for (uint64_t t = 0;; ++t) {
    auto start = SteadyClock::now();
    Feed(planner, appended, more);
    if (t >= appended) {
      ring_->End(stage_, appended);
      return Status::Ok();
    }
    Plan plan;
    SLUICE_RETURN_IF_ERROR(planner.PlanNext(plan));
    plan_stats_.steps += plan.stats.steps;
    plan_stats_.accesses += plan.stats.accesses;
    plan_stats_.loads += plan.stats.loads;
    if (t < kPassHeadSteps) head_loads_ += plan.stats.loads;
    plan_stats_.evictions += plan.stats.evictions;
    plan_stats_.write_backs += plan.stats.write_backs;
    plan_.busy_s += SecondsSince(start);
    // A step without io publishes at once: waking at every step to find nothing to do cost
    // compute several percent with steps of a few milliseconds.
    if (plan.loads.empty() && plan.evictions.empty()) {
      ring_->Publish(stage_, t);
      continue;
    }
    // Wait until the blocks this step evicts are final: compute has passed t - run_ahead (or
    // has stopped for good: the planned io still runs, so the cache stays consistent).
    start = SteadyClock::now();
    const RingWait w = ring_->WaitComputed(t > options_.run_ahead ? t - options_.run_ahead : 0);
    io_.wait_s += SecondsSince(start);
    if (w == RingWait::kAborted) return Status::Ok();
    start = SteadyClock::now();
    SLUICE_RETURN_IF_ERROR(cache_->RunIo(*io_session_, plan, 0, 1));
    io_.busy_s += SecondsSince(start);
    if (w == RingWait::kStopped) return Status::Ok();
    ring_->Publish(stage_, t);
  }
}

Status BlockPrefetcher::FlushDirty() {
  SLUICE_ASSIGN_OR_RETURN(auto session, IoSession::Create(options_.io));  // this thread's ring
  return cache_->FlushDirty(*session);
}

}  // namespace sluice
