#include "train/dlrm_trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <unistd.h>

#include "cache/row_cache.h"
#include "common/crash_point.h"
#include "common/units.h"
#include "prefetch/row_prefetcher.h"
#include "prefetch/row_preloader.h"
#include "sampler/random.h"
#include "storage/dataset.h"
#include "storage/file.h"
#include "storage/kv_table.h"
#include "storage/row_file.h"
#include "storage/write_back_buffer.h"
#include "train/row_optimizers.h"
#include "train/run_dir.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::atomic<bool> g_interrupted{false};
extern "C" void OnDlrmInterrupt(int) { g_interrupted.store(true); }

// Memory the engine needs besides the row cache and the per-step buffers: the libtorch runtime
// (its code and allocator: `sluice version` alone has a resident set of 172 MB here).
constexpr uint64_t kBaseBytes = 192ull << 20;

// The DLRM network: bottom MLP over the dense features (a learned vector when a dataset has
// none), pairwise dot products of it and every table's embedding, top MLP to one logit.
struct DlrmNetImpl : torch::nn::Module {
  DlrmNetImpl(int dense, int tables, int dim, bool linear_term, const std::vector<int>& bottom_layers,
              const std::vector<int>& top_layers)
      : has_dense(dense > 0), linear(linear_term), dim_(dim) {
    if (has_dense) {
      int in = dense;
      for (int h : bottom_layers) {
        bottom->push_back(torch::nn::Linear(in, h));
        bottom->push_back(torch::nn::ReLU());
        in = h;
      }
      bottom->push_back(torch::nn::Linear(in, dim));
      bottom->push_back(torch::nn::ReLU());
      register_module("bottom", bottom);
    } else {
      x0 = register_parameter("x0", torch::rand({dim}) - 0.5);
    }
    const int f = tables + 1;
    std::vector<int64_t> tri;
    for (int i = 0; i < f; ++i) {
      for (int j = 0; j < i; ++j) tri.push_back(i * f + j);
    }
    pairs = torch::tensor(tri, torch::kInt64);
    features = f;
    int in = dim + static_cast<int>(tri.size());
    for (int h : top_layers) {
      top->push_back(torch::nn::Linear(in, h));
      top->push_back(torch::nn::ReLU());
      in = h;
    }
    top->push_back(torch::nn::Linear(in, 1));
    register_module("top", top);
  }

  // dense [B, D], rows [B, C, dim (+1 with the linear term)] -> logits [B]
  torch::Tensor forward(const torch::Tensor& dense, const torch::Tensor& rows) {
    const int64_t b = rows.size(0);
    const torch::Tensor emb = linear ? rows.narrow(2, 0, dim_) : rows;
    torch::Tensor x = has_dense ? bottom->forward(dense) : x0.unsqueeze(0).expand({b, dim_});
    torch::Tensor t = torch::cat({x.unsqueeze(1), emb}, 1);
    torch::Tensor z = torch::bmm(t, t.transpose(1, 2)).reshape({b, features * features});
    z = z.index_select(1, pairs);
    torch::Tensor logit = top->forward(torch::cat({x, z}, 1)).reshape({b});
    if (linear) logit = logit + rows.select(2, dim_).sum(1);  // each row's first-order weight
    return logit;
  }

  bool has_dense;
  bool linear;
  int64_t dim_;
  int64_t features = 0;
  torch::nn::Sequential bottom, top;
  torch::Tensor x0, pairs;
};
TORCH_MODULE(DlrmNet);

// Rows of dense tables in one row file: table k's row i is file row offsets[k] + i. A bitmap
// remembers which rows were ever written back: the others still hold their initial value (a
// pure function of seed, table and id), so loading them needs no read at all. Most misses of a
// skewed click log are first touches of tail ids, and they cost no io.
class RowFileBacking : public RowBacking {
 public:
  // staging_rows > 0: written rows wait in a WriteBackBuffer and reach the file in sorted sweeps.
  RowFileBacking(RowFile* file, const std::vector<uint64_t>* offsets, RowInit init, bool all_written,
                 uint64_t staging_rows)
      : file_(file), offsets_(offsets), init_(std::move(init)),
        written_((offsets->back() + 63) / 64, all_written ? ~uint64_t{0} : 0) {
    if (staging_rows > 0) {
      staged_ = std::make_unique<WriteBackBuffer>(file, WriteBackOptions{.capacity_rows = staging_rows});
    }
  }
  Status Read(IoSession& io, std::span<const RowKey> keys, std::byte* out) override {
    const uint32_t rb = file_->row_bytes();
    ids_.clear();
    where_.clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint64_t row = (*offsets_)[keys[i].table] + keys[i].id;
      if (!cached_.empty()) cached_[row / 64] |= uint64_t{1} << (row % 64);
      if (const std::byte* p = staged_ ? staged_->Find(row) : nullptr) {
        std::memcpy(out + i * rb, p, rb);
      } else if (preload_ && preload_->Take(row, out + i * rb)) {
      } else if (Bit(written_, row)) {
        ids_.push_back(row);
        where_.push_back(i);
      } else {
        init_(keys[i], out + i * rb);
      }
    }
    if (ids_.empty()) return Status::Ok();
    buffer_.resize(ids_.size() * rb);
    SLUICE_RETURN_IF_ERROR(file_->ReadRows(io, ids_, buffer_.data()));
    for (size_t j = 0; j < ids_.size(); ++j) std::memcpy(out + where_[j] * rb, buffer_.data() + j * rb, rb);
    reads_ += ids_.size();
    return Status::Ok();
  }
  Status Write(IoSession& io, std::span<const RowKey> keys, const std::byte* rows) override {
    ids_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) ids_[i] = (*offsets_)[keys[i].table] + keys[i].id;
    SLUICE_RETURN_IF_ERROR(staged_ ? staged_->Write(io, ids_, rows) : file_->WriteRows(io, ids_, rows));
    for (uint64_t row : ids_) {
      written_[row / 64] |= uint64_t{1} << (row % 64);
      if (!cached_.empty()) cached_[row / 64] &= ~(uint64_t{1} << (row % 64));
      if (preload_) preload_->Drop(row);  // (never held: a row the cache had is not read ahead)
    }
    return Status::Ok();
  }
  Status Flush(IoSession& io) override { return staged_ ? staged_->Flush(io) : Status::Ok(); }
  Status Advance(IoSession& io, uint64_t t) override { return preload_ ? preload_->Advance(io, t) : Status::Ok(); }
  uint64_t rows_read() const override { return reads_; }
  const WriteBackBuffer* staging() const { return staged_.get(); }

  // Reads rows ahead for one training pass (see RowPreloader): rows the cache holds, staged
  // rows and rows never written are not read ahead. Marks the rows the cache holds from here on.
  // With a write-back buffer, a region pass also sweeps the region's staged rows (one read of
  // its extents serves both) when it holds at least half its share of the buffer; a sparser
  // region is only read (sweeping it would rewrite whole pages for a few rows, and with a large
  // file turns training disk bound).
  void StartPreload(RowPreloader::StepRows step_rows, RowPreloaderOptions options) {
    if (cached_.empty()) cached_.assign(written_.size(), 0);
    RowPreloader::ReadRegion read;
    if (staged_) {
      options.regions = staged_->regions();
      const uint64_t min_staged = std::max<uint64_t>(1, staged_->capacity_rows() / (2 * staged_->regions()));
      read = [this, min_staged](IoSession& io, uint32_t region, std::span<const uint64_t> ids, std::byte* out) {
        return staged_->SweepWith(io, region, ids, out, min_staged);
      };
    }
    preload_ = std::make_unique<RowPreloader>(
        file_, std::move(step_rows),
        // (Staged rows are read ahead too: SweepWith hands out their staged copies.)
        [this](uint64_t row) { return Bit(cached_, row) || !Bit(written_, row); },
        options, std::move(read));
  }
  void StopPreload() {
    if (!preload_) return;
    const RowPreloaderStats& s = preload_->stats();
    preload_stats_.passes += s.passes;
    preload_stats_.rows_read += s.rows_read;
    preload_stats_.rows_taken += s.rows_taken;
    preload_stats_.rows_expired += s.rows_expired;
    preload_stats_.rows_left += s.rows_left;
    preload_stats_.peak_held = std::max(preload_stats_.peak_held, s.peak_held);
    preload_.reset();
  }
  const RowPreloaderStats& preload_stats() const { return preload_stats_; }

 private:
  static bool Bit(const std::vector<uint64_t>& bits, uint64_t row) { return bits[row / 64] >> (row % 64) & 1; }

  RowFile* file_;
  const std::vector<uint64_t>* offsets_;
  RowInit init_;
  std::vector<uint64_t> written_;
  // Rows the cache holds (read, not yet written back; a row evicted clean stays marked, which
  // only keeps it from being read ahead). Kept once a pass reads ahead.
  std::vector<uint64_t> cached_;
  std::unique_ptr<WriteBackBuffer> staged_;
  std::unique_ptr<RowPreloader> preload_;
  RowPreloaderStats preload_stats_;
  std::vector<uint64_t> ids_;
  std::vector<size_t> where_;
  std::vector<std::byte> buffer_;
  uint64_t reads_ = 0;
};

