#include "prefetch/spill_backing.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/clock.h"
#include "common/radix_sort.h"
#include "common/thread_plan.h"

namespace sluice {

namespace {

uint64_t Chunks(uint64_t rows, uint32_t chunk_rows) { return (rows + chunk_rows - 1) / chunk_rows; }

}  // namespace

Result<std::unique_ptr<SpillBacking>> SpillBacking::Create(RowBacking* source, const RowFile* file,
                                                           const std::string& spill_path,
                                                           const SpillOptions& options) {
  if (options.horizon_steps < 1) return InvalidArgument("spill: the horizon needs at least one step");
  if (options.chunk_bytes == 0 || options.chunk_bytes % kDirectAlignBytes != 0 ||
      options.chunk_bytes < file->row_bytes()) {
    return InvalidArgument("spill: chunks of " + std::to_string(options.chunk_bytes) +
                           " bytes (a multiple of 4 KiB holding at least one row of " +
                           std::to_string(file->row_bytes()) + " bytes)");
  }
  if (file->num_rows() >= (uint64_t{1} << 32)) {
    return InvalidArgument(file->path() + ": " + std::to_string(file->num_rows()) +
                           " rows; spilling needs fewer than 2^32");
  }
  SLUICE_ASSIGN_OR_RETURN(File spill, File::Open(spill_path, OpenMode::kCreate, /*want_direct=*/true));
  const uint64_t bytes = (options.file_bytes + options.chunk_bytes - 1) / options.chunk_bytes * options.chunk_bytes;
  Status s = spill.Allocate(bytes);
  if (!s.ok()) {
    std::error_code ec;
    std::filesystem::remove(spill_path, ec);
    return IoError("the feature spill file " + spill_path + " needs " + std::to_string(bytes >> 20) +
                   " MiB: " + s.message() + " (lower storage.spill_steps or free space there)");
  }
  // Its space is held by the open file from here on: no name to leave behind when the process
  // is killed.
  std::error_code ec;
  std::filesystem::remove(spill_path, ec);
  SpillOptions o = options;
  o.file_bytes = bytes;
  return std::unique_ptr<SpillBacking>(new SpillBacking(source, file, std::move(spill), o));
}

SpillBacking::SpillBacking(RowBacking* source, const RowFile* file, File spill, const SpillOptions& options)
    : source_(source),
      file_(file),
      spill_(std::move(spill)),
      options_(options),
      row_bytes_(file->row_bytes()),
      chunk_rows_(options.chunk_bytes / file->row_bytes()),
      rows_per_region_((file->num_rows() + options.horizon_steps - 1) / options.horizon_steps) {
  // A chunk for every listed step (the horizon and the step after it), a batch waiting.
  const uint64_t chunks = uint64_t{options_.horizon_steps} + 2 + options_.write_batch;
  pool_ = AlignedBuffer(chunks * options_.chunk_bytes, kDirectAlignBytes);
  for (uint64_t i = 0; i < chunks; ++i) free_chunks_.push_back(pool_.data() + i * options_.chunk_bytes);
  sweep_buffer_ = AlignedBuffer(uint64_t{options_.sweep_rows} * row_bytes_, kDirectAlignBytes);
}

SpillBacking::~SpillBacking() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    stop_writer_ = true;
  }
  write_cv_.notify_all();
  writer_.join();  // after the chunks handed to it are written: they are the pool's
}

uint64_t SpillBacking::MemoryBytes(const SpillOptions& o, uint64_t rows_per_step, uint32_t row_bytes) {
  const uint64_t pool = (uint64_t{o.horizon_steps} + 2 + o.write_batch) * o.chunk_bytes;
  const uint64_t lists = (uint64_t{o.horizon_steps} + 2 + o.resident_steps + 1) * rows_per_step * 4;
  // A region pass's pairs (about one step's rows), a step's serve list, its keys in row order,
  // its listing and the sorts' scratch.
  const uint64_t scratch = rows_per_step * (8 + 16 + 8 + 8 + 8);
  return pool + uint64_t{o.sweep_rows} * (row_bytes + 8) + lists + scratch;
}

