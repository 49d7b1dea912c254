#include "train/dlrm/dlrm_task.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "common/clock.h"
#include "train/dlrm/dlrm_task_impl.h"
#include "train/dist.h"
#include "train/fingerprint.h"
#include "train/model_step.h"
#include "train/row_checkpoint.h"
#include "train/run_dir.h"
#include "train/torch_io.h"
#include "train/torchscript_model.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Clock = SteadyClock;

}  // namespace

DlrmTask::DlrmTask(DlrmConfig config) : cfg_(std::move(config)) {
  settings_ = RunSettingsOf(cfg_);
  in_memory_ = cfg_.storage.mode == StorageMode::kInMemory;
  rocksdb_ = !in_memory_ && cfg_.storage.backend == TableBackend::kRocksDb;
  tables_dir_ = cfg_.run_dir + "/tables";
}

std::string DlrmTask::ConfigYaml() { return DumpConfig(cfg_); }
std::string DlrmTask::ConfigFingerprint() {
  std::string fp = sluice::ConfigFingerprint(cfg_);
  if (!model_name_.empty()) fp += " model=" + model_name_;
  if (!encoder_name_.empty()) fp += " encoder=" + encoder_name_;
  return fp;
}

Status DlrmTask::SetEncoderFactory(const std::string& name, EncoderFactory factory) {
  encoder_name_ = name;
  encoder_factory_ = std::move(factory);
  return Status::Ok();
}

Status DlrmTask::SetModelFactory(const std::string& name, ModelFactory factory) {
  model_name_ = name;
  factory_ = std::move(factory);
  return Status::Ok();
}

// The built-in DLRM network, a TorchScript file's model or the user's from its factory; behind
// the user's encoder if any.
Status DlrmTask::BuildModel() {
  torch::manual_seed(cfg_.train.seed);
  ModelSpec spec;
  spec.task = "recommendation";
  spec.seed = cfg_.train.seed;
  spec.batch = cfg_.train.batch;
  spec.dense_features = rec_.dense;
  spec.tables = rec_.sparse;
  spec.dim = cfg_.model.dim;
  spec.row_width = tables_->width();
  spec.linear = cfg_.model.linear;
  spec.bottom_layers = cfg_.model.bottom;
  spec.top_layers = cfg_.model.top;
  if (!cfg_.model.torchscript.empty() && factory_) {
    return InvalidArgument("model.torchscript is set and a model was given through Run::SetModel (" +
                           model_name_ + "): choose one");
  }
  if (!cfg_.model.torchscript.empty()) {
    SLUICE_ASSIGN_OR_RETURN(net_, LoadScriptedClickModel(cfg_.model.torchscript, spec));
  } else if (factory_) {
    SLUICE_ASSIGN_OR_RETURN(net_, CallModelFactory(model_name_, factory_, spec));
  } else {
    net_ = DlrmNet(static_cast<int>(rec_.dense), static_cast<int>(rec_.sparse), cfg_.model.dim,
                   cfg_.model.linear, cfg_.model.bottom, cfg_.model.top, cfg_.train.batch).ptr();
  }
  SLUICE_ASSIGN_OR_RETURN(net_, WithEncoder(net_, encoder_name_, encoder_factory_, spec));
  return Status::Ok();
}

uint64_t DlrmTask::NumSamples(const std::string& split) const {
  auto it = dataset_.manifest().samples.find(split);
  return it == dataset_.manifest().samples.end() ? 0 : it->second;
}

uint64_t DlrmTask::StepsPerEpoch() const {
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  uint64_t steps = (NumSamples("train") + batch - 1) / batch;
  if (cfg_.train.max_steps > 0) steps = std::min(steps, cfg_.train.max_steps);
  return steps;
}

uint64_t DlrmTask::EpochUnits() const {
  return std::min(NumSamples("train"), StepsPerEpoch() * static_cast<uint64_t>(cfg_.train.batch));
}

std::string DlrmTask::ValidationSplit() const {
  return NumSamples(cfg_.eval.split) > 0 ? cfg_.eval.split : "test";
}

RowInit DlrmTask::Init() const {
  const DlrmTables* t = &*tables_;
  return [t](const RowKey& k, std::byte* row) { t->InitRow(k, row); };
}