// Rows in RocksDB under (table, id); a row never written reads as its initial value.
class KvBacking : public RowBacking {
 public:
  KvBacking(KvTable* kv, RowInit init) : kv_(kv), init_(std::move(init)) {}
  Status Read(IoSession&, std::span<const RowKey> keys, std::byte* out) override {
    SLUICE_RETURN_IF_ERROR(kv_->MultiGet(keys, out, found_));
    const uint32_t rb = kv_->row_bytes();
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!found_[i]) {
        init_(keys[i], out + i * rb);
      } else {
        ++reads_;
      }
    }
    return Status::Ok();
  }
  uint64_t rows_read() const override { return reads_; }
  Status Write(IoSession&, std::span<const RowKey> keys, const std::byte* rows) override {
    return kv_->Write(keys, rows);
  }

 private:
  KvTable* kv_;
  RowInit init_;
  std::vector<bool> found_;
  uint64_t reads_ = 0;
};

struct TimeSplit {
  double wait_s = 0, gather_s = 0, compute_s = 0, update_s = 0;
};

class DlrmRun {
 public:
  explicit DlrmRun(DlrmConfig config) : cfg_(std::move(config)) {}

  Status Open();
  Status Train(const DlrmTrainOptions& options);
  // Evaluation state: the latest checkpoint's tables and dense model, read only.
  Status OpenLatestForEval();
  Result<DlrmMetrics> Evaluate(const std::string& split, uint64_t max_samples,
                               std::vector<float>* scores = nullptr,
                               std::vector<float>* labels = nullptr);
  Status Export(const std::string& out_dir);
  const DlrmConfig& config() const { return cfg_; }

 private:
  uint64_t NumSamples(const std::string& split) const {
    auto it = dataset_.manifest().samples.find(split);
    return it == dataset_.manifest().samples.end() ? 0 : it->second;
  }
  RowKey MapId(uint32_t table, uint64_t raw) const;
  void InitRow(const RowKey& key, std::byte* row) const;
  Status SetUpStorage(bool fresh_table, const std::string& rows_from);
  // Distinct rows per step over the train split's first steps (the most seen), for the memory
  // plan: the cache indexes the rows of the window's steps.
  Result<uint64_t> SampleDistinctRowsPerStep();
  Status CreateRowFile(const std::string& path);
  RowPrefetcher::Source MakeSource(const File* samples, uint64_t n, uint64_t first_step,
                                   uint64_t steps);
  std::unique_ptr<RowPrefetcher> MakePrefetcher(RowPrefetcher::Source source, bool writes);
  Status FinishPass(RowPrefetcher& p);
  Status ReadBatch(const RowBatch& b, const std::string& split, torch::Tensor& dense,
                   torch::Tensor& labels) const;
  Result<double> TrainStep(RowBatch& b);
  Status SyncTables();
  Status Checkpoint(uint64_t epoch, uint64_t step);
  Result<std::string> FindLatest() const;
  Status LoadCheckpoint(const std::string& name, bool restore_tables);
  Status LoadMemoryRows(const std::string& dir);
  Status WriteMemoryRows(const std::string& dir);
  std::string EvalSplit() const {
    return NumSamples(cfg_.eval.split) > 0 ? cfg_.eval.split : "test";
  }

  DlrmConfig cfg_;
  Dataset dataset_;
  RecordLayout rec_;
  uint32_t tables_ = 0, dim_ = 0, row_bytes_ = 0;
  uint32_t width_ = 0;  // floats trained per row: dim, plus the linear term's weight
  RowOptimizer row_opt_ = RowOptimizer::kRowwiseAdagrad;
  bool in_memory_ = false, rocksdb_ = false, raw_ids_ = false;
  std::vector<uint64_t> offsets_;  // dense tables: first row of each, then the total
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> vocab_;  // per table: (raw id, row)
  std::string tables_dir_;
  // Storage.
  std::unique_ptr<MemoryRows> memory_;
  std::unique_ptr<RowFile> row_file_;
  std::unique_ptr<KvTable> kv_;
  std::unique_ptr<RowBacking> backing_;
  std::unique_ptr<RowCache> cache_;
  AlignedBuffer arena_;
  uint32_t window_ = 0, run_ahead_ = 0;
  std::string memory_plan_;
  uint64_t preload_rows_ = 0;  // rows read ahead per training pass (0: none)
  // Model.
  DlrmNet net_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> opt_;
  // Bookkeeping.
  uint64_t start_epoch_ = 0, start_step_ = 0, steps_run_ = 0;
  std::string latest_, previous_;
  TimeSplit time_;
  StageTime read_time_, plan_time_, io_time_;
  uint64_t rows_loaded_ = 0, rows_written_ = 0;
  double checkpoint_s_ = 0, eval_s_ = 0;
  std::vector<int64_t> inverse_scratch_;
};

RowKey DlrmRun::MapId(uint32_t table, uint64_t raw) const {
  if (raw_ids_) return RowKey{raw, table};
  if (!vocab_.empty()) {
    const auto& v = vocab_[table];
    auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(raw, uint64_t{0}));
    const uint64_t row = it != v.end() && it->first == raw ? it->second : v.size();  // unseen: last row
    return RowKey{row, table};
  }
  return RowKey{raw % cfg_.model.table_rows, table};
}

void DlrmRun::InitRow(const RowKey& key, std::byte* row) const {
  float* f = reinterpret_cast<float*>(row);
  const Key k = Key(cfg_.train.seed).With(0xD1A7AB1E).With(key.table).With(key.id);
  const double s = cfg_.model.init_scale;
  for (uint32_t j = 0; j < dim_; ++j) f[j] = static_cast<float>((2.0 * k.Unit(j) - 1.0) * s);
  std::memset(row + dim_ * 4, 0, row_bytes_ - dim_ * 4);
  // The optimizer state after the trained floats (none for sgd).
  const auto state = static_cast<float>(cfg_.train.adagrad_init);
  for (uint32_t j = width_; j < row_bytes_ / 4; ++j) f[j] = state;
}