uint64_t SpillBacking::RingBytes(const SpillOptions& o, uint64_t rows_per_step, uint32_t row_bytes) {
  const uint64_t chunk_rows = std::max<uint64_t>(1, o.chunk_bytes / row_bytes);
  return (uint64_t{o.horizon_steps} + 3) * Chunks(rows_per_step, static_cast<uint32_t>(chunk_rows)) * o.chunk_bytes;
}

uint64_t SpillBacking::RegionBegin(uint64_t region) const {
  return std::min(file_->num_rows(), region * rows_per_region_);
}

void SpillBacking::StartPass(StepRows rows, Skip skip, StepRows next, bool continues) {
  // The previous pass's loads reached its last step (its Advance listed and swept for the
  // steps after it) and its listing stopped inside this pass: its packs for this pass's first
  // steps are complete or filling in the rolling order.
  const bool keep = continues && started_ && in_next_ && !source_done_ && next_offset_ != kUnknown &&
                    next_ == next_offset_;
  if (keep) {
    offset_ = next_offset_;
    next_offset_ = kUnknown;
    in_next_ = false;
    ++stats_.passes_continued;
  } else {
    Reset();
  }
  continued_ = keep;
  step_rows_ = std::move(rows);
  next_rows_ = std::move(next);
  skip_ = std::move(skip);
  active_ = true;
}

void SpillBacking::Reset() {
  // Chunks handed to the writer come back to the pool once written.
  std::unique_lock<std::mutex> lock(write_mutex_, std::defer_lock);
  if (writer_.joinable()) {
    lock.lock();
    write_cv_.wait(lock, [this] { return written_count_ == handed_count_; });
  }
  for (Pack& p : packs_) {
    if (p.chunk != nullptr) free_chunks_.push_back(p.chunk);
  }
  for (const IoRequest& r : writes_) free_chunks_.push_back(r.buffer);
  writes_.clear();
  packs_.clear();
  recent_.clear();
  active_ = started_ = source_done_ = in_next_ = false;
  offset_ = next_ = listed_ = ring_cursor_ = 0;
  next_offset_ = kUnknown;
}

SpillBacking::Pack* SpillBacking::Find(uint64_t step) {
  if (packs_.empty() || step < packs_.front().step || step >= packs_.front().step + packs_.size()) return nullptr;
  return &packs_[step - packs_.front().step];
}

// The first K steps get, in one sweep of the file, the regions the rolling passes will not
// reach before their loads (step s: regions s .. K-1).
Status SpillBacking::EnsureStarted(IoSession& io) {
  if (started_) return Status::Ok();
  started_ = true;
  ++stats_.full_sweeps;
  const uint64_t k = options_.horizon_steps;
  SLUICE_RETURN_IF_ERROR(List(k - 1));
  for (uint64_t r = 0; r < k; ++r) SLUICE_RETURN_IF_ERROR(RegionPass(io, r, 0, r));
  return Complete(io, 0);
}

