#include "prefetch/row_prefetcher.h"

#include <chrono>
#include <cstring>

#include "common/check.h"
#include "common/crash_point.h"

namespace sluice {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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

RowPrefetcher::RowPrefetcher(RowCache* cache, std::byte* arena, uint32_t row_bytes,
                             RowBacking* backing, RowPrefetcherOptions options, Source source)
    : cache_(cache),
      arena_(arena),
      row_bytes_(row_bytes),
      backing_(backing),
      options_(std::move(options)),
      source_(std::move(source)) {
  window_ = cache_->options().window_steps;
  SLUICE_CHECK(cache_->options().protect_steps >= options_.run_ahead,
               "the row cache must protect the steps io runs ahead");
}

RowPrefetcher::RowPrefetcher(MemoryRows* memory, RowPrefetcherOptions options, Source source)
    : memory_(memory), options_(std::move(options)), source_(std::move(source)) {}

RowPrefetcher::~RowPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RowPrefetcher::Start() {
  ring_.resize(window_ + options_.run_ahead + 2);
  thread_ = std::thread([this] { Run(); });
}

void RowPrefetcher::Run() {
  Status s;
  if (cache_ != nullptr) {
    // A ring belongs to the thread that submits to it (io_uring's single-issuer rule).
    auto session = IoSession::Create(options_.io);
    if (session.ok()) {
      io_session_ = std::move(*session);
    } else {
      s = session.status();
    }
  }
  if (s.ok()) s = RunSteps();
  io_session_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok() && error_.ok()) error_ = s;
  finished_ = true;
  cv_.notify_all();
}

// Reads step t from the source into its ring entry and finds its distinct rows.
Status RowPrefetcher::Fill(uint64_t t, bool& more) {
  auto start = std::chrono::steady_clock::now();
  RowBatch& b = ring_[t % ring_.size()];
  b.step = t;
  b.samples = 0;
  b.records.clear();
  b.keys.clear();
  SLUICE_ASSIGN_OR_RETURN(more, source_(t, b));
  if (!more) return Status::Ok();
  const size_t n = b.keys.size();
  uint64_t size = 64;
  while (size < 2 * n) size *= 2;
  if (dedupe_slot_.size() < size) {
    dedupe_slot_.assign(size, 0);
    dedupe_stamp_.assign(size, 0);
  }
  const uint64_t mask = size - 1;
  ++stamp_;
  b.unique.clear();
  b.inverse.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const RowKey& k = b.keys[i];
    for (uint64_t h = HashKey(k) & mask;; h = (h + 1) & mask) {
      if (dedupe_stamp_[h] != stamp_) {
        dedupe_stamp_[h] = stamp_;
        dedupe_slot_[h] = static_cast<uint32_t>(b.unique.size());
        b.inverse[i] = static_cast<uint32_t>(b.unique.size());
        b.unique.push_back(k);
        break;
      }
      if (b.unique[dedupe_slot_[h]] == k) {
        b.inverse[i] = dedupe_slot_[h];
        break;
      }
    }
  }
  if (cache_ != nullptr) cache_->Append(b.unique);
  read_.busy_s += Since(start);
  return Status::Ok();
}