Status DlrmRun::Open() {
  SLUICE_ASSIGN_OR_RETURN(dataset_, Dataset::Open(cfg_.dataset));
  const Manifest& m = dataset_.manifest();
  if (m.task != TaskKind::kRecommendation) {
    return InvalidArgument("dataset " + cfg_.dataset + " is a " + TaskKindName(m.task) +
                           " dataset; task: recommendation needs click samples");
  }
  if (NumSamples("train") == 0) return InvalidArgument("dataset " + cfg_.dataset + " has no train samples");
  rec_ = m.record;
  tables_ = rec_.sparse;
  if (tables_ == 0) return InvalidArgument("dataset " + cfg_.dataset + " has no categorical features");
  dim_ = static_cast<uint32_t>(cfg_.model.dim);
  SLUICE_ASSIGN_OR_RETURN(row_opt_, ParseRowOptimizer(cfg_.train.optimizer));
  width_ = dim_ + (cfg_.model.linear ? 1 : 0);
  row_bytes_ = 4 * (width_ + RowStateFloats(row_opt_, width_));
  in_memory_ = cfg_.storage.mode == "in_memory";
  rocksdb_ = !in_memory_ && cfg_.storage.backend == "rocksdb";
  raw_ids_ = cfg_.model.ids == "raw";
  if (raw_ids_ && !in_memory_ && !rocksdb_) {
    return InvalidArgument("model.ids: raw keeps 64-bit ids, which only storage.backend: rocksdb "
                           "(or storage.mode: in_memory) can hold; use ids: modulo or vocab with rowfile");
  }
  if (cfg_.model.ids == "vocab") {
    for (uint32_t k = 0; k < tables_; ++k) {
      const std::string role = "vocab." + std::to_string(k) + ".ids";
      if (!dataset_.Has(role)) {
        return InvalidArgument("model.ids: vocab needs the dataset's vocabularies, but " + cfg_.dataset +
                               " has no " + role + " (preprocess with --min-count)");
      }
      SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset_.File(role));
      std::vector<uint64_t> ids(f->elements());
      SLUICE_ASSIGN_OR_RETURN(File file, File::Open(dataset_.PathOf(*f), OpenMode::kRead, false));
      SLUICE_RETURN_IF_ERROR(PreadFull(file, reinterpret_cast<std::byte*>(ids.data()), ids.size() * 8, 0));
      std::vector<std::pair<uint64_t, uint64_t>> v(ids.size());
      for (uint64_t i = 0; i < ids.size(); ++i) v[i] = {ids[i], i};
      std::sort(v.begin(), v.end());
      vocab_.push_back(std::move(v));
    }
  }
  if (!raw_ids_) {
    offsets_.assign(1, 0);
    for (uint32_t k = 0; k < tables_; ++k) {
      const uint64_t rows = vocab_.empty() ? cfg_.model.table_rows : vocab_[k].size() + 1;
      offsets_.push_back(offsets_.back() + rows);
    }
  }
  tables_dir_ = cfg_.run_dir + "/tables";
  torch::manual_seed(cfg_.train.seed);
  net_ = DlrmNet(static_cast<int>(rec_.dense), static_cast<int>(tables_), cfg_.model.dim,
                 cfg_.model.linear, cfg_.model.bottom, cfg_.model.top);
  const double lr = cfg_.train.dense_lr;
  if (cfg_.train.dense_optimizer == "sgd") {
    opt_ = std::make_unique<torch::optim::SGD>(net_->parameters(), torch::optim::SGDOptions(lr));
  } else if (cfg_.train.dense_optimizer == "adagrad") {
    opt_ = std::make_unique<torch::optim::Adagrad>(net_->parameters(), torch::optim::AdagradOptions(lr));
  } else {
    opt_ = std::make_unique<torch::optim::Adam>(net_->parameters(), torch::optim::AdamOptions(lr));
  }
  return Status::Ok();
}