Status DlrmTask::Open(Purpose purpose) {
  purpose_ = purpose;
  if (cfg_.dataset.empty()) return InvalidArgument("dataset: not set (the dataset directory)");
  SLUICE_ASSIGN_OR_RETURN(dataset_, Dataset::Open(cfg_.dataset));
  const Manifest& m = dataset_.manifest();
  if (m.task != TaskKind::kRecommendation) {
    return InvalidArgument("dataset " + cfg_.dataset + " is a " + TaskKindName(m.task) +
                           " dataset; task: recommendation needs click samples");
  }
  if (NumSamples("train") == 0) return InvalidArgument("dataset " + cfg_.dataset + " has no train samples");
  rec_ = m.record;
  if (rec_.sparse == 0) return InvalidArgument("dataset " + cfg_.dataset + " has no categorical features");
  if (cfg_.model.ids == IdMapping::kRaw && !in_memory_ && !rocksdb_) {
    return InvalidArgument("model.ids: raw keeps 64-bit ids, which only storage.backend: rocksdb "
                           "(or storage.mode: in_memory) can hold; use ids: modulo or vocab with rowfile");
  }
  SLUICE_ASSIGN_OR_RETURN(DlrmTables tables, DlrmTables::Make(cfg_, dataset_));
  tables_.emplace(std::move(tables));
  SLUICE_RETURN_IF_ERROR(BuildModel());
  SLUICE_RETURN_IF_ERROR(SetUpDevice());  // before the optimizer: its state follows the parameters
  SLUICE_RETURN_IF_ERROR(SetUpDataParallel());
  const double lr = cfg_.train.dense_lr;
  if (cfg_.train.dense_optimizer == DenseOptimizer::kSgd) {
    opt_ = std::make_unique<torch::optim::SGD>(net_->parameters(), torch::optim::SGDOptions(lr));
  } else if (cfg_.train.dense_optimizer == DenseOptimizer::kAdagrad) {
    opt_ = std::make_unique<torch::optim::Adagrad>(net_->parameters(), torch::optim::AdagradOptions(lr));
  } else {
    opt_ = std::make_unique<torch::optim::Adam>(net_->parameters(), torch::optim::AdamOptions(lr));
  }
  return Status::Ok();
}

std::string DlrmTask::TableFileName() const {
  if (in_memory_) return tables_->raw_ids() ? "rows.kv" : "rows.bin";
  return rocksdb_ ? "kv" : "rows.bin";
}

Status DlrmTask::LoadState(const CheckpointReader& checkpoint) {
  if (!checkpoint.Has(TableFileName()) && !checkpoint.Has(RowShardManifestName(TableFileName()))) {
    return InvalidArgument(checkpoint.dir() + ": the checkpoint holds its tables in another form "
                           "than " + TableFileName() + " (storage.mode " + EnumName(cfg_.storage.mode) +
                           ", storage.backend " + EnumName(cfg_.storage.backend) + "); use the storage "
                           "settings it was trained with");
  }
  const torch::Device device = acc_ != nullptr ? acc_->device() : torch::Device(torch::kCPU);
  SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "dense.pt", net_, device));
  SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "dense_optimizer.pt", *opt_, device));
  resume_dir_ = checkpoint.dir();
  return Status::Ok();
}

// The checkpoint's tables become the run's (out of core; in memory they are read in place).
Status DlrmTask::RestoreTables(const std::string& dir) {
  if (!rocksdb_ && CheckpointRows::Sharded(dir, "rows.bin")) {  // this rank's rows from the shards
    SLUICE_ASSIGN_OR_RETURN(const CheckpointRows rows,
                            CheckpointRows::Open(dir, "rows.bin", tables_->row_bytes(), tables_->total_rows()));
    std::error_code ec;
    fs::create_directories(tables_dir_, ec);
    if (ec) return IoError("resume: create " + tables_dir_ + ": " + ec.message());
    const auto [lo, hi] = RowsToLoad();
    return rows.WriteRowFile(tables_dir_ + "/rows.bin", lo, hi - lo).WithContext("resume");
  }
  if (!rocksdb_) return RestoreRowFile(dir, "rows.bin", tables_dir_);
  std::error_code ec;
  fs::create_directories(tables_dir_, ec);
  fs::remove_all(tables_dir_ + "/kv", ec);
  fs::copy(dir + "/kv", tables_dir_ + "/kv", fs::copy_options::recursive, ec);
  if (ec) return IoError("resume: restore the tables of " + dir + ": " + ec.message());
  return Status::Ok();
}