Status RowPrefetcher::RunIo(uint64_t t, RowBatch& b) {
  auto start = std::chrono::steady_clock::now();
  b.rows.resize(b.unique.size());
  if (memory_ != nullptr) {
    for (size_t i = 0; i < b.unique.size(); ++i) b.rows[i] = memory_->Row(b.unique[i]);
    plan_.busy_s += Since(start);
    return Status::Ok();
  }
  RowStepPlan& plan = plan_scratch_;
  SLUICE_RETURN_IF_ERROR(cache_->Plan(b.unique, options_.writes, plan));
  plan_.busy_s += Since(start);
  // Wait until the rows this step evicts are final: compute has passed t - run_ahead, or has
  // stopped for good (Stop). A planned step's io always runs: the cache already counts its
  // evictions as done, so skipping their write-backs would lose updates.
  start = std::chrono::steady_clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || computed_ + options_.run_ahead >= t; });
  }
  io_.wait_s += Since(start);
  start = std::chrono::steady_clock::now();
  const size_t rb = row_bytes_;
  if (!plan.write_keys.empty()) {
    staging_.resize(plan.write_keys.size() * rb);
    for (size_t i = 0; i < plan.write_keys.size(); ++i) {
      std::memcpy(staging_.data() + i * rb, arena_ + uint64_t{plan.write_slots[i]} * rb, rb);
    }
    SLUICE_RETURN_IF_ERROR(backing_->Write(*io_session_, plan.write_keys, staging_.data()));
    rows_written_ += plan.write_keys.size();
    CrashPoint("write_back");  // tests: a kill -9 between a step's write-backs and its loads
  }
  if (!plan.load_keys.empty()) {
    staging_.resize(plan.load_keys.size() * rb);
    SLUICE_RETURN_IF_ERROR(backing_->Read(*io_session_, plan.load_keys, staging_.data()));
    for (size_t i = 0; i < plan.load_keys.size(); ++i) {
      std::memcpy(arena_ + uint64_t{plan.load_slots[i]} * rb, staging_.data() + i * rb, rb);
    }
    rows_loaded_ += plan.load_keys.size();
  }
  for (size_t i = 0; i < b.unique.size(); ++i) b.rows[i] = arena_ + uint64_t{plan.slots[i]} * rb;
  io_.busy_s += Since(start);
  return Status::Ok();
}

Status RowPrefetcher::RunSteps() {
  uint64_t filled = 0;
  bool more = true;
  const uint64_t ring = ring_.size();
  for (uint64_t t = 0;; ++t) {
    // Read ahead to the end of step t's window; a ring entry is reused only once its step
    // computed (the window is shorter than the ring, so this waits only in memory mode).
    while (more && filled <= t + window_) {
      {
        auto start = std::chrono::steady_clock::now();
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || filled < computed_ + ring; });
        if (stop_) return Aborted("prefetcher stopped");
        read_.wait_s += Since(start);
      }
      SLUICE_RETURN_IF_ERROR(Fill(filled, more));
      if (more) ++filled;
    }
    if (t >= filled) {
      std::lock_guard<std::mutex> lock(mu_);
      total_steps_ = filled;
      cv_.notify_all();
      return Status::Ok();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return Aborted("prefetcher stopped");
    }
    SLUICE_RETURN_IF_ERROR(RunIo(t, ring_[t % ring]));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = t + 1;
      cv_.notify_all();
    }
    if (backing_ != nullptr) {  // the backing's own read-ahead, once step t is on its way
      const auto start = std::chrono::steady_clock::now();
      SLUICE_RETURN_IF_ERROR(backing_->Advance(*io_session_, t));
      io_.busy_s += Since(start);
    }
  }
}

RowBatch* RowPrefetcher::WaitReady(uint64_t t, Status& status) {
  auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_ > t || !error_.ok() || finished_ || stop_; });
  compute_wait_s_ += Since(start);
  if (ready_ > t) {
    status = Status::Ok();
    return &ring_[t % ring_.size()];
  }
  if (!error_.ok()) {
    status = error_;
  } else if (stop_) {
    status = Aborted("prefetcher stopped");
  } else {
    status = OutOfRange("step " + std::to_string(t) + " does not exist (the source ended at " +
                        std::to_string(total_steps_) + " steps)");
  }
  return nullptr;
}

void RowPrefetcher::Computed(uint64_t t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (t + 1 > computed_) computed_ = t + 1;
  cv_.notify_all();
}

Status RowPrefetcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (cache_ != nullptr) {
    cache_->DropWindow();
    cache_->ReleaseProtected();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok() && error_.code() != StatusCode::kAborted) return error_;
  return Status::Ok();
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