Status DlrmRun::CreateRowFile(const std::string& path) {
  const std::string temp = path + ".tmp";
  RowFileOptions ro = RowFileOptionsFrom(cfg_.io);
  {
    SLUICE_ASSIGN_OR_RETURN(auto file, RowFile::Create(temp, row_bytes_, offsets_.back(), ro));
    SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
    constexpr uint64_t kChunk = 1 << 16;
    std::vector<std::byte> rows(kChunk * row_bytes_);
    for (uint32_t t = 0; t < tables_; ++t) {
      const uint64_t n = offsets_[t + 1] - offsets_[t];
      for (uint64_t lo = 0; lo < n; lo += kChunk) {
        const uint64_t c = std::min(kChunk, n - lo);
        for (uint64_t i = 0; i < c; ++i) InitRow(RowKey{lo + i, t}, rows.data() + i * row_bytes_);
        SLUICE_RETURN_IF_ERROR(file->WriteRange(*io, offsets_[t] + lo, c, rows.data()));
      }
    }
    SLUICE_RETURN_IF_ERROR(file->Sync());
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) return IoError("rename " + temp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

// Storage for training (fresh_table: start from initial rows) or evaluation (rows_from: a
// checkpoint directory whose tables are read, never written).
Status DlrmRun::SetUpStorage(bool fresh_table, const std::string& rows_from) {
  auto init = [this](const RowKey& k, std::byte* row) { InitRow(k, row); };
  const uint64_t keys_per_step = uint64_t{static_cast<uint64_t>(cfg_.train.batch)} * tables_;
  if (in_memory_) {
    memory_ = std::make_unique<MemoryRows>(row_bytes_, offsets_, init);
    if (!rows_from.empty()) SLUICE_RETURN_IF_ERROR(LoadMemoryRows(rows_from));
    run_ahead_ = static_cast<uint32_t>(cfg_.storage.run_ahead);
    memory_plan_ = "in memory: " + std::string(raw_ids_ ? "rows created on first use" :
                   FormatCount(static_cast<double>(offsets_.back())) + " rows") +
                   " of " + std::to_string(row_bytes_) + " bytes";
    return Status::Ok();
  }
  fs::create_directories(tables_dir_);
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  uint64_t params = 0;
  for (const auto& p : net_->parameters()) params += static_cast<uint64_t>(p.numel());
  uint64_t widths = dim_;
  for (int w : cfg_.model.bottom) widths += static_cast<uint64_t>(w);
  for (int w : cfg_.model.top) widths += static_cast<uint64_t>(w);
  const uint64_t f = tables_ + 1;
  // What the budget must hold besides cached rows, estimated from the shapes:
  const uint64_t dense_bytes = params * 4 * 4;  // weights, gradients, two optimizer moments
  // Activations and their gradients: gathered rows and their sums, the embedding batch and its
  // gradient, interactions, MLP layers (kept for backward), each a few times.
  const uint64_t activations = batch * (uint64_t{tables_} * width_ * 4 * 6 + f * f * 4 * 3 + widths * 4 * 4);
  // Per step in the pipeline's ring: records, keys, inverse, distinct keys and row pointers.
  const uint64_t per_step = batch * rec_.bytes() + keys_per_step * (16 + 4 + 16 + 8 + 8);
  // io: the ring's staging slots, a step's loads and write-backs, the written-rows bitmap.
  const uint64_t io_bytes = uint64_t{static_cast<uint64_t>(cfg_.io.queue_depth)} * cfg_.io.merge_max.value +
                            2 * keys_per_step * row_bytes_ + (raw_ids_ ? 0 : offsets_.back() / 8);
  KvTableOptions kvo;
  kvo.block_cache_bytes = cfg_.storage.rocksdb_cache.value;
  kvo.memtable_bytes = cfg_.storage.rocksdb_memtable.value;
  const uint64_t kv_bytes = rocksdb_ ? KvTable::BudgetBytes(kvo) : 0;
  const uint32_t d = static_cast<uint32_t>(cfg_.storage.run_ahead);
  const bool oracle = cfg_.storage.planner == "oracle";
  const uint64_t budget = cfg_.storage.budget.value;
  const uint64_t fixed = kBaseBytes + dense_bytes + activations + io_bytes + kv_bytes;
  const uint64_t min_rows = MinCapacityRows(0, d, keys_per_step);
  // Rows pending in the window: measured on the first steps, with a margin (the index grows if
  // later steps have more).
  SLUICE_ASSIGN_OR_RETURN(const uint64_t sampled, SampleDistinctRowsPerStep());
  const uint64_t step_rows = std::min(keys_per_step, sampled + sampled / 4);
  auto need = [&](uint64_t w) {
    return fixed + (w + d + 2) * per_step + min_rows * row_bytes_ + RowCacheIndexBytes(min_rows, w * step_rows);
  };
  uint64_t window = oracle ? static_cast<uint64_t>(cfg_.storage.window) : 0;
  if (need(0) > budget && cfg_.storage.cache_rows == 0) {
    return InvalidArgument("storage.budget " + FormatBytes(budget) + " cannot hold one step's working set: "
                           "a batch of " + std::to_string(cfg_.train.batch) + " samples x " +
                           std::to_string(tables_) + " tables with run_ahead " + std::to_string(d) +
                           " needs at least " + FormatBytes(need(0)) + " (raise the budget or lower train.batch)");
  }
  while (window > 0 && need(window) > budget) --window;  // the window's ring must fit too
  const uint64_t reserved = fixed + (window + d + 2) * per_step;
  // The rest holds rows: the cache and, for a row file, the write-back buffer (its share, once
  // the cache holds the steps in flight).
  const uint64_t rows_memory = budget > reserved ? budget - reserved : 0;
  const uint64_t window_rows = (window + 1) * step_rows;  // the window's and the planned step's
  auto cache_bytes = [&](uint64_t rows) { return rows * row_bytes_ + RowCacheIndexBytes(rows, window_rows); };
  // The most rows a cache of `bytes` holds (its index grows in steps: searched).
  auto rows_in = [&](uint64_t bytes) {
    uint64_t lo = 0, hi = bytes / row_bytes_ + 1;
    while (lo + 1 < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      (cache_bytes(mid) <= bytes ? lo : hi) = mid;
    }
    return lo;
  };
  const uint64_t per_staged = WriteBackBuffer::BytesPerRow(row_bytes_);
  const bool stage = !rocksdb_ && cfg_.storage.write_back_share > 0;
  // Reading ahead (row file, oracle only: the horizon is the oracle's knowledge stretched): its
  // share holds the rows read ahead, the horizon's row lists and the bitmap of cached rows.
  const uint32_t horizon = static_cast<uint32_t>(cfg_.storage.preload_horizon);
  const uint64_t preload_fixed = RowPreloader::HorizonBytes(horizon, step_rows) + offsets_.back() / 8;
  const auto preload_memory = !rocksdb_ && !raw_ids_ && oracle && cfg_.storage.preload_share > 0 &&
                                      offsets_.back() < (uint64_t{1} << 32)
                                  ? static_cast<uint64_t>(static_cast<double>(rows_memory) * cfg_.storage.preload_share)
                                  : 0;
  preload_rows_ = preload_memory > preload_fixed
                      ? std::min<uint64_t>({(preload_memory - preload_fixed) / RowPreloader::BytesPerRow(row_bytes_),
                                            offsets_.back(), (uint64_t{1} << 31) - 1})
                      : 0;
  const uint64_t rows_left = rows_memory - (preload_rows_ ? preload_memory : 0);
  uint64_t capacity = cfg_.storage.cache_rows;
  if (capacity == 0) {
    const auto staging_memory = stage ? static_cast<uint64_t>(
        static_cast<double>(rows_memory) * cfg_.storage.write_back_share) : 0;
    capacity = std::max(rows_in(rows_left > staging_memory ? rows_left - staging_memory : 0),
                        std::min(min_rows, rows_in(rows_left)));
  }
  if (!raw_ids_) capacity = std::min(capacity, std::max(offsets_.back(), min_rows));
  uint64_t staging_rows = 0;
  if (stage && capacity < offsets_.back() && rows_left > cache_bytes(capacity)) {
    staging_rows = (rows_left - cache_bytes(capacity)) / per_staged;
  }
  if (stage && cfg_.storage.write_back_rows > 0) staging_rows = cfg_.storage.write_back_rows;
  // No more than the tables' rows (nothing to gain) nor than the buffer's 31-bit slots.
  if (stage) staging_rows = std::min({staging_rows, offsets_.back(), (uint64_t{1} << 31) - 1});
  if (min_rows > capacity) {
    return InvalidArgument("storage.cache_rows " + std::to_string(capacity) + " cannot hold the " +
                           std::to_string(min_rows) + " rows of the steps in flight");
  }
  window_ = static_cast<uint32_t>(window);
  run_ahead_ = d;
  RowCacheOptions co;
  co.kind = oracle ? PlannerKind::kOracle : PlannerKind::kLru;
  co.capacity_rows = capacity;
  co.window_steps = window_;
  co.protect_steps = d;
  co.window_rows = window_rows;
  cache_ = std::make_unique<RowCache>(co);
  arena_ = AlignedBuffer(capacity * row_bytes_, 4096);
  if (rocksdb_) {
    std::string path = tables_dir_ + "/kv";
    if (!rows_from.empty()) path = rows_from + "/kv";
    if (fresh_table) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
    SLUICE_ASSIGN_OR_RETURN(kv_, KvTable::Open(path, row_bytes_, kvo));
    backing_ = std::make_unique<KvBacking>(kv_.get(), init);
  } else {
    std::string path = tables_dir_ + "/rows.bin";
    if (!rows_from.empty()) {
      path = rows_from + "/rows.bin";
    } else if (fresh_table || !fs::exists(path)) {
      SLUICE_RETURN_IF_ERROR(CreateRowFile(path));
    }
    SLUICE_ASSIGN_OR_RETURN(row_file_, RowFile::Open(path, row_bytes_, offsets_.back(), rows_from.empty(),
                                                    RowFileOptionsFrom(cfg_.io)));
    // A fresh table holds initial rows only; a restored or evaluated one may hold any.
    backing_ = std::make_unique<RowFileBacking>(row_file_.get(), &offsets_, init,
                                                /*all_written=*/!fresh_table || !rows_from.empty(),
                                                staging_rows);
  }
  const uint64_t table_bytes = raw_ids_ ? 0 : offsets_.back() * row_bytes_;
  memory_plan_ = "out of core (" + cfg_.storage.backend + "), budget " + FormatBytes(budget) +
                 ": cache " + FormatCount(static_cast<double>(capacity)) + " rows (" +
                 FormatBytes(cache_bytes(capacity)) + " with its index), " +
                 (staging_rows ? "write-back buffer " + FormatCount(static_cast<double>(staging_rows)) + " rows (" +
                                     FormatBytes(staging_rows * per_staged) + "), " : "") +
                 (preload_rows_ ? "read-ahead " + FormatCount(static_cast<double>(preload_rows_)) + " rows over " +
                                      std::to_string(horizon) + " steps (" + FormatBytes(preload_memory) + "), "
                                : "") +
                 "runtime " +
                 FormatBytes(kBaseBytes) + ", dense model " + FormatBytes(dense_bytes) + ", activations " +
                 FormatBytes(activations) + ", pipeline " + FormatBytes((window + d + 2) * per_step + io_bytes) +
                 ", " + cfg_.storage.planner + " window " +
                 std::to_string(window_) + " steps, run-ahead " + std::to_string(d) +
                 (rocksdb_ ? ", RocksDB caches " + FormatBytes(KvTable::BudgetBytes(kvo)) : "") +
                 (table_bytes ? ", tables " + FormatBytes(table_bytes) + " on disk (" +
                                    std::to_string(table_bytes * 100 / budget) + "% of the budget)"
                              : ", tables on disk (rows created on first use)");
  return Status::Ok();
}

Result<uint64_t> DlrmRun::SampleDistinctRowsPerStep() {
  const uint64_t n = NumSamples("train");
  if (n == 0) return uint64_t{0};
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset_.File("samples.train"));
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(dataset_.PathOf(*f), OpenMode::kRead, false));
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  const uint64_t steps = std::min<uint64_t>((n + batch - 1) / batch, 8);
  auto source = MakeSource(&file, n, 0, steps);
  RowBatch b;
  std::vector<RowKey> keys;
  uint64_t most = 0;
  for (uint64_t t = 0; t < steps; ++t) {
    SLUICE_ASSIGN_OR_RETURN(bool more, source(t, b));
    if (!more) break;
    keys = b.keys;
    std::sort(keys.begin(), keys.end(), [](const RowKey& x, const RowKey& y) {
      return x.table != y.table ? x.table < y.table : x.id < y.id;
    });
    const auto distinct = static_cast<uint64_t>(std::unique(keys.begin(), keys.end()) - keys.begin());
    most = std::max(most, distinct);
  }
  return most;
}

RowPrefetcher::Source DlrmRun::MakeSource(const File* samples, uint64_t n, uint64_t first_step,
                                          uint64_t steps) {
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  const uint32_t rb = rec_.bytes();
  return [this, samples, n, first_step, steps, batch, rb](uint64_t t, RowBatch& b) -> Result<bool> {
    const uint64_t step = first_step + t;
    if (step >= steps) return false;
    const uint64_t lo = step * batch, count = std::min(batch, n - lo);
    b.records.resize(count * rb);
    SLUICE_RETURN_IF_ERROR(PreadFull(*samples, b.records.data(), b.records.size(), lo * rb));
    b.samples = static_cast<uint32_t>(count);
    b.keys.resize(count * tables_);
    for (uint64_t i = 0; i < count; ++i) {
      const std::byte* r = b.records.data() + i * rb;
      for (uint32_t f = 0; f < tables_; ++f) {
        uint64_t raw;
        std::memcpy(&raw, r + 8 * f, 8);
        b.keys[i * tables_ + f] = MapId(f, raw);
      }
    }
    return true;
  };
}

std::unique_ptr<RowPrefetcher> DlrmRun::MakePrefetcher(RowPrefetcher::Source source, bool writes) {
  RowPrefetcherOptions po;
  po.run_ahead = run_ahead_;
  po.writes = writes;
  po.io = cfg_.io;
  if (in_memory_) return std::make_unique<RowPrefetcher>(memory_.get(), po, std::move(source));
  return std::make_unique<RowPrefetcher>(cache_.get(), arena_.data(), row_bytes_, backing_.get(), po,
                                         std::move(source));
}