Status SpillBacking::List(uint64_t up_to) {
  const auto start = SteadyClock::now();
  while (!source_done_ && listed_ <= up_to) {
    list_scratch_.clear();
    if (!in_next_) {
      SLUICE_ASSIGN_OR_RETURN(bool more, step_rows_(listed_ - offset_, list_scratch_));
      if (!more) {  // the pass ends here; the next pass's steps follow
        next_offset_ = listed_;
        recent_.clear();  // its first steps find nothing resident that this pass protected
        in_next_ = next_rows_ != nullptr;
        source_done_ = !in_next_;
        continue;
      }
    } else {
      SLUICE_ASSIGN_OR_RETURN(bool more, next_rows_(listed_ - next_offset_, list_scratch_));
      if (!more) {
        source_done_ = true;
        break;
      }
    }
    Pack& p = packs_.emplace_back();
    p.step = listed_++;
    // A listing may give its rows sorted already (a sample's node set does).
    if (!std::is_sorted(list_scratch_.begin(), list_scratch_.end())) RadixSortBy(list_scratch_, sort_scratch_);
    list_scratch_.erase(std::unique(list_scratch_.begin(), list_scratch_.end()), list_scratch_.end());
    p.rows.reserve(list_scratch_.size());
    for (uint64_t row : list_scratch_) {
      if (row >= file_->num_rows()) {
        return OutOfRange(file_->path() + ": step " + std::to_string(p.step) + " needs row " + std::to_string(row) +
                          " of " + std::to_string(file_->num_rows()));
      }
      if (!skip_ || !skip_(row)) p.rows.push_back(static_cast<uint32_t>(row));
    }
    if (options_.resident_steps > 0) LeaveOutResident(p.rows);
    const uint64_t first = RegionBegin(p.step % options_.horizon_steps);
    p.rotate = static_cast<size_t>(std::lower_bound(p.rows.begin(), p.rows.end(), first) - p.rows.begin());
    Place(p);
  }
  stats_.list_s += SecondsSince(start);
  return Status::Ok();
}

// Removes from `rows` (sorted, distinct) those of the last resident_steps listed steps and
// remembers `rows` as they came.
void SpillBacking::LeaveOutResident(std::vector<uint32_t>& rows) {
  spare_.assign(rows.begin(), rows.end());
  for (const std::vector<uint32_t>& q : recent_) {
    size_t out = 0, j = 0;
    for (const uint32_t r : rows) {
      while (j < q.size() && q[j] < r) ++j;
      if (j < q.size() && q[j] == r) continue;
      rows[out++] = r;
    }
    stats_.rows_resident += rows.size() - out;
    rows.resize(out);
  }
  recent_.push_back(std::move(spare_));
  spare_.clear();
  if (recent_.size() > options_.resident_steps) {
    spare_ = std::move(recent_.front());
    recent_.pop_front();
  }
}

// The pack's chunks go after the newest pack in the ring, wrapping to the start; a pack that
// would overlap a live one gets none.
void SpillBacking::Place(Pack& p) {
  p.bytes = Chunks(p.rows.size(), chunk_rows_) * options_.chunk_bytes;
  if (p.bytes == 0) return;
  uint64_t base = ring_cursor_;
  if (base + p.bytes > options_.file_bytes) base = 0;
  bool fits = base + p.bytes <= options_.file_bytes;
  for (const Pack& q : packs_) {
    if (&q == &p || !q.has_file) continue;
    if (base < q.base + q.bytes && q.base < base + p.bytes) fits = false;
  }
  if (!fits) {
    ++stats_.packs_dropped;
    return;
  }
  p.has_file = true;
  p.base = base;
  ring_cursor_ = base + p.bytes;
}

