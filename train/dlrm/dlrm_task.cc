#include "train/dlrm/dlrm_task.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/clock.h"
#include "train/dlrm/dlrm_task_impl.h"
#include "train/fingerprint.h"
#include "train/run_dir.h"
#include "train/torch_io.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Clock = SteadyClock;

}  // namespace

DlrmTask::DlrmTask(DlrmConfig config) : cfg_(std::move(config)) {
  settings_ = RunSettingsOf(cfg_);
  in_memory_ = cfg_.storage.mode == "in_memory";
  rocksdb_ = !in_memory_ && cfg_.storage.backend == "rocksdb";
  tables_dir_ = cfg_.run_dir + "/tables";
}

std::string DlrmTask::ConfigYaml() { return DumpConfig(cfg_); }
std::string DlrmTask::ConfigFingerprint() { return sluice::ConfigFingerprint(cfg_); }

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
  if (cfg_.model.ids == "raw" && !in_memory_ && !rocksdb_) {
    return InvalidArgument("model.ids: raw keeps 64-bit ids, which only storage.backend: rocksdb "
                           "(or storage.mode: in_memory) can hold; use ids: modulo or vocab with rowfile");
  }
  SLUICE_ASSIGN_OR_RETURN(DlrmTables tables, DlrmTables::Make(cfg_, dataset_));
  tables_.emplace(std::move(tables));
  torch::manual_seed(cfg_.train.seed);
  net_ = DlrmNet(static_cast<int>(rec_.dense), static_cast<int>(rec_.sparse), cfg_.model.dim,
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

std::string DlrmTask::TableFileName() const {
  if (in_memory_) return tables_->raw_ids() ? "rows.kv" : "rows.bin";
  return rocksdb_ ? "kv" : "rows.bin";
}

Status DlrmTask::LoadState(const CheckpointReader& checkpoint) {
  if (!checkpoint.Has(TableFileName())) {
    return InvalidArgument(checkpoint.dir() + ": the checkpoint holds its tables in another form "
                           "than " + TableFileName() + " (storage.mode " + cfg_.storage.mode +
                           ", storage.backend " + cfg_.storage.backend + "); use the storage "
                           "settings it was trained with");
  }
  SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "dense.pt", net_));
  SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "dense_optimizer.pt", *opt_));
  resume_dir_ = checkpoint.dir();
  return Status::Ok();
}

// The checkpoint's tables become the run's (out of core; in memory they are read in place).
Status DlrmTask::RestoreTables(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(tables_dir_, ec);
  if (rocksdb_) {
    fs::remove_all(tables_dir_ + "/kv", ec);
    fs::copy(dir + "/kv", tables_dir_ + "/kv", fs::copy_options::recursive, ec);
  } else {
    fs::copy_file(dir + "/rows.bin", tables_dir_ + "/rows.bin.tmp",
                  fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tables_dir_ + "/rows.bin.tmp", tables_dir_ + "/rows.bin", ec);
  }
  if (ec) return IoError("resume: restore the tables of " + dir + ": " + ec.message());
  return Status::Ok();
}

Status DlrmTask::PrepareTraining(const CheckpointReader* resumed) {
  if (resumed != nullptr && !in_memory_) SLUICE_RETURN_IF_ERROR(RestoreTables(resumed->dir()));
  SLUICE_RETURN_IF_ERROR(SetUpStorage(resumed == nullptr, ""));
  if (resumed != nullptr && in_memory_) SLUICE_RETURN_IF_ERROR(LoadMemoryRows(resumed->dir()));
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset_.File("samples.train"));
  SLUICE_ASSIGN_OR_RETURN(samples_, File::Open(dataset_.PathOf(*f), OpenMode::kRead, false));
  return Status::Ok();
}

Status DlrmTask::PrepareReading(const CheckpointReader& checkpoint) {
  return SetUpStorage(false, checkpoint.dir());
}

std::string DlrmTask::Describe() const {
  return "sluice train: " + cfg_.dataset + ", " +
         FormatCount(static_cast<double>(NumSamples("train"))) + " train samples, " +
         std::to_string(tables_->tables()) + " tables x " + std::to_string(tables_->dim()) +
         " dims, " + std::to_string(rec_.dense) + " dense features, " + cfg_.train.optimizer;
}