Status DlrmRun::FinishPass(RowPrefetcher& p) {
  Status s = p.Stop();
  if (auto* rf = dynamic_cast<RowFileBacking*>(backing_.get())) rf->StopPreload();
  read_time_.busy_s += p.read_time().busy_s;
  read_time_.wait_s += p.read_time().wait_s;
  plan_time_.busy_s += p.plan_time().busy_s;
  io_time_.busy_s += p.io_time().busy_s;
  io_time_.wait_s += p.io_time().wait_s;
  rows_loaded_ += p.rows_loaded();
  rows_written_ += p.rows_written();
  return s;
}

Status DlrmRun::ReadBatch(const RowBatch& b, const std::string& split, torch::Tensor& dense,
                          torch::Tensor& labels) const {
  const int64_t n = b.samples;
  const uint32_t rb = rec_.bytes();
  dense = torch::empty({n, static_cast<int64_t>(rec_.dense)});
  labels = torch::empty({n});
  float* dp = dense.data_ptr<float>();
  float* lp = labels.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const std::byte* r = b.records.data() + i * rb;
    std::memcpy(dp + i * rec_.dense, r + rec_.dense_offset(), rec_.dense * 4);
    std::memcpy(lp + i, r + rec_.label_offset(), 4);
    if (lp[i] != 0.0f && lp[i] != 1.0f) {
      return InvalidArgument(cfg_.dataset + ": samples." + split + " record " +
                             std::to_string(b.step * static_cast<uint64_t>(cfg_.train.batch) + i) +
                             ": label " + std::to_string(lp[i]) + " is not 0 or 1");
    }
  }
  return Status::Ok();
}

// Gathers the step's distinct rows (first-occurrence order), runs forward and backward, sums
// each row's gradients in sample order, and updates the rows in place.
Result<double> DlrmRun::TrainStep(RowBatch& b) {
  auto start = Clock::now();
  torch::Tensor dense, labels;
  SLUICE_RETURN_IF_ERROR(ReadBatch(b, "train", dense, labels));
  const int64_t n = b.samples, u = static_cast<int64_t>(b.unique.size()), d = width_;
  torch::Tensor rows = torch::empty({u, d});
  float* rp = rows.data_ptr<float>();
  for (int64_t j = 0; j < u; ++j) std::memcpy(rp + j * d, b.rows[j], d * 4);
  inverse_scratch_.assign(b.inverse.begin(), b.inverse.end());
  torch::Tensor inv = torch::from_blob(inverse_scratch_.data(), {n * tables_}, torch::kInt64);
  torch::Tensor emb = rows.index_select(0, inv).reshape({n, tables_, d}).requires_grad_(true);
  time_.gather_s += Since(start);
  start = Clock::now();
  torch::Tensor logits = net_->forward(dense, emb);
  torch::Tensor loss = torch::binary_cross_entropy_with_logits(logits, labels);
  opt_->zero_grad();
  loss.backward();
  opt_->step();
  time_.compute_s += Since(start);
  start = Clock::now();
  torch::Tensor g = emb.grad().reshape({n * tables_, d}).contiguous();
  const float* gp = g.data_ptr<float>();
  std::vector<float> sums(static_cast<size_t>(u * d), 0.0f);
  for (int64_t i = 0; i < n * tables_; ++i) {
    float* __restrict s = sums.data() + int64_t{b.inverse[i]} * d;
    const float* __restrict gi = gp + i * d;
    for (int64_t j = 0; j < d; ++j) s[j] += gi[j];
  }
  UpdateRows(row_opt_, reinterpret_cast<float* const*>(b.rows.data()), sums.data(), 0, u, d,
             static_cast<float>(cfg_.train.lr));
  time_.update_s += Since(start);
  return loss.item<double>();
}

double AucOf(const std::vector<float>& scores, const std::vector<float>& labels) {
  return AreaUnderRoc(scores.data(), labels.data(), scores.size());
}

Result<DlrmMetrics> DlrmRun::Evaluate(const std::string& split, uint64_t max_samples,
                                      std::vector<float>* scores_out, std::vector<float>* labels_out) {
  auto start = Clock::now();
  torch::NoGradGuard no_grad;
  uint64_t n = NumSamples(split);
  if (n == 0) return NotFound("dataset " + cfg_.dataset + " has no samples." + split);
  if (max_samples > 0) n = std::min(n, max_samples);
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset_.File("samples." + split));
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(dataset_.PathOf(*f), OpenMode::kRead, false));
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  const uint64_t steps = (n + batch - 1) / batch;
  auto p = MakePrefetcher(MakeSource(&file, n, 0, steps), /*writes=*/false);
  p->Start();
  std::vector<float> scores, labels;
  scores.reserve(n);
  labels.reserve(n);
  for (uint64_t t = 0; t < steps; ++t) {
    Status s;
    RowBatch* b = p->WaitReady(t, s);
    if (b == nullptr) {
      (void)FinishPass(*p);
      return s;
    }
    torch::Tensor dense, lab;
    s = ReadBatch(*b, split, dense, lab);
    if (!s.ok()) {
      (void)FinishPass(*p);
      return s;
    }
    const int64_t m = b->samples, u = static_cast<int64_t>(b->unique.size()), d = width_;
    torch::Tensor rows = torch::empty({u, d});
    for (int64_t j = 0; j < u; ++j) std::memcpy(rows.data_ptr<float>() + j * d, b->rows[j], d * 4);
    inverse_scratch_.assign(b->inverse.begin(), b->inverse.end());
    torch::Tensor inv = torch::from_blob(inverse_scratch_.data(), {m * tables_}, torch::kInt64);
    torch::Tensor prob = torch::sigmoid(net_->forward(dense, rows.index_select(0, inv).reshape({m, tables_, d})));
    p->Computed(t);
    const float* pp = prob.data_ptr<float>();
    const float* lp = lab.data_ptr<float>();
    scores.insert(scores.end(), pp, pp + m);
    labels.insert(labels.end(), lp, lp + m);
  }
  SLUICE_RETURN_IF_ERROR(FinishPass(*p));
  DlrmMetrics m;
  m.samples = n;
  m.auc = AucOf(scores, labels);
  double ll = 0, correct = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double q = std::clamp<double>(scores[i], 1e-7, 1 - 1e-7);
    ll -= labels[i] > 0.5f ? std::log(q) : std::log(1 - q);
    correct += (scores[i] > 0.5f) == (labels[i] > 0.5f);
  }
  m.logloss = ll / static_cast<double>(n);
  m.accuracy = correct / static_cast<double>(n);
  if (scores_out != nullptr) *scores_out = std::move(scores);
  if (labels_out != nullptr) *labels_out = std::move(labels);
  eval_s_ += Since(start);
  return m;
}

Status DlrmRun::SyncTables() {
  if (in_memory_) return Status::Ok();  // checkpoints write the rows from memory
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
  SLUICE_RETURN_IF_ERROR(FlushRowCache(*cache_, arena_.data(), row_bytes_, *backing_, *io));
  return rocksdb_ ? kv_->Flush() : row_file_->Sync();
}

// In-memory rows as a checkpoint file: dense tables in the row file's layout (rows.bin);
// created rows of raw ids as (uint32 table, uint32 0, uint64 id, row) records (rows.kv).
Status DlrmRun::WriteMemoryRows(const std::string& dir) {
  // Streamed in chunks (a copy of the whole table would double the resident set).
  const std::string path = dir + (memory_->dense() ? "/rows.bin" : "/rows.kv");
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kCreate, false));
  std::vector<std::byte> chunk;
  uint64_t at = 0;
  Status status;
  auto flush = [&]() {
    if (status.ok() && !chunk.empty()) status = PwriteFull(file, chunk.data(), chunk.size(), at);
    at += chunk.size();
    chunk.clear();
  };
  const bool dense = memory_->dense();
  memory_->ForEach([&](const RowKey& k, std::byte* row) {
    const size_t pos = chunk.size();
    if (dense) {
      chunk.resize(pos + row_bytes_);
      std::memcpy(chunk.data() + pos, row, row_bytes_);
    } else {
      chunk.resize(pos + 16 + row_bytes_);
      const uint32_t head[2] = {k.table, 0};
      std::memcpy(chunk.data() + pos, head, 8);
      std::memcpy(chunk.data() + pos + 8, &k.id, 8);
      std::memcpy(chunk.data() + pos + 16, row, row_bytes_);
    }
    if (chunk.size() >= (8u << 20)) flush();
  });
  if (dense) chunk.resize(chunk.size() + (RowFile::FileBytes(row_bytes_, offsets_.back()) - at - chunk.size()));
  flush();
  SLUICE_RETURN_IF_ERROR(status);
  return file.Sync();
}

