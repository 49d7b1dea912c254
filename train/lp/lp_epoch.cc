#include "train/lp/lp_epoch.h"

#include <tbb/task_group.h>

#include <chrono>
#include <memory>

#include "common/clock.h"
#include "storage/io_session.h"

namespace sluice {
namespace {

using Clock = SteadyClock;

constexpr uint32_t kNoState = ~uint32_t{0};

class LpEpoch {
 public:
  LpEpoch(LpEpochContext& ctx, uint64_t epoch, uint64_t first_step)
      : ctx_(ctx), epoch_(epoch), first_(first_step),
        block_base_(ctx.layout.num_blocks(), nullptr) {}
  ~LpEpoch() {
    ahead_.wait();
    edges_ahead_.wait();
  }

  Status Start();
  Result<EpochOutcome> Run(StepSink& sink);

 private:
  Status WaitBlocks(uint64_t s);
  Status EnterState(uint64_t s);
  LpSampled TakeSample(uint64_t s);
  Status Finish(bool stopped);
  Status Fail(Status s) {
    if (prefetcher_ != nullptr) prefetcher_->Abort();
    return s;
  }

  LpEpochContext& ctx_;
  const uint64_t epoch_, first_;
  std::vector<LpState> states_;
  std::vector<LpStep> steps_;
  std::vector<std::byte*> block_base_;
  std::unique_ptr<BlockPrefetcher> prefetcher_;
  StateEdges state_edges_, next_edges_;  // the current buffer state's, and the next one's
  uint32_t loaded_state_ = kNoState, reading_state_ = kNoState;
  Status ahead_status_;
  bool sampling_next_ = false;
  LpSampled next_;
  tbb::task_group ahead_, edges_ahead_;
};

Status LpEpoch::Start() {
  steps_ = ctx_.schedule.EpochSteps(epoch_, states_);
  const uint32_t p = ctx_.layout.num_blocks();
  if (ctx_.cache == nullptr) {
    for (BlockId b = 0; b < p; ++b) {
      block_base_[b] = ctx_.memory_table + uint64_t{b} * ctx_.layout.block_bytes();
    }
    return Status::Ok();
  }
  const LpStorageConfig& sc = ctx_.config.storage;
  PrefetcherOptions po;
  SLUICE_ASSIGN_OR_RETURN(po.planner, ParsePlannerKind(sc.planner));
  po.run_ahead = EffectiveRunAhead(steps_, states_, p, ctx_.slots, static_cast<uint32_t>(sc.run_ahead));
  po.io = ctx_.config.io;
  po.window_steps = 4096;
  prefetcher_ = std::make_unique<BlockPrefetcher>(
      ctx_.cache, po, [this](uint64_t t, std::vector<BlockId>& blocks) {
        if (t + first_ >= steps_.size()) return false;
        const LpState& st = states_[steps_[t + first_].state];
        blocks.insert(blocks.end(), st.blocks.begin(), st.blocks.end());
        return true;
      });
  return prefetcher_->Start();
}

Status LpEpoch::WaitBlocks(uint64_t s) {
  if (prefetcher_ == nullptr) return Status::Ok();
  auto w = Clock::now();
  Status ready = prefetcher_->WaitReady(s - first_);
  ctx_.stats.wait_s += SecondsSince(w);
  if (!ready.ok()) return ready;
  for (BlockId b : states_[steps_[s].state].blocks) block_base_[b] = ctx_.cache->block_data(b);
  return Status::Ok();
}

// A new buffer state: its edges (read ahead, usually), and the next state's read on another
// worker while this one trains.
Status LpEpoch::EnterState(uint64_t s) {
  const uint32_t state = steps_[s].state;
  auto r = Clock::now();
  Status read;
  if (reading_state_ == state) {
    edges_ahead_.wait();
    read = ahead_status_;
    std::swap(state_edges_, next_edges_);
  } else {
    read = ctx_.schedule.LoadStateEdges(epoch_, states_[state], state_edges_);
  }
  reading_state_ = kNoState;
  ctx_.stats.edges_s += SecondsSince(r);
  if (!read.ok()) return read;
  loaded_state_ = state;
  uint64_t t = s + 1;
  while (t < steps_.size() && steps_[t].state == state) ++t;
  if (t < steps_.size()) {
    reading_state_ = steps_[t].state;
    edges_ahead_.run([this, next_state = reading_state_] {
      ahead_status_ = ctx_.schedule.LoadStateEdges(epoch_, states_[next_state], next_edges_);
    });
  }
  return Status::Ok();
}

// Step s's sample (taken a step ahead, usually); the next step's sampling starts on another
// worker (not across a change of buffer state).
LpSampled LpEpoch::TakeSample(uint64_t s) {
  LpSampled sampled;
  auto w = Clock::now();
  if (sampling_next_) {
    ahead_.wait();
    sampled = std::move(next_);
  } else {
    sampled = ctx_.stepper.Sample(steps_[s], state_edges_, ctx_.schedule, epoch_, s,
                                  states_[steps_[s].state].blocks);
  }
  ctx_.stats.sample_s += SecondsSince(w);
  sampling_next_ = s + 1 < steps_.size() && steps_[s + 1].state == steps_[s].state;
  if (sampling_next_) {
    ahead_.run([this, s] {
      next_ = ctx_.stepper.Sample(steps_[s + 1], state_edges_, ctx_.schedule, epoch_, s + 1,
                                  states_[steps_[s + 1].state].blocks);
    });
  }
  return sampled;
}

Result<EpochOutcome> LpEpoch::Run(StepSink& sink) {
  uint64_t before = 0;
  for (uint64_t i = 0; i < first_ && i < steps_.size(); ++i) before += steps_[i].end - steps_[i].begin;
  sink.EpochStart(before);
  for (uint64_t s = first_; s < steps_.size(); ++s) {
    const LpStep& step = steps_[s];
    if (Status w = WaitBlocks(s); !w.ok()) return Fail(w);
    if (step.state != loaded_state_) {
      if (Status e = EnterState(s); !e.ok()) return Fail(e);
    }
    LpSampled sampled = TakeSample(s);
    const uint64_t edges = step.end - step.begin;
    const double loss = ctx_.stepper.Train(sampled, block_base_) * static_cast<double>(edges);
    if (prefetcher_ != nullptr) {
      for (BlockId b : states_[step.state].blocks) ctx_.cache->MarkDirty(b);
      prefetcher_->Computed(s - first_);
    }
    const bool last = s + 1 == steps_.size();
    if (sink.StepDone(edges, loss, last) && !last) {
      SLUICE_RETURN_IF_ERROR(Finish(/*stopped=*/true));
      return EpochOutcome{true, s + 1};
    }
  }
  SLUICE_RETURN_IF_ERROR(Finish(/*stopped=*/false));
  return EpochOutcome{};
}

Status LpEpoch::Finish(bool stopped) {
  ahead_.wait();
  edges_ahead_.wait();
  if (prefetcher_ == nullptr) return Status::Ok();
  SLUICE_RETURN_IF_ERROR(prefetcher_->Stop());
  const PlanStats& ps = prefetcher_->plan_stats();
  LpEpochStats& st = ctx_.stats;
  st.plan.steps += ps.steps, st.plan.accesses += ps.accesses, st.plan.loads += ps.loads;
  st.plan.evictions += ps.evictions, st.plan.write_backs += ps.write_backs;
  st.plan_time.busy_s += prefetcher_->plan_time().busy_s;
  st.io_time.busy_s += prefetcher_->io_time().busy_s;
  st.io_time.wait_s += prefetcher_->io_time().wait_s;
  if (stopped) return Status::Ok();
  // The next epoch's planner starts from an empty cache.
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(ctx_.config.io));
  return ctx_.cache->DropAll(*io);
}

}  // namespace

Result<EpochOutcome> TrainLpEpoch(LpEpochContext& ctx, uint64_t epoch, uint64_t first_step,
                                  StepSink& sink) {
  LpEpoch run(ctx, epoch, first_step);
  SLUICE_RETURN_IF_ERROR(run.Start());
  return run.Run(sink);
}

}  // namespace sluice