Status DlrmTask::PrepareTraining(const CheckpointReader* resumed) {
  if (resumed != nullptr && !in_memory_) SLUICE_RETURN_IF_ERROR(RestoreTables(resumed->dir()));
  SLUICE_RETURN_IF_ERROR(SetUpStorage(resumed == nullptr, ""));
  if (resumed != nullptr && in_memory_) SLUICE_RETURN_IF_ERROR(LoadMemoryRows(resumed->dir()));
  SLUICE_RETURN_IF_ERROR(SetUpDeviceRows());
  SLUICE_ASSIGN_OR_RETURN(RecordSource source, Source("train", 0));
  train_source_.emplace(std::move(source));
  return Status::Ok();
}

Status DlrmTask::PrepareReading(const CheckpointReader& checkpoint) {
  return SetUpStorage(false, checkpoint.dir());
}

std::string DlrmTask::Describe() const {
  return "sluice train: " + cfg_.dataset + ", " +
         FormatCount(static_cast<double>(NumSamples("train"))) + " train samples, " +
         std::to_string(tables_->tables()) + " tables x " + std::to_string(tables_->dim()) +
         " dims, " + std::to_string(rec_.dense) + " dense features, " + EnumName(cfg_.train.optimizer);
}

Result<RecordSource> DlrmTask::Source(const std::string& split, uint64_t max_records) const {
  const DlrmTables* map = &*tables_;
  const uint64_t max_steps = split == "train" ? cfg_.train.max_steps : 0;
  return RecordSource::Open(dataset_, split, static_cast<uint64_t>(cfg_.train.batch), max_records,
                            max_steps,
                            [map](uint32_t table, uint64_t raw) { return map->MapId(table, raw); });
}

Result<uint64_t> DlrmTask::SampleDistinctRowsPerStep() {
  SLUICE_ASSIGN_OR_RETURN(auto steps, FirstStepsRows(8, /*sample_every=*/1));
  uint64_t most = 0;
  for (const auto& rows : steps) most = std::max<uint64_t>(most, rows.size());
  return most;
}

std::unique_ptr<DlrmTask::Pipeline> DlrmTask::MakePipeline(const RecordSource* source,
                                                          uint64_t first_step, bool writes,
                                                          uint64_t next_steps) {
  RowPrefetcherOptions po;
  po.run_ahead = run_ahead_;
  po.writes = writes;
  po.io = cfg_.io;
  auto fill = [this, source, first_step, next_steps](uint64_t t, RowBatch& b) -> Result<bool> {
    uint64_t step = first_step + t;
    if (step >= source->steps()) {  // past the pass: the next one's first steps, for the window
      step -= source->steps();
      if (step >= next_steps) return false;
      b.lookahead_only = true;
    }
    SLUICE_ASSIGN_OR_RETURN(const bool more, source->Fill(step, b));
    if (dp_ != nullptr) KeepOwnedKeys(b);
    return more;
  };
  if (in_memory_) return std::make_unique<Pipeline>(memory_.get(), po, fill, &Pipeline::Identity);
  return std::make_unique<Pipeline>(cache_.get(), arena_.data(), tables_->row_bytes(), backing_.get(),
                                    po, fill, &Pipeline::Identity);
}

uint64_t DlrmTask::CarriedWindow(uint64_t epoch) const {
  if (in_memory_ || cache_ == nullptr || !cfg_.storage.carry_over) return 0;
  if (epoch + 1 >= static_cast<uint64_t>(cfg_.train.epochs)) return 0;  // no next epoch
  return cache_->options().kind == PlannerKind::kOracle ? cache_->options().window_steps : 0;
}

Status DlrmTask::FinishPass(Pipeline& p) {
  Status s = p.Stop();
  if (auto* rf = dynamic_cast<RowFileBacking*>(backing_.get())) rf->StopPreload();
  read_time_.busy_s += p.read_time().busy_s;
  read_time_.wait_s += p.read_time().wait_s;
  plan_time_.busy_s += p.plan_time().busy_s;
  plan_time_.wait_s += p.plan_time().wait_s;
  io_time_.busy_s += p.io_time().busy_s;
  io_time_.wait_s += p.io_time().wait_s;
  time_.wait_s += p.compute_wait_s();
  rows_loaded_ += p.rows_loaded();
  rows_written_ += p.rows_written();
  io_requests_ += p.io_stats().requests, io_bytes_ += p.io_stats().bytes;
  return s;
}