Result<uint64_t> DlrmTask::SampleDistinctRowsPerStep() {
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

RowPrefetcher::Source DlrmTask::MakeSource(const File* samples, uint64_t n, uint64_t first_step,
                                           uint64_t steps) {
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  const uint32_t rb = rec_.bytes();
  const uint32_t tables = tables_->tables();
  const DlrmTables* map = &*tables_;
  return [samples, n, first_step, steps, batch, rb, tables, map](uint64_t t, RowBatch& b) -> Result<bool> {
    const uint64_t step = first_step + t;
    if (step >= steps) return false;
    const uint64_t lo = step * batch, count = std::min(batch, n - lo);
    b.records.resize(count * rb);
    SLUICE_RETURN_IF_ERROR(PreadFull(*samples, b.records.data(), b.records.size(), lo * rb));
    b.samples = static_cast<uint32_t>(count);
    b.keys.resize(count * tables);
    for (uint64_t i = 0; i < count; ++i) {
      const std::byte* r = b.records.data() + i * rb;
      for (uint32_t f = 0; f < tables; ++f) {
        uint64_t raw;
        std::memcpy(&raw, r + 8 * f, 8);
        b.keys[i * tables + f] = map->MapId(f, raw);
      }
    }
    return true;
  };
}

std::unique_ptr<RowPrefetcher> DlrmTask::MakePrefetcher(RowPrefetcher::Source source, bool writes) {
  RowPrefetcherOptions po;
  po.run_ahead = run_ahead_;
  po.writes = writes;
  po.io = cfg_.io;
  if (in_memory_) return std::make_unique<RowPrefetcher>(memory_.get(), po, std::move(source));
  return std::make_unique<RowPrefetcher>(cache_.get(), arena_.data(), tables_->row_bytes(),
                                         backing_.get(), po, std::move(source));
}

Status DlrmTask::FinishPass(RowPrefetcher& p) {
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
    const uint64_t record = b.step * static_cast<uint64_t>(cfg_.train.batch) + static_cast<uint64_t>(i);
    const std::string where = cfg_.dataset + ": samples." + split + " record " + std::to_string(record);
    if (lp[i] != 0.0f && lp[i] != 1.0f) {
      return InvalidArgument(where + ": label " + std::to_string(lp[i]) + " is not 0 or 1");
    }
    for (uint32_t k = 0; k < rec_.dense; ++k) {
      const float v = dp[i * rec_.dense + k];
      if (!std::isfinite(v)) {
        auto file = dataset_.File("samples." + split);
        return InvalidArgument(where + ": dense feature " + std::to_string(k) + " is " +
                               (std::isnan(v) ? "nan" : "infinite") + " (in " +
                               (file.ok() ? dataset_.PathOf(**file) : split) +
                               "; fix the data: sluice_prep writes only finite values)");
      }
    }
  }
  return Status::Ok();
}

// The step's distinct rows (first-occurrence order) gathered per use: [samples, tables, width].
torch::Tensor DlrmTask::GatherRows(const RowBatch& b) {
  const int64_t n = b.samples, u = static_cast<int64_t>(b.unique.size());
  const int64_t d = tables_->width(), tables = tables_->tables();
  torch::Tensor rows = torch::empty({u, d});
  float* rp = rows.data_ptr<float>();
  for (int64_t j = 0; j < u; ++j) std::memcpy(rp + j * d, b.rows[j], d * 4);
  inverse_scratch_.assign(b.inverse.begin(), b.inverse.end());
  torch::Tensor inv = torch::from_blob(inverse_scratch_.data(), {n * tables}, torch::kInt64);
  return rows.index_select(0, inv).reshape({n, tables, d});
}

