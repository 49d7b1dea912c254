#pragma once
// A block-granular pass as one pipeline (link prediction): a sampler stage fills each step's
// payload (its queries, negatives and unique rows), the block prefetcher plans the partitions
// the schedule needs and loads them, compute trains; one RunAheadRing joins them. In memory
// (no cache) the sampler stage alone runs ahead.
//
// Capacity: the sampler stays at most `capacity` steps ahead of compute (its payloads are
// what the ring's memory holds); the prefetcher's io at most run_ahead steps.
//
// Thread safety: WaitReady/Computed/Stop from the compute thread; Abort from any.

#include <cstdint>
#include <memory>

#include "prefetch/block_prefetcher.h"
#include "prefetch/run_ahead_ring.h"
#include "prefetch/sampler_stage.h"

namespace sluice {

template <class Payload>
class BlockPipeline {
 public:
  using Fill = typename SamplerStage<Payload>::Fill;

  // The capacity for io `run_ahead` steps ahead: the sampler one step beyond it.
  static uint64_t Capacity(uint32_t run_ahead) { return uint64_t{run_ahead} + 2; }

  // `cache` null: in memory (`blocks` unused). Requires capacity >= run_ahead + 2. `mode`: how
  // the sampler stage runs (see SamplerStage).
  BlockPipeline(BlockCache* cache, PrefetcherOptions options, uint64_t capacity, Fill fill,
                BlockPrefetcher::StepSource blocks, StageMode mode = StageMode::kThread)
      : ring_(capacity, cache != nullptr ? 2 : 1), sampler_(&ring_, std::move(fill), mode) {
    if (cache != nullptr) {
      prefetcher_ = std::make_unique<BlockPrefetcher>(cache, std::move(options), std::move(blocks),
                                                      &ring_, 1);
    }
  }
  ~BlockPipeline() {
    if (!stopped_) ring_.Abort(Aborted("block pipeline destroyed while running"));
  }

  void Start() {
    sampler_.Start();
    if (prefetcher_) prefetcher_->Start();
  }
  // Blocks until step t is sampled and its blocks are resident: its payload, or the error.
  Result<Payload*> WaitReady(uint64_t t) {
    sampler_.Help(t);
    SLUICE_RETURN_IF_ERROR(ring_.WaitReady(t));
    return &sampler_.slot(t);
  }
  // Step t's payload once the sampler stage has filled it, without waiting (nullptr before): a
  // later step's rows for a device cache's lookahead. Call only for steps not computed yet.
  const Payload* Peek(uint64_t t) { return ring_.Published(0, t) ? &sampler_.slot(t) : nullptr; }
  void Computed(uint64_t t) {
    ring_.Computed(t);
    sampler_.Kick();
  }
  // Compute has stopped for good: the stages finish the step in hand (its io included, so the
  // cache may be flushed) and end. Returns the pass's error, if any.
  Status Stop() {
    ring_.Stop();
    stopped_ = true;
    sampler_.Join();
    Status s = prefetcher_ ? prefetcher_->Join() : Status::Ok();
    if (!s.ok()) return s;
    Status e = ring_.error();
    return e.ok() || e.code() == StatusCode::kAborted ? Status::Ok() : e;
  }
  void Abort(Status status) { ring_.Abort(std::move(status)); }

  StageTime sampler_time() const { return sampler_.time(); }
  double compute_wait_s() const { return ring_.compute_wait_s(); }
  // The prefetcher (null in memory).
  const BlockPrefetcher* prefetcher() const { return prefetcher_.get(); }

 private:
  RunAheadRing ring_;
  SamplerStage<Payload> sampler_;
  std::unique_ptr<BlockPrefetcher> prefetcher_;
  bool stopped_ = false;
};

}  // namespace sluice
