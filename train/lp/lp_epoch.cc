#include "train/lp/lp_epoch.h"

#include <memory>
#include <vector>

#include "common/clock.h"
#include "prefetch/block_pipeline.h"
#include "prefetch/row_pipeline.h"
#include "storage/io_session.h"
#include "train/device_steps.h"

namespace sluice {
namespace {

constexpr uint32_t kNoState = ~uint32_t{0};

// A step through the row cache: its samples, and its rows this process owns as keys.
struct LpRowStep {
  LinkBatch link;
  RowBatch rows;
  static RowBatch& RowsOf(LpRowStep& p) { return p.rows; }
};

class LpEpoch {
 public:
  LpEpoch(LpEpochContext& ctx, uint64_t epoch, uint64_t first_step)
      : ctx_(ctx), epoch_(epoch), first_(first_step), reader_(&ctx.schedule, epoch),
        block_base_(ctx.layout.num_blocks(), nullptr) {}

  Status Start();
  Result<EpochOutcome> Run(StepSink& sink);
  // The same steps on a device: step t + 1 staged while step t computes, unless it starts
  // another buffer state (whose partitions may evict step t's).
  Result<EpochOutcome> RunOnDevice(StepSink& sink);

 private:
  Result<bool> Fill(uint64_t t, LinkBatch& batch);
  // Data parallel out of core: the step's rows this process owns, in the order the stepper
  // meets them (first occurrence), as the row cache's keys.
  void OwnKeys(LpRowStep& p) const;
  void StartRowPipeline();
  uint64_t EdgesBefore() const;
  Status TellNext(uint64_t s);
  Result<LinkBatch*> Ready(uint64_t s);
  Result<bool> Done(uint64_t s, double loss, StepSink& sink);
  Status Finish();