Status SpillBacking::RegionPass(IoSession& io, uint64_t region, uint64_t first, uint64_t last) {
  const auto start = SteadyClock::now();
  const uint64_t lo = RegionBegin(region), hi = RegionBegin(region + 1);
  pairs_.clear();
  for (size_t i = 0; i < packs_.size(); ++i) {
    const Pack& p = packs_[i];
    if (p.step < first || p.step > last || !p.has_file) continue;
    auto b = std::lower_bound(p.rows.begin(), p.rows.end(), lo);
    auto e = std::lower_bound(b, p.rows.end(), hi);
    for (auto it = b; it != e; ++it) pairs_.push_back(uint64_t{*it} << 32 | i);
  }
  RadixSortBy(pairs_, sort_scratch_, 32);  // by row, then pack (pushed in pack order)
  ++stats_.passes;
  size_t at = 0;
  while (at < pairs_.size()) {
    // The next sweep_rows distinct rows and the pairs that want them.
    sweep_ids_.clear();
    size_t end = at;
    while (end < pairs_.size()) {
      if (sweep_ids_.empty() || sweep_ids_.back() != pairs_[end] >> 32) {
        if (sweep_ids_.size() == options_.sweep_rows) break;
        sweep_ids_.push_back(pairs_[end] >> 32);
      }
      ++end;
    }
    SLUICE_RETURN_IF_ERROR(file_->ReadRows(io, sweep_ids_, sweep_buffer_.data(), options_.sweep_gap_bytes));
    stats_.rows_swept += sweep_ids_.size();
    size_t row = 0;
    for (size_t i = at; i < end; ++i) {
      if (i > at && pairs_[i] >> 32 != pairs_[i - 1] >> 32) ++row;
      Pack& pack = packs_[static_cast<uint32_t>(pairs_[i])];
      SLUICE_RETURN_IF_ERROR(Append(io, pack, sweep_buffer_.data() + row * row_bytes_));
    }
    at = end;
  }
  stats_.sweep_s += SecondsSince(start);
  return Status::Ok();
}

Status SpillBacking::Append(IoSession& io, Pack& p, const std::byte* row) {
  if (p.chunk == nullptr) SLUICE_RETURN_IF_ERROR(TakeChunk(io, p.chunk));
  std::memcpy(p.chunk + (p.written % chunk_rows_) * row_bytes_, row, row_bytes_);
  ++p.written;
  ++stats_.rows_packed;
  if (p.written % chunk_rows_ == 0) QueueChunk(p);
  return Status::Ok();
}

// Queues the pack's current chunk for writing (the last one of a pack may be partly filled:
// written whole, its tail unused).
void SpillBacking::QueueChunk(Pack& p) {
  IoRequest r;
  r.kind = IoKind::kWrite;
  r.file = &spill_;
  r.offset_bytes = p.base + (p.written - 1) / chunk_rows_ * options_.chunk_bytes;
  r.length_bytes = options_.chunk_bytes;
  r.buffer = p.chunk;
  writes_.push_back(r);
  p.chunk = nullptr;
}

// A few chunks at a time go to the writer: its writes start while the sweep goes on.
constexpr size_t kHandOffChunks = 8;

Status SpillBacking::TakeChunk(IoSession& io, std::byte*& chunk) {
  if (!options_.async_writes) {
    if (free_chunks_.empty()) SLUICE_RETURN_IF_ERROR(WriteChunks(io));
    chunk = free_chunks_.back();
    free_chunks_.pop_back();
    return Status::Ok();
  }
  if (writes_.size() >= kHandOffChunks) HandOff();
  std::unique_lock<std::mutex> lock(write_mutex_);
  if (free_chunks_.empty()) {
    lock.unlock();
    HandOff();  // the queued chunks are what will free one
    lock.lock();
    write_cv_.wait(lock, [this] { return !free_chunks_.empty() || !write_error_.ok(); });
  }
  if (!write_error_.ok()) return write_error_;
  chunk = free_chunks_.back();
  free_chunks_.pop_back();
  return Status::Ok();
}