Status DlrmRun::LoadMemoryRows(const std::string& dir) {
  const std::string path = dir + (memory_->dense() ? "/rows.bin" : "/rows.kv");
  SLUICE_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  if (memory_->dense()) {
    if (bytes.size() != RowFile::FileBytes(row_bytes_, offsets_.back())) {
      return Corruption(path + ": " + std::to_string(bytes.size()) + " bytes, but the model's tables take " +
                        std::to_string(RowFile::FileBytes(row_bytes_, offsets_.back())));
    }
    uint64_t i = 0;
    memory_->ForEach([&](const RowKey&, std::byte* row) { std::memcpy(row, bytes.data() + i++ * row_bytes_, row_bytes_); });
    return Status::Ok();
  }
  const size_t rec = 16 + row_bytes_;
  if (bytes.size() % rec != 0) return Corruption(path + ": size is not a whole number of rows");
  for (size_t at = 0; at < bytes.size(); at += rec) {
    uint32_t head[2];
    uint64_t id;
    std::memcpy(head, bytes.data() + at, 8);
    std::memcpy(&id, bytes.data() + at + 8, 8);
    if (head[0] >= tables_) return Corruption(path + ": row of table " + std::to_string(head[0]) + " out of range");
    std::memcpy(memory_->Row(RowKey{id, head[0]}), bytes.data() + at + 16, row_bytes_);
  }
  return Status::Ok();
}

Status DlrmRun::Checkpoint(uint64_t epoch, uint64_t step) {
  auto start = Clock::now();
  SLUICE_RETURN_IF_ERROR(SyncTables());
  const std::string name = "epoch-" + std::to_string(epoch) + "-step-" + std::to_string(step);
  const std::string dir = cfg_.run_dir + "/checkpoints/" + name;
  const std::string temp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp);
  if (in_memory_) {
    SLUICE_RETURN_IF_ERROR(WriteMemoryRows(temp));
  } else if (rocksdb_) {
    SLUICE_RETURN_IF_ERROR(kv_->Checkpoint(temp + "/kv"));
  } else {
    fs::copy_file(row_file_->path(), temp + "/rows.bin", fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError("checkpoint: copy " + row_file_->path() + ": " + ec.message());
  }
  CrashPoint("checkpoint");
  torch::save(net_, temp + "/dense.pt");
  torch::save(*opt_, temp + "/dense_optimizer.pt");
  std::ostringstream state;
  state << "{\"epoch\": " << epoch << ", \"step\": " << step << ", \"seed\": " << cfg_.train.seed
        << ", \"dataset\": \"" << dataset_.manifest().name << "\", \"row_bytes\": " << row_bytes_ << "}\n";
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(temp + "/state.json", state.str()));
  SLUICE_RETURN_IF_ERROR(SyncDirectory(temp));
  CrashPoint("rename");
  fs::remove_all(dir, ec);
  fs::rename(temp, dir, ec);
  if (ec) return IoError("checkpoint: rename " + temp + " to " + dir + ": " + ec.message());
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(cfg_.run_dir + "/checkpoints/latest", name + "\n"));
  if (!latest_.empty() && latest_ != name) {
    if (!previous_.empty()) fs::remove_all(cfg_.run_dir + "/checkpoints/" + previous_, ec);
    previous_ = latest_;
  }
  latest_ = name;
  checkpoint_s_ += Since(start);
  return Status::Ok();
}

Result<std::string> DlrmRun::FindLatest() const {
  std::ifstream in(cfg_.run_dir + "/checkpoints/latest");
  std::string name;
  if (!(in >> name)) return NotFound("no checkpoint in " + cfg_.run_dir + "/checkpoints");
  return name;
}

Status DlrmRun::LoadCheckpoint(const std::string& name, bool restore_tables) {
  const std::string dir = cfg_.run_dir + "/checkpoints/" + name;
  auto text = ReadFileToString(dir + "/state.json");
  if (!text.ok()) return Corruption(dir + "/state.json: unreadable checkpoint state");
  unsigned long long epoch = 0, step = 0, seed = 0;
  if (std::sscanf(text->c_str(), "{\"epoch\": %llu, \"step\": %llu, \"seed\": %llu", &epoch, &step, &seed) != 3) {
    return Corruption(dir + "/state.json: unreadable checkpoint state");
  }
  const size_t rb = text->find("\"row_bytes\": ");
  if (rb == std::string::npos || std::stoul(text->substr(rb + 13)) != row_bytes_ || seed != cfg_.train.seed) {
    return InvalidArgument(dir + ": checkpoint of another model (row width or seed differ from " +
                           cfg_.run_dir + "/config.yaml)");
  }
  try {
    torch::load(net_, dir + "/dense.pt");
    torch::load(*opt_, dir + "/dense_optimizer.pt");
  } catch (const std::exception& e) {
    return InvalidArgument(dir + "/dense.pt: does not fit the model (" + std::string(e.what()).substr(0, 200) + ")");
  }
  if (restore_tables && !in_memory_) {
    std::error_code ec;
    if (rocksdb_) {
      fs::remove_all(tables_dir_ + "/kv", ec);
      fs::create_directories(tables_dir_);
      fs::copy(dir + "/kv", tables_dir_ + "/kv", fs::copy_options::recursive, ec);
    } else {
      fs::create_directories(tables_dir_);
      fs::copy_file(dir + "/rows.bin", tables_dir_ + "/rows.bin.tmp", fs::copy_options::overwrite_existing, ec);
      if (!ec) fs::rename(tables_dir_ + "/rows.bin.tmp", tables_dir_ + "/rows.bin", ec);
    }
    if (ec) return IoError("resume: restore the tables of " + dir + ": " + ec.message());
  }
  latest_ = name;
  start_epoch_ = epoch;
  start_step_ = step;
  return Status::Ok();
}

Status DlrmRun::OpenLatestForEval() {
  SLUICE_ASSIGN_OR_RETURN(std::string name, FindLatest());
  SLUICE_RETURN_IF_ERROR(LoadCheckpoint(name, false));
  const std::string dir = cfg_.run_dir + "/checkpoints/" + name;
  return SetUpStorage(false, dir);
}