  LpEpochContext& ctx_;
  const uint64_t epoch_, first_;
  std::vector<EdgeState> states_;
  std::vector<EdgeStep> steps_;
  EdgeReader reader_;                  // the sampler stage's
  StateEdges edges_;                   // the sampler stage's: its current state's edges
  uint32_t loaded_state_ = kNoState;   // the sampler stage's
  uint32_t graph_state_ = kNoState;    // the sampler stage's: the neighbours' graph's state
  StateEdges nbr_edges_;               // the sampler stage's: the neighbours' graph's edges
  std::vector<std::byte*> block_base_;
  std::unique_ptr<BlockPipeline<LinkBatch>> pipe_;
  std::unique_ptr<RowPipeline<LpRowStep>> rows_pipe_;  // data parallel out of core
};

// The sampler stage: step first + t's samples, its state's edges read (ahead, usually) when the
// state begins, and the next state's read started.
Result<bool> LpEpoch::Fill(uint64_t t, LinkBatch& batch) {
  const uint64_t s = first_ + t;
  if (s >= steps_.size()) return false;
  const EdgeStep& step = steps_[s];
  if (step.state != loaded_state_) {
    SLUICE_RETURN_IF_ERROR(reader_.Take(step.state, states_[step.state], edges_));
    loaded_state_ = step.state;
    uint64_t next = s + 1;
    while (next < steps_.size() && steps_[next].state == step.state) ++next;
    if (next < steps_.size()) reader_.Prefetch(steps_[next].state, &states_[steps_[next].state]);
  }
  const EdgeSchedule& sc = ctx_.schedule;
  const bool held = !edges_.src.empty();  // the partition schedule's state edges
  const EdgeColumns columns{held ? edges_.src.data() : sc.src().data(),
                            held ? edges_.rel.data() : sc.rel().data(),
                            held ? edges_.dst.data() : sc.dst().data(), edges_.order.data()};
  ctx_.sampler.Sample(columns, step.begin, step.end, epoch_, s, sc.NodeRanges(states_[step.state]),
                      batch);
  if (ctx_.neighbors != nullptr) {
    if (graph_state_ != step.state) {  // every edge among the state's partitions
      if (held) {
        // A session of its own each time: the stage's steps may run on different threads, and
        // a ring takes submissions from the thread that made it.
        SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<IoSession> io, IoSession::Create(ctx_.config.io));
        SLUICE_RETURN_IF_ERROR(sc.LoadStateEdges(*io, epoch_, sc.ResidentState(states_[step.state]),
                                                 nbr_edges_));
        ctx_.neighbors->SetGraph(nbr_edges_.src, nbr_edges_.dst);
      } else {
        ctx_.neighbors->SetGraph(sc.src(), sc.dst());
      }
      graph_state_ = step.state;
    }
    ctx_.neighbors->Sample(epoch_, s, batch);
  }
  return true;
}

void LpEpoch::OwnKeys(LpRowStep& p) const {
  const LpRowCache& rc = *ctx_.rows;
  for (const int64_t v : p.link.unique) {
    const uint64_t row = ctx_.layout.row_of(v);
    if (row >= rc.own_begin && row < rc.own_end) p.rows.keys.push_back(RowKey{row, 0});
  }
  p.rows.keys_distinct = true;  // the step's unique nodes, each a row
  p.rows.samples = static_cast<uint32_t>(p.link.edges);
}

void LpEpoch::StartRowPipeline() {
  const LpRowCache& rc = *ctx_.rows;
  RowPrefetcherOptions po;
  po.run_ahead = rc.run_ahead;
  po.writes = true;
  po.io = ctx_.config.io;
  rc.cache->SetProtectSteps(rc.run_ahead);
  rows_pipe_ = std::make_unique<RowPipeline<LpRowStep>>(
      rc.cache, rc.arena, ctx_.layout.row_bytes, rc.backing, po,
      [this](uint64_t t, LpRowStep& p) -> Result<bool> {
        SLUICE_ASSIGN_OR_RETURN(const bool more, Fill(t, p.link));
        if (more) OwnKeys(p);
        return more;
      },
      &LpRowStep::RowsOf);
  rows_pipe_->Start();
}

Status LpEpoch::Start() {
  steps_ = ctx_.schedule.EpochSteps(epoch_, states_);
  const uint64_t max_steps = ctx_.config.train.max_steps;
  if (max_steps > 0 && steps_.size() > max_steps) steps_.resize(max_steps);
  if (ctx_.rows != nullptr) {
    StartRowPipeline();
    return Status::Ok();
  }
  const uint32_t p = ctx_.layout.num_blocks();
  PrefetcherOptions po;
  uint32_t run_ahead = 0;
  if (ctx_.cache == nullptr) {
    for (BlockId b = 0; b < p && ctx_.memory_table != nullptr; ++b) {  // null: the stepper holds the rows
      block_base_[b] = ctx_.memory_table + uint64_t{b} * ctx_.layout.block_bytes();
    }
  } else {
    const LpStorageConfig& sc = ctx_.config.storage;
    po.planner = sc.planner;
    run_ahead = EffectiveRunAhead(steps_, states_, p, ctx_.slots, static_cast<uint32_t>(sc.run_ahead));
    po.run_ahead = run_ahead;
    po.io = ctx_.config.io;
    po.window_steps = 4096;
  }
  pipe_ = std::make_unique<BlockPipeline<LinkBatch>>(
      ctx_.cache, po, BlockPipeline<LinkBatch>::Capacity(run_ahead),
      [this](uint64_t t, LinkBatch& b) { return Fill(t, b); },
      [this](uint64_t t, std::vector<BlockId>& blocks) {
        if (t + first_ >= steps_.size()) return false;
        const EdgeState& st = states_[steps_[t + first_].state];
        blocks.insert(blocks.end(), st.blocks.begin(), st.blocks.end());
        return true;
      },
      StageMode::kTask);  // steps of a few ms: sampling takes turns with compute's chunks
  pipe_->Start();
  return Status::Ok();
}

uint64_t LpEpoch::EdgesBefore() const {
  uint64_t before = 0;
  for (uint64_t i = 0; i < first_ && i < steps_.size(); ++i) before += steps_[i].end - steps_[i].begin;
  return before;
}

// Step s's batch, its state's blocks in place.
Result<LinkBatch*> LpEpoch::Ready(uint64_t s) {
  if (rows_pipe_ != nullptr) {  // the step's own rows in the row cache
    Status st;
    LpRowStep* p = rows_pipe_->WaitReady(s - first_, st);
    if (p == nullptr) return st;
    ctx_.stepper.OwnRowsOfStep(&p->rows.rows);
    return &p->link;
  }
  SLUICE_ASSIGN_OR_RETURN(LinkBatch* batch, pipe_->WaitReady(s - first_));
  if (ctx_.cache != nullptr) {
    for (BlockId b : states_[steps_[s].state].blocks) block_base_[b] = ctx_.cache->block_data(b);
  }
  return batch;
}

// Step s has updated its rows: its blocks are dirty, the step computed; true: stop after it.
Result<bool> LpEpoch::Done(uint64_t s, double loss, StepSink& sink) {
  const EdgeStep& step = steps_[s];
  if (rows_pipe_ != nullptr) {  // its rows were planned dirty
    ctx_.stepper.OwnRowsOfStep(nullptr);
    rows_pipe_->Computed(s - first_);
  } else {
    if (ctx_.cache != nullptr) {
      for (BlockId b : states_[step.state].blocks) ctx_.cache->MarkDirty(b);
    }
    pipe_->Computed(s - first_);
  }
  const uint64_t edges = step.end - step.begin;
  const bool last = s + 1 == steps_.size();
  return sink.StepDone(edges, loss * static_cast<double>(edges), last) && !last;
}

// Data parallel: step s, ready while step s - 1 computes, so its rows that step s - 1 does not
// use can travel meanwhile; the stepper is told (LpStepper::NextStep).
Status LpEpoch::TellNext(uint64_t s) {
  if (rows_pipe_ != nullptr) {  // its rows in the row cache, loaded run_ahead steps ahead
    Status st;
    LpRowStep* p = rows_pipe_->WaitReady(s - first_, st);
    if (p == nullptr) return st;
    ctx_.stepper.NextStep(&p->link, &p->rows.rows, s);
    return Status::Ok();
  }
  SLUICE_ASSIGN_OR_RETURN(LinkBatch* batch, pipe_->WaitReady(s - first_));
  ctx_.stepper.NextStep(batch, nullptr, s);
  return Status::Ok();
}

Result<EpochOutcome> LpEpoch::Run(StepSink& sink) {
  if (ctx_.device_rows != nullptr) return RunOnDevice(sink);
  sink.EpochStart(EdgesBefore());
  // In memory the ring holds steps s and s + 1; the row cache's pipeline says when it can.
  const bool ahead = ctx_.stepper.sends_rows_ahead(ctx_.config.dist.prefetch_rows) &&
                     (rows_pipe_ == nullptr || rows_pipe_->NextReadyEarly());
  for (uint64_t s = first_; s < steps_.size(); ++s) {
    SLUICE_ASSIGN_OR_RETURN(LinkBatch* batch, Ready(s));
    if (ahead && s + 1 < steps_.size()) SLUICE_RETURN_IF_ERROR(TellNext(s + 1));
    SLUICE_ASSIGN_OR_RETURN(const double loss, ctx_.stepper.Train(*batch, block_base_, epoch_, s));
    SLUICE_ASSIGN_OR_RETURN(const bool stop, Done(s, loss, sink));
    if (stop) {
      SLUICE_RETURN_IF_ERROR(ctx_.stepper.DropPrefetch());  // every rank stops after this step
      SLUICE_RETURN_IF_ERROR(Finish());
      return EpochOutcome{true, s + 1};
    }
  }
  SLUICE_RETURN_IF_ERROR(Finish());
  return EpochOutcome{};
}

Result<EpochOutcome> LpEpoch::RunOnDevice(StepSink& sink) {
  const auto start = SteadyClock::now();
  sink.EpochStart(EdgesBefore());
  LpStepper& stepper = ctx_.stepper;
  DeviceLoop<LinkBatch> loop;
  loop.ready = [this](uint64_t s) { return Ready(s); };
  uint64_t appended = first_;  // the device cache's oracle: steps appended to its window so far
  std::vector<RowKey> keys;
  auto keys_of = [&](uint64_t u) -> const std::vector<RowKey>* {  // as LpStepper::Stage keys them
    const LinkBatch* later = nullptr;
    if (rows_pipe_ != nullptr) {
      const LpRowStep* p = rows_pipe_->PeekPayload(u - first_);
      later = p != nullptr ? &p->link : nullptr;
    } else {
      later = pipe_->Peek(u - first_);
    }
    if (later == nullptr) return nullptr;
    keys.resize(later->unique.size());
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = RowKey{static_cast<uint64_t>(later->unique[i]), 0};
    return &keys;
  };
  loop.stage = [&](uint64_t s, LinkBatch& b) {
    AppendLookahead(*ctx_.device_rows, s, steps_.size(), appended, keys_of);
    return stepper.Stage(b, block_base_);
  };
  loop.launch = [&](uint64_t s, LinkBatch& b) { return stepper.Launch(b, epoch_, s); };
  loop.finish = [&](uint64_t s, LinkBatch&) -> Result<bool> {
    SLUICE_ASSIGN_OR_RETURN(const double loss, stepper.Finish());
    return Done(s, loss, sink);
  };
  loop.overlap = [this](uint64_t s) { return steps_[s + 1].state == steps_[s].state; };
  Result<uint64_t> end = RunDeviceSteps(first_, steps_.size(), loop);
  ctx_.stats.device_wall_s += SecondsSince(start);
  if (!end.ok()) {
    ctx_.device_rows->Reset();
    pipe_->Abort(end.status());
    (void)pipe_->Stop();
    return end.status();
  }
  const bool stopped = *end < steps_.size();
  if (stopped) ctx_.device_rows->Reset();  // a staged step is dropped
  SLUICE_RETURN_IF_ERROR(Finish());
  return stopped ? EpochOutcome{true, *end} : EpochOutcome{};
}

Status LpEpoch::Finish() {
  LpEpochStats& st = ctx_.stats;
  if (rows_pipe_ != nullptr) {  // the rows stay in the cache for the next epoch
    Status s = rows_pipe_->Stop();
    st.wait_s += rows_pipe_->compute_wait_s();
    st.sampler.busy_s += rows_pipe_->read_time().busy_s, st.sampler.wait_s += rows_pipe_->read_time().wait_s;
    st.edges.busy_s += reader_.time().busy_s, st.edges.wait_s += reader_.time().wait_s;
    st.plan.busy_s += rows_pipe_->plan_time().busy_s, st.plan.wait_s += rows_pipe_->plan_time().wait_s;
    st.io.busy_s += rows_pipe_->io_time().busy_s, st.io.wait_s += rows_pipe_->io_time().wait_s;
    st.rows_loaded += rows_pipe_->rows_loaded(), st.rows_written += rows_pipe_->rows_written();
    if (first_ == 0) st.epoch_start_loads.push_back(rows_pipe_->head_loads());
    return s;
  }
  SLUICE_RETURN_IF_ERROR(pipe_->Stop());
  st.wait_s += pipe_->compute_wait_s();
  st.sampler.busy_s += pipe_->sampler_time().busy_s;
  st.sampler.wait_s += pipe_->sampler_time().wait_s;
  st.edges.busy_s += reader_.time().busy_s;
  st.edges.wait_s += reader_.time().wait_s;
  const BlockPrefetcher* pf = pipe_->prefetcher();
  if (pf == nullptr) return Status::Ok();
  const PlanStats& ps = pf->plan_stats();
  st.plan_stats.steps += ps.steps, st.plan_stats.accesses += ps.accesses;
  st.plan_stats.loads += ps.loads, st.plan_stats.evictions += ps.evictions;
  st.plan_stats.write_backs += ps.write_backs;
  st.plan.busy_s += pf->plan_time().busy_s, st.plan.wait_s += pf->plan_time().wait_s;
  st.io.busy_s += pf->io_time().busy_s, st.io.wait_s += pf->io_time().wait_s;
  if (first_ == 0) st.epoch_start_loads.push_back(pf->head_loads());
  // The partitions stay resident (dirty ones too): the next epoch's planner adopts them, and
  // its ordering begins with this epoch's last buffer state (EdgeSchedule::EpochSteps). Without
  // carry_over the next epoch starts from an empty cache.
  if (ctx_.config.storage.carry_over) return Status::Ok();
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