void SpillBacking::HandOff() {
  if (!writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
  if (writes_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    handed_.insert(handed_.end(), writes_.begin(), writes_.end());
    handed_count_ += writes_.size();
  }
  writes_.clear();
  write_cv_.notify_all();
}

void SpillBacking::WriterLoop() {
  NameThisThread("sluice-spill");
  // The queue is made here: an io_uring ring may be set up for the one thread that submits.
  std::unique_ptr<IoExecutor> executor;
  {
    Result<std::unique_ptr<IoBackend>> backend = MakeProcessBackend(options_.write_backend, options_.write_depth);
    std::lock_guard<std::mutex> lock(write_mutex_);
    if (backend.ok()) {
      executor = std::make_unique<IoExecutor>(std::move(backend).value());
    } else {
      write_error_ = IoError("the feature spill file " + spill_.path() + ": no io queue for its writes: " +
                             backend.status().message());
    }
  }
  std::vector<IoRequest> batch;
  for (;;) {
    Status s;  // after a failure the rest is not written (the io thread reports the first error)
    {
      std::unique_lock<std::mutex> lock(write_mutex_);
      write_cv_.wait(lock, [this] { return stop_writer_ || !handed_.empty(); });
      if (handed_.empty()) return;  // stopping, and nothing left to write
      batch.swap(handed_);
      s = write_error_;
    }
    if (s.ok()) s = executor->Execute(batch);
    {
      std::lock_guard<std::mutex> lock(write_mutex_);
      for (const IoRequest& r : batch) {
        free_chunks_.push_back(r.buffer);
        if (s.ok()) written_bytes_ += r.length_bytes;
      }
      written_count_ += batch.size();
      if (!s.ok() && write_error_.ok()) {
        write_error_ = IoError("the feature spill file " + spill_.path() + ": " + s.message());
      }
    }
    write_cv_.notify_all();
    batch.clear();
  }
}

Status SpillBacking::WriteChunks(IoSession& io) {
  if (options_.async_writes) {
    HandOff();
    std::unique_lock<std::mutex> lock(write_mutex_);
    write_cv_.wait(lock, [this] { return written_count_ == handed_count_; });
    stats_.bytes_written = written_bytes_;
    return write_error_;
  }
  if (writes_.empty()) return Status::Ok();
  Status s = io.executor().Execute(writes_);
  for (const IoRequest& r : writes_) {
    free_chunks_.push_back(r.buffer);
    stats_.bytes_written += r.length_bytes;
  }
  writes_.clear();
  if (!s.ok()) return IoError("the feature spill file " + spill_.path() + ": " + s.message());
  return Status::Ok();
}

Status SpillBacking::Complete(IoSession& io, uint64_t step) {
  Pack* p = Find(step);
  if (p == nullptr) return Status::Ok();
  if (p->has_file && p->written != p->rows.size()) {
    return FailedPrecondition("spill: step " + std::to_string(step) + "'s pack holds " + std::to_string(p->written) +
                              " of its " + std::to_string(p->rows.size()) + " rows when complete");
  }
  if (p->chunk != nullptr) QueueChunk(*p);
  p->complete = true;
  return WriteChunks(io);
}

Status SpillBacking::Advance(IoSession& io, uint64_t local) {
  if (!active_) return Status::Ok();
  SLUICE_RETURN_IF_ERROR(EnsureStarted(io));
  const uint64_t t = offset_ + local;
  next_ = t + 1;
  while (!packs_.empty() && packs_.front().step < next_) packs_.pop_front();
  const uint64_t k = options_.horizon_steps;
  SLUICE_RETURN_IF_ERROR(List(t + k));
  SLUICE_RETURN_IF_ERROR(RegionPass(io, t % k, t + 1, t + k));
  return Complete(io, t + 1);
}

Status SpillBacking::ReadScatter(IoSession& io, std::span<const RowKey> keys, std::span<std::byte* const> rows,
                                 uint32_t row_bytes, uint32_t gap_bytes) {
  if (!active_) return source_->ReadScatter(io, keys, rows, row_bytes, gap_bytes);
  SLUICE_RETURN_IF_ERROR(EnsureStarted(io));
  const auto start = SteadyClock::now();
  const Pack* p = Find(next_);
  if (p != nullptr && !(p->has_file && p->complete)) p = nullptr;
  serve_.clear();
  direct_keys_.clear();
  direct_rows_.clear();
  // The keys in row order merged with the pack's rows (sorted): a search per key and a sort of
  // what it finds by pack position cost more than one sort here. What the pack holds goes to
  // serve_ in pack order (positions from `rotate` on come first: the pack starts there).
  by_id_.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (p != nullptr && keys[i].id < file_->num_rows()) {
      by_id_.push_back(keys[i].id << 32 | i);  // rows and keys fewer than 2^32
    } else {
      direct_keys_.push_back(keys[i]);
      direct_rows_.push_back(rows[i]);
    }
  }
  RadixSortBy(by_id_, sort_scratch_, 32);  // by row, then key index (pushed in order)
  if (p != nullptr) {
    const size_t n = p->rows.size();
    size_t at = 0, wrapped = 0;  // serve_[0, wrapped): positions below rotate, moved last below
    for (const uint64_t both : by_id_) {
      const uint64_t id = both >> 32;
      const auto i = static_cast<uint32_t>(both);
      while (at < n && p->rows[at] < id) ++at;
      if (at < n && p->rows[at] == id) {
        serve_.emplace_back(at >= p->rotate ? at - p->rotate : at + n - p->rotate, rows[i]);
        if (at < p->rotate) ++wrapped;
      } else {
        direct_keys_.push_back(keys[i]);
        direct_rows_.push_back(rows[i]);
      }
    }
    std::rotate(serve_.begin(), serve_.begin() + static_cast<std::ptrdiff_t>(wrapped), serve_.end());
  }
  if (!serve_.empty()) SLUICE_RETURN_IF_ERROR(ServeFromPack(io, *p));
  stats_.serve_s += SecondsSince(start);
  stats_.rows_direct += direct_keys_.size();
  if (direct_keys_.empty()) return Status::Ok();
  return source_->ReadScatter(io, direct_keys_, direct_rows_, row_bytes, gap_bytes);
}

