#pragma once
// A row-granular pass as one pipeline: a sampler stage fills each step's payload (its records
// and keys; a task may carry more, e.g. sampled blocks, in its payload type) and finds its
// distinct rows, the row prefetcher plans and loads them, compute trains on them; one
// RunAheadRing of window + run_ahead + 2 slots joins the three.
//
//   RowPipeline<RowBatch> p(cache, arena, row_bytes, backing, options, fill, Identity);
//   p.Start();
//   for (t = 0; ; ++t) { Status s; RowBatch* b = p.WaitReady(t, s); ...; p.Computed(t); }
//   p.Stop();
//
// Thread safety: WaitReady/Computed/Stop from the compute thread; Abort from any.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>

#include "prefetch/row_prefetcher.h"
#include "prefetch/run_ahead_ring.h"
#include "prefetch/sampler_stage.h"

namespace sluice {

template <class Payload>
class RowPipeline {
 public:
  // Fills step t's payload (records, samples and keys of its RowBatch; the batch is cleared
  // first and deduplicated after); false when the pass has no step t.
  using Fill = std::function<Result<bool>(uint64_t t, Payload& payload)>;
  using BatchOf = RowBatch& (*)(Payload&);

  // Out of core (see RowPrefetcher).
  RowPipeline(RowCache* cache, std::byte* arena, uint32_t row_bytes, RowBacking* backing,
              RowPrefetcherOptions options, Fill fill, BatchOf batch_of)
      : next_ready_early_(NextStepReadyEarly(options)),
        ring_(cache->options().window_steps + options.run_ahead + 2, 2),
        sampler_(&ring_, Wrap(std::move(fill), batch_of)),
        prefetcher_(cache, arena, row_bytes, backing, options, &ring_, 1,
                    [this, batch_of](uint64_t t) -> RowBatch& { return batch_of(sampler_.slot(t)); }),
        batch_of_(batch_of) {}
  // In memory.
  RowPipeline(MemoryRows* memory, RowPrefetcherOptions options, Fill fill, BatchOf batch_of)
      : next_ready_early_(true),  // no io waits for compute: the ring holds steps t and t + 1
        ring_(options.run_ahead + 2, 2),
        sampler_(&ring_, Wrap(std::move(fill), batch_of)),
        prefetcher_(memory, options, &ring_, 1,
                    [this, batch_of](uint64_t t) -> RowBatch& { return batch_of(sampler_.slot(t)); }),
        batch_of_(batch_of) {}
  ~RowPipeline() {
    if (!stopped_) ring_.Abort(Aborted("row pipeline destroyed while running"));
  }

  void Start() {
    sampler_.Start();
    prefetcher_.Start();
  }
  // Blocks until step t's rows are in place: its payload; nullptr with `status` set when the
  // pass ended before t (OutOfRange) or failed.
  Payload* WaitReady(uint64_t t, Status& status) {
    sampler_.Help(t);
    status = ring_.WaitReady(t);
    return status.ok() ? &sampler_.slot(t) : nullptr;
  }
  // Step t's batch once the sampler stage has filled it, without waiting (nullptr before): a
  // later step's distinct rows for a device cache's lookahead. Valid until Computed(t); call
  // only for steps not computed yet.
  const RowBatch* Peek(uint64_t t) {
    Payload* p = PeekPayload(t);
    return p != nullptr ? &batch_of_(*p) : nullptr;
  }
  Payload* PeekPayload(uint64_t t) { return ring_.Published(0, t) ? &sampler_.slot(t) : nullptr; }
  // Whether step t + 1 can be ready before Computed(t) (WaitReady(t + 1) would not wait for
  // it): in memory, or out of core when a step's io (its group's) may start run_ahead steps
  // before compute reaches it and run_ahead covers a group. Then step t + 1's rows stay in place
  // while step t computes (a plan evicts only rows last used run_ahead + 1 steps before it).
  bool NextReadyEarly() const { return next_ready_early_; }
  void Computed(uint64_t t) {
    ring_.Computed(t);
    sampler_.Kick();
  }
  // Compute has stopped for good: the stages finish the step in hand and end. Returns the
  // pass's error, if any (an abort from outside is none).
  Status Stop() {
    ring_.Stop();
    stopped_ = true;
    sampler_.Join();
    Status s = prefetcher_.Join();
    if (!s.ok()) return s;
    Status e = ring_.error();
    return e.ok() || e.code() == StatusCode::kAborted ? Status::Ok() : e;
  }
  void Abort(Status status) { ring_.Abort(std::move(status)); }

  StageTime read_time() const { return sampler_.time(); }  // source + dedupe
  StageTime plan_time() const { return prefetcher_.plan_time(); }
  StageTime io_time() const { return prefetcher_.io_time(); }
  double compute_wait_s() const { return ring_.compute_wait_s(); }
  uint64_t rows_loaded() const { return prefetcher_.rows_loaded(); }
  uint64_t head_loads() const { return prefetcher_.head_loads(); }
  uint64_t rows_written() const { return prefetcher_.rows_written(); }
  const IoStats& io_stats() const { return prefetcher_.io_stats(); }

  // The identity accessor, for Payload = RowBatch.
  static RowBatch& Identity(RowBatch& b) { return b; }

 private:
  typename SamplerStage<Payload>::Fill Wrap(Fill fill, BatchOf batch_of) {
    return [this, fill = std::move(fill), batch_of](uint64_t t, Payload& p) -> Result<bool> {
      RowBatch& b = batch_of(p);
      b.step = t;
      b.samples = 0;
      b.records.clear();
      b.keys.clear();
      b.keys_distinct = false;
      b.lookahead_only = false;
      SLUICE_ASSIGN_OR_RETURN(const bool more, fill(t, p));
      if (!more) return more;
      if (b.keys_distinct) {
        b.unique.swap(b.keys);
        b.keys.clear();
        b.inverse.clear();
      } else {
        deduper_.Dedupe(b);
      }
      return more;
    };
  }

  bool next_ready_early_;
  RunAheadRing ring_;
  RowDeduper deduper_;  // the sampler thread's
  SamplerStage<Payload> sampler_;
  RowPrefetcher prefetcher_;
  BatchOf batch_of_;
  bool stopped_ = false;
};

}  // namespace sluice