Status DlrmRun::Train(const DlrmTrainOptions& options) {
  auto run_start = Clock::now();
  fs::create_directories(cfg_.run_dir + "/checkpoints");
  ThreadPlan plan = MakeThreadPlan(cfg_.threads, OnlineCores());
  auto handle = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(cfg_.run_dir + "/config.yaml", DumpConfig(cfg_)));
  Result<std::string> latest = options.resume ? FindLatest() : NotFound("not resuming");
  if (options.resume && !latest.ok()) {
    std::printf("resume: %s; starting from the beginning\n", latest.status().message().c_str());
  }
  const bool resuming = options.resume && latest.ok();
  if (resuming) {
    SLUICE_RETURN_IF_ERROR(LoadCheckpoint(*latest, true));
  } else {
    std::error_code ec;
    fs::remove(cfg_.run_dir + "/metrics.jsonl", ec);
  }
  SLUICE_RETURN_IF_ERROR(SetUpStorage(!resuming, ""));
  if (resuming && in_memory_) {
    SLUICE_RETURN_IF_ERROR(LoadMemoryRows(cfg_.run_dir + "/checkpoints/" + *latest));
  }
  const uint64_t n = NumSamples("train");
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  uint64_t steps = (n + batch - 1) / batch;
  if (cfg_.train.max_steps > 0) steps = std::min(steps, cfg_.train.max_steps);
  std::printf("sluice train: %s, %s train samples, %u tables x %u dims, %u dense features, %s\n",
              cfg_.dataset.c_str(), FormatCount(static_cast<double>(n)).c_str(), tables_, dim_, rec_.dense,
              cfg_.train.optimizer.c_str());
  std::printf("  %s\n  memory: %s\n", plan.ToString().c_str(), memory_plan_.c_str());
  std::fflush(stdout);
  g_interrupted.store(false);
  signal(SIGINT, OnDlrmInterrupt);
  signal(SIGTERM, OnDlrmInterrupt);
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset_.File("samples.train"));
  SLUICE_ASSIGN_OR_RETURN(File samples, File::Open(dataset_.PathOf(*f), OpenMode::kRead, false));
  bool interrupted = false;
  uint64_t total_samples = 0;
  double train_s = 0;
  static const bool tty = isatty(STDERR_FILENO) != 0;
  for (uint64_t epoch = start_epoch_; epoch < static_cast<uint64_t>(cfg_.train.epochs) && !interrupted; ++epoch) {
    const uint64_t first = epoch == start_epoch_ ? start_step_ : 0;
    auto epoch_start = Clock::now();
    auto last_print = epoch_start;
    double loss_sum = 0;
    uint64_t done = 0;
    auto* rf = dynamic_cast<RowFileBacking*>(backing_.get());
    if (rf != nullptr && preload_rows_ > 0) {
      auto source = MakeSource(&samples, n, first, steps);
      auto scratch = std::make_shared<RowBatch>();
      RowPreloaderOptions po;
      po.capacity_rows = preload_rows_;
      po.horizon_steps = static_cast<uint32_t>(cfg_.storage.preload_horizon);
      rf->StartPreload(
          [this, source, scratch](uint64_t t, std::vector<uint64_t>& rows) -> Result<bool> {
            SLUICE_ASSIGN_OR_RETURN(const bool more, source(t, *scratch));
            if (more) {
              for (const RowKey& k : scratch->keys) rows.push_back(offsets_[k.table] + k.id);
            }
            return more;
          },
          po);
    }
    auto p = MakePrefetcher(MakeSource(&samples, n, first, steps), /*writes=*/true);
    p->Start();
    uint64_t s = first;
    for (; s < steps; ++s) {
      Status st;
      auto w = Clock::now();
      RowBatch* b = p->WaitReady(s - first, st);
      time_.wait_s += Since(w);
      if (b == nullptr) {
        (void)FinishPass(*p);
        return st;
      }
      Result<double> loss = TrainStep(*b);
      if (!loss.ok()) {
        (void)FinishPass(*p);
        return loss.status();
      }
      loss_sum += *loss * b->samples;
      done += b->samples;
      p->Computed(s - first);
      CrashPoint("step");
      ++steps_run_;
      if (cfg_.progress && ((tty && Since(last_print) > 0.5) || s + 1 == steps)) {
        last_print = Clock::now();
        const double el = Since(epoch_start);
        const double frac = static_cast<double>(s + 1) / static_cast<double>(steps);
        const double rate = static_cast<double>(done) / std::max(el, 1e-9);
        const double eta = rate > 0 ? static_cast<double>((steps - s - 1) * batch) / rate : 0;
        const int bar = static_cast<int>(frac * 30);
        std::fprintf(stderr, "%sepoch %llu/%d [%.*s%*s] %5.1f%% loss %.4f %s samples/s ETA %.0fs   ",
                     tty ? "\r" : "", static_cast<unsigned long long>(epoch + 1), cfg_.train.epochs, bar,
                     "##############################", 30 - bar, "", 100 * frac,
                     loss_sum / std::max<double>(1.0, static_cast<double>(done)), FormatCount(rate).c_str(), eta);
        if (s + 1 == steps) std::fprintf(stderr, "\n");
      }
      const bool stop_now = g_interrupted.load() ||
                            (options.stop_after_steps >= 0 && static_cast<int64_t>(steps_run_) >= options.stop_after_steps);
      if (stop_now && s + 1 < steps) {
        interrupted = true;
        ++s;
        break;
      }
    }
    SLUICE_RETURN_IF_ERROR(FinishPass(*p));
    const double epoch_s = Since(epoch_start);
    train_s += epoch_s;
    total_samples += done;
    if (interrupted) {
      SLUICE_RETURN_IF_ERROR(Checkpoint(epoch, s));
      std::printf("interrupted in epoch %llu: checkpoint %s written; `--resume` continues\n",
                  static_cast<unsigned long long>(epoch + 1), latest_.c_str());
      break;
    }
    std::ostringstream line;
    const double loss = loss_sum / std::max<double>(1.0, static_cast<double>(done));
    line << "{\"epoch\": " << epoch + 1 << ", \"loss\": " << loss << ", \"epoch_s\": " << epoch_s
         << ", \"samples_per_s\": " << static_cast<double>(done) / epoch_s;
    std::printf("epoch %llu: loss %.4f, %.2f s, %s samples/s", static_cast<unsigned long long>(epoch + 1), loss,
                epoch_s, FormatCount(static_cast<double>(done) / epoch_s).c_str());
    const bool last = epoch + 1 == static_cast<uint64_t>(cfg_.train.epochs);
    if (cfg_.eval.every > 0 && ((epoch + 1) % cfg_.eval.every == 0 || last)) {
      const std::string split = EvalSplit();
      SLUICE_ASSIGN_OR_RETURN(DlrmMetrics v, Evaluate(split, cfg_.eval.max_samples));
      line << ", \"" << split << "\": " << v.ToJson();
      std::printf(", %s %s", split.c_str(), v.ToString().c_str());
    }
    std::printf("\n");
    std::fflush(stdout);
    line << "}";
    SLUICE_RETURN_IF_ERROR(AppendLine(cfg_.run_dir + "/metrics.jsonl", line.str()));
    if (last || (cfg_.checkpoint_every > 0 && (epoch + 1) % cfg_.checkpoint_every == 0)) {
      SLUICE_RETURN_IF_ERROR(Checkpoint(epoch + 1, 0));
    }
  }
  if (latest_.empty() && !interrupted) SLUICE_RETURN_IF_ERROR(Checkpoint(start_epoch_, start_step_));
  const RowCacheStats cs = cache_ ? cache_->stats() : RowCacheStats{};
  std::ostringstream sum;
  sum << "run " << cfg_.run_dir << "\n"
      << "  trained " << total_samples << " samples in " << train_s << " s ("
      << FormatCount(static_cast<double>(total_samples) / std::max(train_s, 1e-9)) << " samples/s)\n"
      << "  compute thread: waiting for rows " << time_.wait_s << " s, gather " << time_.gather_s
      << " s, forward+backward+dense update " << time_.compute_s << " s, row update " << time_.update_s << " s\n"
      << "  prefetcher: reading+dedupe " << read_time_.busy_s << " s, planning " << plan_time_.busy_s
      << " s, io " << io_time_.busy_s << " s, io waiting for compute " << io_time_.wait_s << " s\n";
  if (cache_) {
    const double steps_d = std::max<double>(1.0, static_cast<double>(cs.steps));
    sum << "  cache: " << cs.steps << " steps, " << FormatCount(cs.accesses / steps_d)
        << " distinct rows per step, hit rate " << (cs.accesses ? 100.0 * cs.hits / cs.accesses : 0)
        << "%, loads " << cs.loads << " (" << FormatCount(cs.loads / steps_d) << " per step), write-backs "
        << cs.write_backs << " (" << FormatCount(cs.write_backs / steps_d) << " per step), rows read from disk "
        << backing_->rows_read() << " (" << FormatCount(backing_->rows_read() / steps_d)
        << " per step; the other loads were rows never written, made from the seed)\n";
    const auto* rf = dynamic_cast<const RowFileBacking*>(backing_.get());
    if (rf != nullptr && rf->staging() != nullptr) {
      const WriteBackStats& ws = rf->staging()->stats();
      const uint64_t all_sweeps = ws.sweeps + ws.passes;
      sum << "  write-back buffer: " << ws.rows_staged << " rows staged, " << all_sweeps << " sweeps ("
          << ws.passes << " with a read-ahead pass) wrote " << ws.rows_swept << " rows ("
          << FormatCount(all_sweeps ? static_cast<double>(ws.rows_swept) / all_sweeps : 0)
          << " per sweep; a row staged again before its sweep is written once)";
      if (ws.reads_only > 0) sum << "; " << ws.reads_only << " read-ahead passes only read (too few staged rows)";
      sum << "\n";
    }
    if (rf != nullptr && rf->preload_stats().passes > 0) {
      const RowPreloaderStats& ps = rf->preload_stats();
      sum << "  read-ahead: " << ps.passes << " region passes read " << ps.rows_read << " rows ("
          << FormatCount(ps.rows_read / steps_d) << " per step); loads took " << ps.rows_taken
          << ", " << ps.rows_expired << " went unused (the cache had them), " << ps.rows_left
          << " wanted rows found no room; at most " << ps.peak_held << " held\n";
    }
    const double reads_per_step = static_cast<double>(backing_->rows_read()) / steps_d;
    if (rf != nullptr && preload_rows_ == 0 && cfg_.storage.planner == "oracle" && reads_per_step >= 1000) {
      sum << "  hint: " << FormatCount(reads_per_step) << " random disk reads per step; storage.preload_share=0.25 "
          << "reads the rows ahead region by region instead (docs/recommendation.md)\n";
    }
  }
  sum << "  checkpoints " << checkpoint_s_ << " s, evaluation " << eval_s_ << " s, wall " << Since(run_start)
      << " s\n"
      << "  " << plan.ToString() << "\n"
      << "  memory: " << memory_plan_ << "; peak RSS " << FormatBytes(PeakRssBytes()) << "\n";
  std::printf("%s", sum.str().c_str());
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(cfg_.run_dir + "/summary.txt", sum.str()));
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (interrupted) {
    return Aborted("interrupted: checkpoint " + latest_ + " written in " + cfg_.run_dir +
                   "; `sluice train ... --resume` continues");
  }
  return Status::Ok();
}