// Runs forward and backward, sums each row's gradients in sample order, and updates the rows in
// place.
Result<double> DlrmTask::TrainStep(RowBatch& b) {
  auto start = Clock::now();
  torch::Tensor dense, labels;
  SLUICE_RETURN_IF_ERROR(ReadBatch(b, "train", dense, labels));
  const int64_t n = b.samples, u = static_cast<int64_t>(b.unique.size());
  const int64_t d = tables_->width(), tables = tables_->tables();
  torch::Tensor emb = GatherRows(b).requires_grad_(true);
  time_.gather_s += SecondsSince(start);
  start = Clock::now();
  torch::Tensor logits = net_->forward(dense, emb);
  torch::Tensor loss = torch::binary_cross_entropy_with_logits(logits, labels);
  opt_->zero_grad();
  loss.backward();
  opt_->step();
  time_.compute_s += SecondsSince(start);
  start = Clock::now();
  torch::Tensor g = emb.grad().reshape({n * tables, d}).contiguous();
  const float* gp = g.data_ptr<float>();
  std::vector<float> sums(static_cast<size_t>(u * d), 0.0f);
  for (int64_t i = 0; i < n * tables; ++i) {
    float* __restrict s = sums.data() + int64_t{b.inverse[i]} * d;
    const float* __restrict gi = gp + i * d;
    for (int64_t j = 0; j < d; ++j) s[j] += gi[j];
  }
  UpdateRows(tables_->optimizer(), reinterpret_cast<float* const*>(b.rows.data()), sums.data(), 0,
             u, d, static_cast<float>(cfg_.train.lr));
  time_.update_s += SecondsSince(start);
  return loss.item<double>();
}

void DlrmTask::StartPreload(uint64_t first_step, uint64_t steps) {
  auto* rf = dynamic_cast<RowFileBacking*>(backing_.get());
  if (rf == nullptr || plan_.preload_rows == 0) return;
  auto source = MakeSource(&samples_, NumSamples("train"), first_step, steps);
  auto scratch = std::make_shared<RowBatch>();  // shared: the preloader copies the function
  const std::vector<uint64_t>* offsets = &tables_->offsets();
  RowPreloaderOptions po;
  po.capacity_rows = plan_.preload_rows;
  po.horizon_steps = static_cast<uint32_t>(cfg_.storage.preload_horizon);
  rf->StartPreload(
      [offsets, source, scratch](uint64_t t, std::vector<uint64_t>& rows) -> Result<bool> {
        SLUICE_ASSIGN_OR_RETURN(const bool more, source(t, *scratch));
        if (more) {
          for (const RowKey& k : scratch->keys) rows.push_back((*offsets)[k.table] + k.id);
        }
        return more;
      },
      po);
}

Result<EpochOutcome> DlrmTask::TrainEpoch(uint64_t /*epoch*/, uint64_t first, StepSink& sink) {
  const uint64_t steps = StepsPerEpoch();
  StartPreload(first, steps);
  auto p = MakePrefetcher(MakeSource(&samples_, NumSamples("train"), first, steps), /*writes=*/true);
  p->Start();
  sink.EpochStart(std::min(NumSamples("train"), first * static_cast<uint64_t>(cfg_.train.batch)));
  for (uint64_t s = first; s < steps; ++s) {
    Status st;
    auto w = Clock::now();
    RowBatch* b = p->WaitReady(s - first, st);
    time_.wait_s += SecondsSince(w);
    if (b == nullptr) {
      (void)FinishPass(*p);
      return st;
    }
    Result<double> loss = TrainStep(*b);
    if (!loss.ok()) {
      (void)FinishPass(*p);
      return loss.status();
    }
    const uint32_t samples = b->samples;
    p->Computed(s - first);
    const bool last = s + 1 == steps;
    if (sink.StepDone(samples, *loss * samples, last) && !last) {
      SLUICE_RETURN_IF_ERROR(FinishPass(*p));
      return EpochOutcome{true, s + 1};
    }
  }
  SLUICE_RETURN_IF_ERROR(FinishPass(*p));
  return EpochOutcome{};
}

Result<DlrmMetrics> DlrmTask::EvaluateSamples(const std::string& split, uint64_t max_samples,
                                              std::vector<float>* scores_out,
                                              std::vector<float>* labels_out) {
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
    torch::Tensor dense, lab;
    if (b != nullptr) s = ReadBatch(*b, split, dense, lab);
    if (!s.ok()) {
      (void)FinishPass(*p);
      return s;
    }
    torch::Tensor prob = torch::sigmoid(net_->forward(dense, GatherRows(*b)));
    p->Computed(t);
    const float* pp = prob.data_ptr<float>();
    const float* lp = lab.data_ptr<float>();
    scores.insert(scores.end(), pp, pp + b->samples);
    labels.insert(labels.end(), lp, lp + b->samples);
  }
  SLUICE_RETURN_IF_ERROR(FinishPass(*p));
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
