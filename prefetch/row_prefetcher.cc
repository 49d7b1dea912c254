#include "prefetch/row_prefetcher.h"

#include <cstring>

#include "common/check.h"
#include "common/clock.h"
#include "common/crash_point.h"

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
    for (size_t t = 0; t + 1 < offsets_.size(); ++t) {
      for (uint64_t i = 0; i < offsets_[t + 1] - offsets_[t]; ++i) {
        init_(RowKey{i, static_cast<uint32_t>(t)}, dense_.data() + (offsets_[t] + i) * row_bytes_);
      }
    }
  }
}

std::byte* MemoryRows::Row(const RowKey& key) {
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
  return dense() ? dense_.size() : chunks_.size() * kChunkRows * row_bytes_;
}

void MemoryRows::ForEach(const std::function<void(const RowKey&, std::byte*)>& f) {
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

Status RowPrefetcher::Loads(const RowStepPlan& plan) {
  if (plan.load_keys.empty()) return Status::Ok();
  const size_t rb = row_bytes_;
  staging_.resize(plan.load_keys.size() * rb);
  SLUICE_RETURN_IF_ERROR(backing_->Read(*io_session_, plan.load_keys, staging_.data()));
  for (size_t i = 0; i < plan.load_keys.size(); ++i) {
    std::memcpy(arena_ + uint64_t{plan.load_slots[i]} * rb, staging_.data() + i * rb, rb);
  }
  rows_loaded_ += plan.load_keys.size();
  return Status::Ok();
}

Status RowPrefetcher::RunIo(uint64_t t, RowBatch& b, bool& stopped) {
  auto start = SteadyClock::now();
  b.rows.resize(b.unique.size());
  if (memory_ != nullptr) {
    for (size_t i = 0; i < b.unique.size(); ++i) b.rows[i] = memory_->Row(b.unique[i]);
    plan_.busy_s += SecondsSince(start);
    return Status::Ok();
  }
  RowStepPlan& plan = plan_scratch_;
  SLUICE_RETURN_IF_ERROR(cache_->Plan(b.unique, options_.writes, plan));
  plan_.busy_s += SecondsSince(start);
  // Wait until the rows this step evicts are final: compute has passed t - run_ahead, or has
  // stopped for good. A planned step's io always runs (unless the pass was aborted): the cache
  // already counts its evictions as done, so skipping their write-backs would lose updates.
  start = SteadyClock::now();
  const RingWait w = ring_->WaitComputed(t > options_.run_ahead ? t - options_.run_ahead : 0);
  io_.wait_s += SecondsSince(start);
  if (w == RingWait::kAborted) return Aborted("pass aborted");
  stopped = w == RingWait::kStopped;
  start = SteadyClock::now();
  SLUICE_RETURN_IF_ERROR(WriteBacks(plan));
  SLUICE_RETURN_IF_ERROR(Loads(plan));
  for (size_t i = 0; i < b.unique.size(); ++i) b.rows[i] = arena_ + uint64_t{plan.slots[i]} * row_bytes_;
  io_.busy_s += SecondsSince(start);
  return Status::Ok();
}

Status RowPrefetcher::RunSteps() {
  uint64_t appended = 0;
  for (uint64_t t = 0;; ++t) {
    // The window: the steps up to t + window are known to the planner before step t is planned.
    const RingWait w = AppendUntil(t + window_, appended);
    if (w == RingWait::kStopped || w == RingWait::kAborted) return Status::Ok();
    if (t >= appended) {
      ring_->End(stage_, appended);
      return Status::Ok();
    }
    bool stopped = false;
    Status s = RunIo(t, batch_of_(t), stopped);
    if (s.code() == StatusCode::kAborted) return Status::Ok();
    SLUICE_RETURN_IF_ERROR(s);
    if (stopped) return Status::Ok();
    ring_->Publish(stage_, t);
    if (backing_ != nullptr) {  // the backing's own read-ahead, once step t is on its way
      const auto start = SteadyClock::now();
      SLUICE_RETURN_IF_ERROR(backing_->Advance(*io_session_, t));
      io_.busy_s += SecondsSince(start);
    }
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