Status WriteNpy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                const void* data, size_t bytes) {
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) header += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  header += "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return WriteFileAtomic(path, out);
}

Status DlrmRun::Export(const std::string& out_dir) {
  // Every row through the evaluation storage: dense tables row by row, raw ids as created.
  fs::create_directories(out_dir);
  if (raw_ids_) {
    std::vector<std::vector<uint64_t>> ids(tables_);
    std::vector<std::vector<float>> rows(tables_);
    if (memory_ == nullptr) {
      return FailedPrecondition("export of raw-id tables from RocksDB is not supported yet; "
                                "train with storage.mode: in_memory or ids: modulo/vocab");
    }
    memory_->ForEach([&](const RowKey& k, std::byte* row) {
      ids[k.table].push_back(k.id);
      const float* f = reinterpret_cast<const float*>(row);
      rows[k.table].insert(rows[k.table].end(), f, f + dim_);
    });
    for (uint32_t t = 0; t < tables_; ++t) {
      const std::string base = out_dir + "/table_" + std::to_string(t);
      SLUICE_RETURN_IF_ERROR(WriteNpy(base + ".npy", "<f4", {static_cast<int64_t>(ids[t].size()), dim_},
                                      rows[t].data(), rows[t].size() * 4));
      SLUICE_RETURN_IF_ERROR(WriteNpy(base + "_ids.npy", "<u8", {static_cast<int64_t>(ids[t].size())},
                                      ids[t].data(), ids[t].size() * 8));
    }
  } else {
    SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
    for (uint32_t t = 0; t < tables_; ++t) {
      const uint64_t n = offsets_[t + 1] - offsets_[t];
      std::vector<float> out(n * dim_);
      std::vector<std::byte> row(row_bytes_);
      constexpr uint64_t kChunk = 4096;
      std::vector<RowKey> keys;
      std::vector<std::byte> buf(kChunk * row_bytes_);
      for (uint64_t lo = 0; lo < n; lo += kChunk) {
        const uint64_t c = std::min(kChunk, n - lo);
        keys.clear();
        for (uint64_t i = 0; i < c; ++i) keys.push_back(RowKey{lo + i, t});
        if (memory_ != nullptr) {
          for (uint64_t i = 0; i < c; ++i) std::memcpy(buf.data() + i * row_bytes_, memory_->Row(keys[i]), row_bytes_);
        } else {
          SLUICE_RETURN_IF_ERROR(backing_->Read(*io, keys, buf.data()));
        }
        for (uint64_t i = 0; i < c; ++i) std::memcpy(out.data() + (lo + i) * dim_, buf.data() + i * row_bytes_, dim_ * 4);
      }
      SLUICE_RETURN_IF_ERROR(WriteNpy(out_dir + "/table_" + std::to_string(t) + ".npy", "<f4",
                                      {static_cast<int64_t>(n), dim_}, out.data(), out.size() * 4));
      if (!vocab_.empty()) {
        std::vector<uint64_t> ids(n, 0);
        for (const auto& [raw, row_id] : vocab_[t]) ids[row_id] = raw;
        SLUICE_RETURN_IF_ERROR(WriteNpy(out_dir + "/table_" + std::to_string(t) + "_ids.npy", "<u8",
                                        {static_cast<int64_t>(n)}, ids.data(), ids.size() * 8));
      }
    }
  }
  torch::save(net_, out_dir + "/dense.pt");
  return Status::Ok();
}

Result<DlrmConfig> LoadDlrmRunConfig(const std::string& run_dir) {
  DlrmConfig config;
  const std::string path = run_dir + "/config.yaml";
  if (!fs::exists(path)) return NotFound(path + ": not a run directory (no config.yaml)");
  SLUICE_RETURN_IF_ERROR(LoadConfig(path, {}, config));
  config.run_dir = run_dir;
  config.progress = false;
  return config;
}

Result<std::unique_ptr<DlrmRun>> OpenTrained(const std::string& run_dir) {
  SLUICE_ASSIGN_OR_RETURN(DlrmConfig config, LoadDlrmRunConfig(run_dir));
  ThreadPlan plan = MakeThreadPlan(config.threads, OnlineCores());
  ApplyTorchThreads(plan);
  auto run = std::make_unique<DlrmRun>(config);
  SLUICE_RETURN_IF_ERROR(run->Open());
  SLUICE_RETURN_IF_ERROR(run->OpenLatestForEval());
  return run;
}

}  // namespace

double AreaUnderRoc(const float* scores, const float* labels, uint64_t n) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return scores[a] < scores[b]; });
  double pos = 0, rank_sum = 0;
  for (uint64_t i = 0; i < n;) {
    uint64_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (uint64_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += mean_rank;
        pos += 1;
      }
    }
    i = j;
  }
  const double neg = static_cast<double>(n) - pos;
  if (pos == 0 || neg == 0) return std::nan("");
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

std::string DlrmMetrics::ToString() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "AUC %.4f logloss %.4f accuracy %.4f (%llu samples)", auc, logloss, accuracy,
                static_cast<unsigned long long>(samples));
  return buf;
}

std::string DlrmMetrics::ToJson() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "{\"auc\": %.6f, \"logloss\": %.6f, \"accuracy\": %.6f, \"samples\": %llu}", auc,
                logloss, accuracy, static_cast<unsigned long long>(samples));
  return buf;
}

Status RunDlrmTrain(const DlrmConfig& config, const DlrmTrainOptions& options) {
  DlrmRun run(config);
  SLUICE_RETURN_IF_ERROR(run.Open());
  return run.Train(options);
}

Result<DlrmMetrics> RunDlrmEval(const std::string& run_dir, const std::string& split) {
  SLUICE_ASSIGN_OR_RETURN(auto run, OpenTrained(run_dir));
  return run->Evaluate(split, 0);
}

Status RunDlrmExport(const std::string& run_dir, const std::string& out_dir) {
  if (fs::exists(out_dir)) return InvalidArgument("export: " + out_dir + " exists; choose a new directory");
  SLUICE_ASSIGN_OR_RETURN(auto run, OpenTrained(run_dir));
  const std::string temp = out_dir + ".tmp";
  std::error_code ec;
  fs::remove_all(temp, ec);
  SLUICE_RETURN_IF_ERROR(run->Export(temp));
  fs::rename(temp, out_dir, ec);
  if (ec) return IoError("export: rename " + temp + " to " + out_dir + ": " + ec.message());
  return Status::Ok();
}

Result<std::string> RunDlrmPredict(const std::string& run_dir, const std::string& split, uint64_t count) {
  SLUICE_ASSIGN_OR_RETURN(auto run, OpenTrained(run_dir));
  std::vector<float> scores, labels;
  SLUICE_ASSIGN_OR_RETURN(DlrmMetrics m, run->Evaluate(split, count, &scores, &labels));
  std::ostringstream out;
  out << "sample\tp(click)\tlabel\n";
  for (size_t i = 0; i < scores.size(); ++i) out << i << "\t" << scores[i] << "\t" << labels[i] << "\n";
  out << "# these " << m.samples << " samples: " << m.ToString() << "\n";
  return out.str();
}

}  // namespace sluice