Status DlrmTask::ReadBatch(const RowBatch& b, const std::string& split, torch::Tensor& dense,
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
  }
  auto file = dataset_.File("samples." + split);
  return CheckRecords(rec_, b.records.data(), static_cast<uint64_t>(n),
                      b.step * static_cast<uint64_t>(cfg_.train.batch), cfg_.dataset + ": samples." + split,
                      file.ok() ? dataset_.PathOf(**file) : split);
}

Result<ModelInput> DlrmTask::StepInput(const RowBatch& b, const std::string& split, bool training) {
  ModelInput in;
  SLUICE_RETURN_IF_ERROR(ReadBatch(b, split, in.dense, in.labels));
  if (dp_ != nullptr) {  // the rows from their owners
    SLUICE_RETURN_IF_ERROR(GatherStepRows(b, /*every_row=*/true));
    in.tables.push_back(GatherUses(sharded_->ptrs(), {step_rows_.inverse}, tables_->width(), training));
  } else {
    inverse_.assign(b.inverse.begin(), b.inverse.end());
    const std::span<float* const> rows(reinterpret_cast<float* const*>(b.rows.data()), b.rows.size());
    in.tables.push_back(GatherUses(rows, {inverse_}, tables_->width(), training));
  }
  in.key = {cfg_.train.seed, 0, b.step};
  in.training = training;
  return in;
}

// Runs forward and backward through the model seam, sums each row's gradients in sample
// order, and updates the rows in place.
Result<double> DlrmTask::TrainStep(RowBatch& b) {
  auto start = SteadyClock::now();
  SLUICE_ASSIGN_OR_RETURN(ModelInput in, StepInput(b, "train", /*training=*/true));
  time_.gather_s += SecondsSince(start);
  start = SteadyClock::now();
  opt_->zero_grad();
  SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*net_, in, /*allow_fused=*/false));
  opt_->step();
  time_.compute_s += SecondsSince(start);
  start = SteadyClock::now();
  const int64_t u = static_cast<int64_t>(b.unique.size()), d = tables_->width();
  const torch::Tensor sums = SumRowGrads({inverse_}, g.use_grads[0], u, d);
  const std::span<float* const> rows(reinterpret_cast<float* const*>(b.rows.data()), b.rows.size());
  ApplyRowOptimizer(tables_->optimizer(), rows, sums, d, static_cast<float>(cfg_.train.lr * lr_scale_));
  time_.update_s += SecondsSince(start);
  return g.loss;
}

Status DlrmTask::SetUpDataParallel() {
  SLUICE_ASSIGN_OR_RETURN(const bool sharded, TrainsInShards(purpose_ == Purpose::kTrain, cfg_.train.virtual_shards,
                                                              group_, cfg_.train.batch, "samples", cfg_.device));
  if (!sharded) return Status::Ok();
  const int world = group_ != nullptr ? group_->world_size() : 1;
  if (tables_->raw_ids() || rocksdb_) {
    return InvalidArgument("train.virtual_shards shards the tables by row range: it needs dense tables "
                           "(model.ids modulo or vocab, storage.backend rowfile or storage.mode in_memory)");
  }
  dp_ = std::make_unique<DataParallel>(group_, cfg_.train.virtual_shards);
  dp_->set_dense_floats(DenseFloats(net_->parameters()));
  // A training step computes a shard at a time (the built-in network's estimate knows; a
  // user's model is planned for the whole batch).
  if (auto* dlrm = dynamic_cast<DlrmNetImpl*>(net_.get())) {
    dlrm->step_samples = (cfg_.train.batch + cfg_.train.virtual_shards - 1) / cfg_.train.virtual_shards;
  }
  const uint64_t total = tables_->total_rows();
  owner_bounds_.clear();
  for (int r = 0; r <= world; ++r) owner_bounds_.push_back(DataParallel::RowRange(r, world, total).first);
  owner_bounds_.back() = total;
  std::tie(own_begin_, own_end_) = dp_->MyRows(total);
  sharded_ = std::make_unique<ShardedRows>(dp_.get(), owner_bounds_, tables_->width());
  return Status::Ok();
}

RowKey DlrmTask::KeyOf(uint64_t global_row) const {
  const std::vector<uint64_t>& offsets = tables_->offsets();
  const auto t = static_cast<uint32_t>(std::upper_bound(offsets.begin(), offsets.end(), global_row) - offsets.begin() - 1);
  return RowKey{global_row - offsets[t], t};
}

void DlrmTask::KeepOwnedKeys(RowBatch& b) const {
  b.all_keys = b.keys;
  const std::vector<uint64_t>& offsets = tables_->offsets();
  std::erase_if(b.keys, [&](const RowKey& k) {
    const uint64_t g = offsets[k.table] + k.id;
    return g < own_begin_ || g >= own_end_;
  });
}