// Reads the pack's chunks that hold a wanted row (serve_, in pack order), in order, at the session's depth, and copies
// each wanted row to its destination.
Status SpillBacking::ServeFromPack(IoSession& io, const Pack& p) {
  // Reads of read_bytes: aligned runs of the pack's chunks (contiguous in the spill file).
  const uint64_t per_read = std::max<uint64_t>(1, options_.read_bytes / options_.chunk_bytes);
  const uint64_t read_bytes = per_read * options_.chunk_bytes;
  auto& reads = serve_chunks_;
  reads.clear();
  for (size_t i = 0; i < serve_.size(); ++i) {
    const uint64_t g = serve_[i].first / chunk_rows_ / per_read;
    if (reads.empty() || reads.back().first != g) reads.emplace_back(g, i);
  }
  io.EnsureSlotBytes(read_bytes);
  auto prepare = [&](size_t index, uint32_t slot) {
    IoRequest& r = io.slot_request(slot);
    r = IoRequest{};
    r.kind = IoKind::kRead;
    r.file = &spill_;
    const uint64_t at = reads[index].first * read_bytes;
    r.offset_bytes = p.base + at;
    r.length_bytes = static_cast<uint32_t>(std::min(read_bytes, p.bytes - at));
    r.buffer = io.slot_buffer(slot);
    return &r;
  };
  auto complete = [&](size_t index, uint32_t, IoRequest& r) {
    const size_t end = index + 1 < reads.size() ? reads[index + 1].second : serve_.size();
    const uint64_t first_row = reads[index].first * per_read * chunk_rows_;
    for (size_t i = reads[index].second; i < end; ++i) {
      const uint64_t at = serve_[i].first - first_row;  // chunks may end in slack: by chunk, then row
      std::memcpy(serve_[i].second, r.buffer + at / chunk_rows_ * options_.chunk_bytes + at % chunk_rows_ * row_bytes_,
                  row_bytes_);
    }
    return IoNext::kDone;
  };
  Status s = io.executor().Stream(reads.size(), prepare, complete);
  if (!s.ok()) return IoError("the feature spill file " + spill_.path() + ": " + s.message());
  stats_.rows_served += serve_.size();
  return Status::Ok();
}

}  // namespace sluice
