#include "prefetch/row_prefetcher.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstring>

#include "common/check.h"
#include "common/clock.h"
#include "common/thread_plan.h"
#include "common/crash_point.h"
#include "common/log.h"
#include "storage/row_file.h"

namespace sluice {
namespace {

uint64_t HashKey(const RowKey& k) {
  uint64_t x = k.id ^ (uint64_t{k.table} * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

}  // namespace

MemoryRows::MemoryRows(uint32_t row_bytes, std::vector<uint64_t> table_offsets, RowInit init)
    : row_bytes_(row_bytes), offsets_(std::move(table_offsets)), init_(std::move(init)) {
  if (dense()) {
    dense_ = AlignedBuffer(offsets_.back() * row_bytes_, 64);
    // A row's initial value is a pure function of its key: rows are filled in parallel.
    for (size_t t = 0; t + 1 < offsets_.size(); ++t) {
      const auto table = static_cast<uint32_t>(t);
      tbb::parallel_for(tbb::blocked_range<uint64_t>(0, offsets_[t + 1] - offsets_[t], 1 << 14),
                        [&](const tbb::blocked_range<uint64_t>& r) {
                          for (uint64_t i = r.begin(); i < r.end(); ++i) {
                            init_(RowKey{i, table}, dense_.data() + (offsets_[t] + i) * row_bytes_);
                          }
                        });
    }
  }
}

std::unique_ptr<MemoryRows> MemoryRows::External(uint32_t row_bytes, uint64_t rows, const std::byte* base) {
  auto m = std::unique_ptr<MemoryRows>(new MemoryRows(row_bytes, {}, nullptr));
  m->offsets_ = {0, rows};
  m->external_ = const_cast<std::byte*>(base);
  return m;
}

std::byte* MemoryRows::Row(const RowKey& key) {
  if (external_ != nullptr) return external_ + key.id * row_bytes_;
  if (dense()) return dense_.data() + (offsets_[key.table] + key.id) * row_bytes_;
  auto [it, inserted] = index_.try_emplace(key, index_.size());
  const uint64_t i = it->second;
  if (inserted && i % kChunkRows == 0) {
    chunks_.push_back(std::make_unique<std::byte[]>(kChunkRows * row_bytes_));
  }
  std::byte* row = chunks_[i / kChunkRows].get() + (i % kChunkRows) * row_bytes_;
  if (inserted) init_(key, row);
  return row;
}

uint64_t MemoryRows::bytes() const {
  if (external_ != nullptr) return 0;
  return dense() ? dense_.size() : chunks_.size() * kChunkRows * row_bytes_;
}

void MemoryRows::ForEach(const std::function<void(const RowKey&, std::byte*)>& f) {
  if (external_ != nullptr) {
    for (uint64_t i = 0; i < offsets_.back(); ++i) f(RowKey{i, 0}, external_ + i * row_bytes_);
    return;
  }
  if (dense()) {
    for (size_t t = 0; t + 1 < offsets_.size(); ++t) {
      for (uint64_t i = 0; i < offsets_[t + 1] - offsets_[t]; ++i) {
        f(RowKey{i, static_cast<uint32_t>(t)}, dense_.data() + (offsets_[t] + i) * row_bytes_);
      }
    }
    return;
  }
  for (const auto& [key, i] : index_) f(key, chunks_[i / kChunkRows].get() + (i % kChunkRows) * row_bytes_);
}

void RowDeduper::Dedupe(RowBatch& b) {
  const size_t n = b.keys.size();
  uint64_t size = 64;
  while (size < 2 * n) size *= 2;
  if (slot_.size() < size) {
    slot_.assign(size, 0);
    stamp_.assign(size, 0);
  }
  const uint64_t mask = size - 1;
  ++call_;
  b.unique.clear();
  b.inverse.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const RowKey& k = b.keys[i];
    for (uint64_t h = HashKey(k) & mask;; h = (h + 1) & mask) {
      if (stamp_[h] != call_) {
        stamp_[h] = call_;
        slot_[h] = static_cast<uint32_t>(b.unique.size());
        b.inverse[i] = static_cast<uint32_t>(b.unique.size());
        b.unique.push_back(k);
        break;
      }
      if (b.unique[slot_[h]] == k) {
        b.inverse[i] = slot_[h];
        break;
      }
    }
  }
}

RowPrefetcher::RowPrefetcher(RowCache* cache, std::byte* arena, uint32_t row_bytes,
                             RowBacking* backing, RowPrefetcherOptions options, RunAheadRing* ring,
                             uint32_t stage, BatchOf batch_of)
    : cache_(cache), arena_(arena), row_bytes_(row_bytes), backing_(backing),
      options_(std::move(options)), ring_(ring), stage_(stage), batch_of_(std::move(batch_of)) {
  window_ = cache_->options().window_steps;
  SLUICE_CHECK(cache_->options().protect_steps >= options_.run_ahead,
               "the row cache must protect the steps io runs ahead");
  SLUICE_CHECK(ring_->capacity() >= window_ + options_.run_ahead + 2,
               "the ring must hold the window and the steps in flight");
}

RowPrefetcher::RowPrefetcher(MemoryRows* memory, RowPrefetcherOptions options, RunAheadRing* ring,
                             uint32_t stage, BatchOf batch_of)
    : memory_(memory), options_(std::move(options)), ring_(ring), stage_(stage),
      batch_of_(std::move(batch_of)) {}

RowPrefetcher::~RowPrefetcher() {
  if (thread_.joinable()) {
    ring_->Abort(Aborted("row prefetcher destroyed while running"));
    thread_.join();
  }
}

void RowPrefetcher::Start() {
  thread_ = std::thread([this] {
    NameThisThread("sluice-rows");
    if (cache_ != nullptr) {
      // A ring belongs to the thread that submits to it (io_uring's single-issuer rule).
      auto session = IoSession::Create(options_.io);
      if (session.ok()) {
        io_session_ = std::move(*session);
      } else {
        status_ = session.status();
      }
    }
    if (status_.ok()) status_ = RunSteps();
    if (io_session_) io_stats_ = io_session_->executor().stats();
    io_session_.reset();
    if (!status_.ok()) ring_->Abort(status_);
  });
}

Status RowPrefetcher::Join() {
  if (thread_.joinable()) thread_.join();
  if (cache_ != nullptr) {
    cache_->DropWindow();
    cache_->ReleaseProtected();
  }
  return status_;
}

RingWait RowPrefetcher::AppendUntil(uint64_t until, uint64_t& appended) {
  while (appended <= until) {
    const auto start = SteadyClock::now();
    const RingWait w = ring_->WaitPublished(stage_ - 1, appended);
    plan_.wait_s += SecondsSince(start);
    if (w != RingWait::kOk) return w;
    if (cache_ != nullptr) cache_->Append(batch_of_(appended).unique);
    ++appended;
  }
  return RingWait::kOk;
}

Status RowBacking::ReadScatter(IoSession& io, std::span<const RowKey> keys, std::span<std::byte* const> rows,
                               uint32_t row_bytes, uint32_t) {
  constexpr size_t kPiece = 1 << 16;  // rows staged at a time (a step's loads, usually)
  std::vector<std::byte> staging(std::min(keys.size(), kPiece) * row_bytes);
  for (size_t first = 0; first < keys.size(); first += kPiece) {
    const size_t n = std::min(kPiece, keys.size() - first);
    SLUICE_RETURN_IF_ERROR(Read(io, keys.subspan(first, n), staging.data()));
    for (size_t i = 0; i < n; ++i) std::memcpy(rows[first + i], staging.data() + i * row_bytes, row_bytes);
  }
  return Status::Ok();
}

Status RowPrefetcher::WriteBacks(const RowStepPlan& plan) {
  if (plan.write_keys.empty()) return Status::Ok();
  const size_t rb = row_bytes_;
  staging_.resize(plan.write_keys.size() * rb);
  for (size_t i = 0; i < plan.write_keys.size(); ++i) {
    std::memcpy(staging_.data() + i * rb, arena_ + uint64_t{plan.write_slots[i]} * rb, rb);
  }
  SLUICE_RETURN_IF_ERROR(backing_->Write(*io_session_, plan.write_keys, staging_.data()));
  rows_written_ += plan.write_keys.size();
  CrashPoint("write_back");  // tests: a kill -9 between a step's write-backs and its loads
  return Status::Ok();
}

// Straight into the slots: a group's loads may be a large share of the cache, and a staging
// copy of them would be memory the plan does not have.
Status RowPrefetcher::Loads(const RowStepPlan& plan) {
  if (plan.load_keys.empty()) return Status::Ok();
  load_rows_.resize(plan.load_keys.size());
  for (size_t i = 0; i < plan.load_keys.size(); ++i) load_rows_[i] = arena_ + uint64_t{plan.load_slots[i]} * row_bytes_;
  SLUICE_RETURN_IF_ERROR(backing_->ReadScatter(*io_session_, plan.load_keys, load_rows_, row_bytes_,
                                               options_.group_steps > 1 ? options_.group_gap_bytes : RowFile::kFileGap));
  rows_loaded_ += plan.load_keys.size();
  return Status::Ok();
}

Status RowPrefetcher::PlanStep(RowBatch& b) {
  const auto start = SteadyClock::now();
  b.rows.resize(b.unique.size());
  if (memory_ != nullptr) {
    for (size_t i = 0; i < b.unique.size(); ++i) b.rows[i] = memory_->Row(b.unique[i]);
    plan_.busy_s += SecondsSince(start);
    return Status::Ok();
  }
  RowStepPlan& plan = plan_scratch_;
  const Status s = cache_->Plan(b.unique, options_.writes, plan);
  if (!s.ok() && !cache_->step_unplaced()) return s;
  // A half-placed step's io so far joins the group too (the cache counts its evictions as done).
  JoinGroup(plan, planned_++);
  if (s.ok()) SetRows(b, plan);
  plan_.busy_s += SecondsSince(start);
  return s;
}

// The batch's row addresses: its rows' slots in the arena.
void RowPrefetcher::SetRows(RowBatch& b, const RowStepPlan& plan) const {
  for (size_t i = 0; i < b.unique.size(); ++i) b.rows[i] = arena_ + uint64_t{plan.slots[i]} * row_bytes_;
}

void RowPrefetcher::JoinGroup(const RowStepPlan& plan, uint64_t step) {
  if (step < kPassHeadSteps) head_loads_ += plan.load_keys.size();
  // A later step of the group may evict a row an earlier one loads: the write-backs of the
  // group all happen before its loads, and a row loaded and evicted within the group is read
  // for the slot it ends in only (the cache never hands out a slot twice within a step, and
  // a step's evictions are of rows last used at least run_ahead + 1 steps before it).
  group_.write_keys.insert(group_.write_keys.end(), plan.write_keys.begin(), plan.write_keys.end());
  group_.write_slots.insert(group_.write_slots.end(), plan.write_slots.begin(), plan.write_slots.end());
  group_.load_keys.insert(group_.load_keys.end(), plan.load_keys.begin(), plan.load_keys.end());
  group_.load_slots.insert(group_.load_slots.end(), plan.load_slots.begin(), plan.load_slots.end());
}

// Step `step` did not fit beside the steps in flight (a step larger than the plan's probe saw):
// the group's io so far runs (the step's placed rows included), the steps before it are
// published, and once compute has finished them (all but the previous one when compute may ask
// for a step before finishing the one before it: RowPipeline::NextReadyEarly) the cache places
// the step's other rows in their slots. Its io then starts with at most one step in flight (the
// pipeline drains once) instead of the run failing.
Status RowPrefetcher::DrainFor(uint64_t first, uint64_t step, bool& stopped) {
  SLUICE_RETURN_IF_ERROR(RunGroupIo(step + 1, stopped));
  if (stopped) return Status::Ok();
  SLUICE_RETURN_IF_ERROR(PublishSteps(first, step));
  const uint32_t keep = NextStepReadyEarly(options_) && step > 0 ? 1 : 0;
  auto start = SteadyClock::now();
  const RingWait w = ring_->WaitComputed(step - keep);
  io_.wait_s += SecondsSince(start);
  if (w == RingWait::kAborted) return Aborted("pass aborted");
  if (w == RingWait::kStopped) {
    stopped = true;
    return Status::Ok();
  }
  start = SteadyClock::now();
  RowBatch& b = batch_of_(step);
  RowStepPlan& plan = plan_scratch_;
  SLUICE_RETURN_IF_ERROR(cache_->PlaceAfterDrain(b.unique, keep, plan));
  JoinGroup(plan, step);
  SetRows(b, plan);
  if (cache_->stats().drained_steps == 1) {
    SLUICE_LOG(kWarning,
               "row cache of %llu rows: step %llu of the pass (%zu rows) did not fit beside the %u steps in "
               "flight; it waited for compute to finish all of them but the last %u (the run stays exact; a "
               "larger cache, storage.budget or storage.cache_rows, keeps io ahead)",
               static_cast<unsigned long long>(cache_->options().capacity_rows),
               static_cast<unsigned long long>(step), b.unique.size(), options_.run_ahead, keep);
  }
  plan_.busy_s += SecondsSince(start);
  return Status::Ok();
}

Status RowPrefetcher::PublishSteps(uint64_t first, uint64_t end) {
  for (uint64_t s = first; s < end; ++s) {
    ring_->Publish(stage_, s);
    if (backing_ != nullptr) {  // the backing's own read-ahead, once step s is on its way
      const auto start = SteadyClock::now();
      SLUICE_RETURN_IF_ERROR(backing_->Advance(*io_session_, s));
      io_.busy_s += SecondsSince(start);
    }
  }
  return Status::Ok();
}

Status RowPrefetcher::RunGroupIo(uint64_t end, bool& stopped) {
  if (memory_ != nullptr) return Status::Ok();
  // Wait until the rows the group evicts are final: compute has passed its last step minus
  // run_ahead, or has stopped for good. A planned step's io always runs (unless the pass was
  // aborted): the cache already counts its evictions as done, so skipping their write-backs
  // would lose updates.
  auto start = SteadyClock::now();
  const uint64_t last = end - 1;
  const RingWait w = ring_->WaitComputed(last > options_.run_ahead ? last - options_.run_ahead : 0);
  io_.wait_s += SecondsSince(start);
  if (w == RingWait::kAborted) return Aborted("pass aborted");
  stopped = w == RingWait::kStopped;
  start = SteadyClock::now();
  SLUICE_RETURN_IF_ERROR(WriteBacks(group_));
  SLUICE_RETURN_IF_ERROR(Loads(group_));
  group_.Clear();
  io_.busy_s += SecondsSince(start);
  return Status::Ok();
}

Status RowPrefetcher::RunSteps() {
  const uint64_t g = std::max<uint32_t>(1, options_.group_steps);
  uint64_t appended = 0;
  for (uint64_t t = 0;;) {
    uint64_t end = t;
    bool ended = false, interrupted = false, stopped = false;
    group_.Clear();
    while (end < t + g) {
      // The window: the steps up to s + window are known to the planner before step s is planned.
      const RingWait w = AppendUntil(end + window_, appended);
      if (w == RingWait::kStopped || w == RingWait::kAborted) {
        interrupted = true;
        break;
      }
      if (end >= appended || batch_of_(end).lookahead_only) {  // the pass's last step is planned
        ended = true;
        break;
      }
      Status s = PlanStep(batch_of_(end));
      if (!s.ok() && memory_ == nullptr && cache_->step_unplaced()) {
        s = DrainFor(t, end, stopped);
        if (s.code() == StatusCode::kAborted || (s.ok() && stopped)) return Status::Ok();
        t = end;  // the group starts again at this step
      }
      SLUICE_RETURN_IF_ERROR(s);
      ++end;
    }
    if (end > t) {  // planned steps' io runs even when the pass stops (their evictions count)
      Status s = RunGroupIo(end, stopped);
      if (s.code() == StatusCode::kAborted) return Status::Ok();
      SLUICE_RETURN_IF_ERROR(s);
    }
    if (interrupted || stopped) return Status::Ok();
    SLUICE_RETURN_IF_ERROR(PublishSteps(t, end));
    if (ended) {
      ring_->End(stage_, end);
      return Status::Ok();
    }
    t = end;
  }
}

Status FlushRowCache(RowCache& cache, const std::byte* arena, uint32_t row_bytes,
                     RowBacking& backing, IoSession& io) {
  // In batches: a full cache's dirty list at once would be a transient allocation of tens of
  // MB beyond the memory plan.
  constexpr size_t kBatch = 1 << 14;
  std::vector<RowKey> keys;
  std::vector<uint32_t> slots;
  std::vector<std::byte> rows;
  keys.reserve(kBatch);
  slots.reserve(kBatch);
  rows.reserve(kBatch * row_bytes);
  size_t cursor = 0;
  while (cache.DirtyRows(cursor, kBatch, keys, slots)) {
    rows.resize(keys.size() * row_bytes);
    for (size_t i = 0; i < keys.size(); ++i) {
      std::memcpy(rows.data() + i * row_bytes, arena + uint64_t{slots[i]} * row_bytes, row_bytes);
    }
    SLUICE_RETURN_IF_ERROR(backing.Write(io, keys, rows.data()));
  }
  cache.MarkAllClean();
  return backing.Flush(io);
}

}  // namespace sluice