void DlrmTask::MakeStepRows(const RowBatch& b, StepRows& s) {
  s.step = b.step;
  s.all.keys = b.all_keys;
  s.all.keys_distinct = false;
  all_dedupe_.Dedupe(s.all);
  const std::vector<uint64_t>& offsets = tables_->offsets();
  s.rows.resize(s.all.unique.size());
  for (size_t u = 0; u < s.rows.size(); ++u) s.rows[u] = offsets[s.all.unique[u].table] + s.all.unique[u].id;
  s.inverse.assign(s.all.inverse.begin(), s.all.inverse.end());
  // Rank q's shards use uses [use_begin[q], use_begin[q + 1]) (samples in order, S uses each).
  const int world = dp_->world_size();
  const uint64_t n = b.samples, per_sample = rec_.sparse;
  s.use_begin.assign(static_cast<size_t>(world) + 1, 0);
  for (int q = 0; q <= world; ++q) {
    const int v = dp_->shards() * q / world;
    s.use_begin[static_cast<size_t>(q)] = DataParallel::ShardSamples(v, dp_->shards(), n).first * per_sample;
  }
  s.own_rows.resize(b.unique.size());
  for (size_t k = 0; k < b.unique.size(); ++k) s.own_rows[k] = offsets[b.unique[k].table] + b.unique[k].id;
}

Status DlrmTask::GatherStepRows(const RowBatch& b, bool every_row) {
  StepRows& s = step_rows_;
  MakeStepRows(b, s);
  const std::span<float* const> own(reinterpret_cast<float* const*>(b.rows.data()), b.rows.size());
  return sharded_->Fetch(b.step, s.rows, s.inverse, s.use_begin, own, s.own_rows,
                         every_row ? RowsTo::kEveryRank : RowsTo::kTrainingUses);
}

Status DlrmTask::GatherTrainingRows(const RowBatch& b, const RowBatch* next) {
  if (next_rows_.step == b.step) {  // sent ahead during the step before: made then
    std::swap(step_rows_, next_rows_);
    next_rows_.step = ~uint64_t{0};
    const StepRows& s = step_rows_;
    const std::span<float* const> own(reinterpret_cast<float* const*>(b.rows.data()), b.rows.size());
    SLUICE_RETURN_IF_ERROR(sharded_->Fetch(b.step, s.rows, s.inverse, s.use_begin, own, s.own_rows, RowsTo::kTrainingUses));
  } else {
    SLUICE_RETURN_IF_ERROR(GatherStepRows(b, /*every_row=*/false));
  }
  if (next == nullptr) return Status::Ok();
  MakeStepRows(*next, next_rows_);
  const StepRows& s = next_rows_;
  const std::span<float* const> own(reinterpret_cast<float* const*>(next->rows.data()), next->rows.size());
  return sharded_->Prefetch(next->step, s.rows, s.inverse, s.use_begin, own, s.own_rows);
}

Status DlrmTask::ComputeShards(const RowBatch& b, const torch::Tensor& dense, const torch::Tensor& labels,
                               ShardGradients& grads) {
  const auto n = static_cast<uint64_t>(b.samples), tables = static_cast<uint64_t>(rec_.sparse);
  const int64_t d = tables_->width();
  const int shards = dp_->shards();
  const std::span<float* const> rows = sharded_->ptrs();
  const std::span<const int64_t> uses(step_rows_.inverse);
  for (int v = dp_->first_shard(); v < dp_->end_shard(); ++v) {
    const auto [lo, hi] = DataParallel::ShardSamples(v, shards, n);
    if (lo == hi) {  // a batch with fewer samples than shards
      grads.AddEmpty();
      continue;
    }
    ModelInput in;
    in.dense = dense.slice(0, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    in.labels = labels.slice(0, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    in.tables.push_back(GatherUses(rows, {uses.subspan(lo * tables, (hi - lo) * tables)}, d, true));
    // Dropout keyed on the step and the shard: seed v + 1 steps from the run's seed.
    in.key = {cfg_.train.seed + 0x9E37'79B9'7F4A'7C15ull * static_cast<uint64_t>(v + 1), 0, b.step};
    in.training = true;
    opt_->zero_grad();
    SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*net_, in, /*allow_fused=*/false));
    // The shard's mean loss weighs its share of the batch: gradients x samples / n.
    grads.Add(g.loss, hi - lo, n);
    sharded_->AddUseGrads(g.use_grads[0], static_cast<float>(hi - lo) / static_cast<float>(n));
  }
  return Status::Ok();
}

// Every rank computes its shards; the shards' losses and dense gradients are all-gathered and
// added in shard order; each use gradient goes to its row's owner (all-to-all), which adds each
// row's in global use order and updates the row.
Result<double> DlrmTask::TrainShardedStep(RowBatch& b, const RowBatch* next) {
  StepTimer timer(*dp_);
  torch::Tensor dense, labels;
  SLUICE_RETURN_IF_ERROR(ReadBatch(b, "train", dense, labels));
  SLUICE_RETURN_IF_ERROR(GatherTrainingRows(b, next));
  timer.Lap(time_.gather_s);
  ShardGradients grads(*dp_, net_->parameters());
  SLUICE_RETURN_IF_ERROR(ComputeShards(b, dense, labels, grads));
  SLUICE_ASSIGN_OR_RETURN(const double loss, grads.Finish());
  opt_->step();
  timer.Lap(time_.compute_s);
  SLUICE_ASSIGN_OR_RETURN(const torch::Tensor sums, sharded_->SumOwnGrads());
  const std::span<float* const> rows(reinterpret_cast<float* const*>(b.rows.data()), b.rows.size());
  ApplyRowOptimizer(tables_->optimizer(), rows, sums, tables_->width(), static_cast<float>(cfg_.train.lr * lr_scale_));
  timer.Lap(time_.update_s);
  return loss / static_cast<double>(b.samples);
}

void DlrmTask::StartPreload(const RecordSource* source, uint64_t first_step) {
  auto* rf = dynamic_cast<RowFileBacking*>(backing_.get());
  if (rf == nullptr || plan_.preload_rows == 0) return;
  // Shared: the preloader copies the function, and the scratch must outlive every copy.
  auto scratch = std::make_shared<RowBatch>();
  const std::vector<uint64_t>* offsets = &tables_->offsets();
  const uint64_t lo = dp_ != nullptr ? own_begin_ : 0, hi = dp_ != nullptr ? own_end_ : tables_->total_rows();
  RowPreloaderOptions po;
  po.capacity_rows = plan_.preload_rows;
  po.horizon_steps = static_cast<uint32_t>(cfg_.storage.preload_horizon);
  rf->StartPreload(
      [offsets, source, first_step, scratch, lo, hi](uint64_t t, std::vector<uint64_t>& rows) -> Result<bool> {
        SLUICE_ASSIGN_OR_RETURN(const bool more, source->Fill(first_step + t, *scratch));
        if (more) {
          for (const RowKey& k : scratch->keys) {
            const uint64_t g = (*offsets)[k.table] + k.id;
            if (g >= lo && g < hi) rows.push_back(g);  // this rank's rows (data parallel)
          }
        }
        return more;
      },
      po);
}

void DlrmTask::SetLearningRateScale(double scale) {
  lr_scale_ = scale;
  if (opt_ != nullptr) SetOptimizerLr(*opt_, cfg_.train.dense_lr * scale);
  if (device_rows_ != nullptr) device_rows_->set_lr(static_cast<float>(cfg_.train.lr * scale));
}

Result<EpochOutcome> DlrmTask::TrainEpoch(uint64_t epoch, uint64_t first, StepSink& sink) {
  if (device_rows_ != nullptr) return TrainEpochOnDevice(first, sink);
  const RecordSource* source = &*train_source_;
  const uint64_t steps = source->steps();
  StartPreload(source, first);
  auto p = MakePipeline(source, first, /*writes=*/true, CarriedWindow(epoch));
  p->Start();
  sink.EpochStart(source->RecordsBefore(first));
  // Across processes the next step's rows start travelling while a step computes.
  const bool ahead = SendsRowsAhead(dp_.get(), cfg_.dist.prefetch_rows) && p->NextReadyEarly();
  next_rows_.step = ~uint64_t{0};
  for (uint64_t s = first; s < steps; ++s) {
    Status st;
    RowBatch* b = p->WaitReady(s - first, st);
    RowBatch* next = nullptr;
    if (b != nullptr && ahead && s + 1 < steps) {
      next = p->WaitReady(s + 1 - first, st);
      if (next == nullptr) b = nullptr;
    }
    Result<double> loss = b == nullptr ? Result<double>(st) : dp_ ? TrainShardedStep(*b, next) : TrainStep(*b);
    if (!loss.ok()) {
      p->Abort(loss.status());
      (void)FinishPass(*p);
      return loss.status();
    }
    const uint32_t samples = b->samples;
    p->Computed(s - first);
    const bool last = s + 1 == steps;
    if (sink.StepDone(samples, *loss * samples, last) && !last) {
      if (dp_ != nullptr) SLUICE_RETURN_IF_ERROR(sharded_->DropPrefetch());  // every rank stops after this step
      SLUICE_RETURN_IF_ERROR(FinishPass(*p));
      return EpochOutcome{true, s + 1};
    }
  }
  SLUICE_RETURN_IF_ERROR(FinishPass(*p));
  if (first == 0 && !in_memory_) epoch_start_loads_.push_back(p->head_loads());
  return EpochOutcome{};
}

Status DlrmTask::ScoreStep(const ModelInput& in, const std::string& split, std::vector<float>& scores,
                           std::vector<float>& labels) {
  Result<torch::Tensor> logits = PredictStep(*net_, in);
  if (!logits.ok()) return InvalidArgument("evaluate " + split + ": " + logits.status().message());
  const torch::Tensor prob = torch::sigmoid(*logits).contiguous();
  if (prob.dim() != 1 || prob.size(0) != in.labels.size(0) || prob.scalar_type() != torch::kFloat32) {
    return InvalidArgument("evaluate " + split + ": the model's Predict must return float32 [" +
                           std::to_string(in.labels.size(0)) + "] logits");
  }
  const float* pp = prob.data_ptr<float>();
  const float* lp = in.labels.data_ptr<float>();
  scores.insert(scores.end(), pp, pp + prob.size(0));
  labels.insert(labels.end(), lp, lp + prob.size(0));
  ++eval_steps_.computed;
  return Status::Ok();
}

Status DlrmTask::ScoreSteps(Pipeline& p, const RecordSource& source, const std::string& split,
                            std::vector<float>& scores, std::vector<float>& labels) {
  for (uint64_t t = 0; t < source.steps(); ++t) {
    Status s;
    RowBatch* b = p.WaitReady(t, s);
    Result<ModelInput> in = b != nullptr ? StepInput(*b, split, false) : Result<ModelInput>(s);
    SLUICE_RETURN_IF_ERROR(in.status());
    SLUICE_RETURN_IF_ERROR(ScoreStep(*in, split, scores, labels));
    p.Computed(t);
  }
  return Status::Ok();
}

Status DlrmTask::ScoreRounds(Pipeline& p, const RecordSource& source, const std::string& split,
                             std::vector<float>& scores, std::vector<float>& labels) {
  const auto world = static_cast<uint64_t>(dp_->world_size()), me = static_cast<uint64_t>(dp_->rank());
  EvalRound round(sharded_.get());
  for (uint64_t first = 0; first < source.steps(); first += world) {
    ModelInput in;
    bool have_mine = false;
    for (uint64_t t = first; t < std::min(first + world, source.steps()); ++t) {
      Status s;
      RowBatch* b = p.WaitReady(t, s);
      if (b == nullptr) return s;
      StepRows& r = step_rows_;
      MakeStepRows(*b, r);
      SLUICE_RETURN_IF_ERROR(round.Add(static_cast<int>(t - first), t, r.rows, r.inverse,
                                       {reinterpret_cast<float* const*>(b->rows.data()), b->rows.size()}, r.own_rows));
      if (t - first == me) {  // this rank's step: its records now (the batch goes at Computed)
        SLUICE_RETURN_IF_ERROR(ReadBatch(*b, split, in.dense, in.labels));
        in.key = {cfg_.train.seed, 0, b->step};
        have_mine = true;
      }
      p.Computed(t);
    }
    SLUICE_RETURN_IF_ERROR(round.Fetch(first / world));
    if (!have_mine) continue;
    in.tables.push_back(GatherUses(round.ptrs(), {round.MyUses()}, tables_->width(), /*requires_grad=*/false));
    in.training = false;
    SLUICE_RETURN_IF_ERROR(ScoreStep(in, split, scores, labels));
  }
  return Status::Ok();
}

// Rank q scored steps q, q + N, ...: its k-th sample is in its (k / batch)-th step (only the
// pass's last step is short, and it is the last of its rank's). In rounds of 1 MiB a rank, so
// the exchange adds a few MiB beside the scores whatever the split's size.
Status DlrmTask::GatherScores(const RecordSource& source, std::vector<float>& scores, std::vector<float>& labels) {
  const auto world = static_cast<uint64_t>(dp_->world_size());
  const auto batch = static_cast<uint64_t>(cfg_.train.batch);
  const uint64_t records = source.records();
  std::vector<uint64_t> counts(world, 0);
  for (uint64_t t = 0; t < source.steps(); ++t) counts[t % world] += std::min(batch, records - t * batch);
  const uint64_t me = static_cast<uint64_t>(dp_->rank());
  if (scores.size() != counts[me] || labels.size() != counts[me]) {
    return FailedPrecondition("evaluation: rank " + std::to_string(me) + " scored " + std::to_string(scores.size()) +
                              " samples of its " + std::to_string(counts[me]) + " (a bug)");
  }
  std::vector<float> all_scores(records), all_labels(records);
  const auto place = [&](uint64_t q, uint64_t k) { return (q + world * (k / batch)) * batch + k % batch; };
  for (uint64_t k = 0; k < scores.size(); ++k) all_scores[place(me, k)] = scores[k], all_labels[place(me, k)] = labels[k];
  SLUICE_RETURN_IF_ERROR(dp_->AllGatherItems(
      counts, 2, (1 << 20) / 8,
      [&](uint64_t k, uint64_t n, float* out) {
        for (uint64_t j = 0; j < n; ++j) out[2 * j] = scores[k + j], out[2 * j + 1] = labels[k + j];
        return Status::Ok();
      },
      [&](int q, uint64_t k, uint64_t n, const float* from) {
        for (uint64_t j = 0; j < n; ++j) {
          const uint64_t i = place(static_cast<uint64_t>(q), k + j);
          all_scores[i] = from[2 * j], all_labels[i] = from[2 * j + 1];
        }
        return Status::Ok();
      },
      "the evaluation's scores"));
  scores = std::move(all_scores), labels = std::move(all_labels);
  return Status::Ok();
}

Result<DlrmMetrics> DlrmTask::EvaluateSamples(const std::string& split, uint64_t max_samples,
                                              std::vector<float>* scores_out,
                                              std::vector<float>* labels_out) {
  torch::NoGradGuard no_grad;
  SLUICE_ASSIGN_OR_RETURN(RecordSource source, Source(split, max_samples));
  auto p = MakePipeline(&source, 0, /*writes=*/false);
  p->Start();
  std::vector<float> scores, labels;
  scores.reserve(source.records());
  labels.reserve(source.records());
  eval_steps_.steps += source.steps(), ++eval_steps_.passes;
  Status s = SplitsEvaluation() ? ScoreRounds(*p, source, split, scores, labels)
                                : ScoreSteps(*p, source, split, scores, labels);
  if (!s.ok()) p->Abort(s);  // an error ends the pass (the pipeline aborted and drained) first
  const Status finished = FinishPass(*p);
  SLUICE_RETURN_IF_ERROR(s);
  SLUICE_RETURN_IF_ERROR(finished);
  if (SplitsEvaluation()) SLUICE_RETURN_IF_ERROR(GatherScores(source, scores, labels));
  DlrmMetrics m = ClickMetrics(scores, labels);
  if (scores_out != nullptr) *scores_out = std::move(scores);
  if (labels_out != nullptr) *labels_out = std::move(labels);
  return m;
}

Result<Metrics> DlrmTask::Evaluate(const std::string& split) {
  const uint64_t max = purpose_ == Purpose::kTrain ? cfg_.eval.max_samples : 0;
  SLUICE_ASSIGN_OR_RETURN(DlrmMetrics m, EvaluateSamples(split, max, nullptr, nullptr));
  return Metrics{m.auc, m.ToString(), m.ToJson()};
}

Result<std::string> DlrmTask::Predict(const PredictRequest& request) {
  std::vector<float> scores, labels;
  SLUICE_ASSIGN_OR_RETURN(DlrmMetrics m, EvaluateSamples(request.split, request.k, &scores, &labels));
  std::ostringstream out;
  out << "sample\tp(click)\tlabel\n";
  for (size_t i = 0; i < scores.size(); ++i) out << i << "\t" << scores[i] << "\t" << labels[i] << "\n";
  out << "# these " << m.samples << " samples: " << m.ToString() << "\n";
  return out.str();
}

std::unique_ptr<Task> MakeDlrmTask(const DlrmConfig& config) {
  return std::make_unique<DlrmTask>(config);
}

}  // namespace sluice
