// Node classification on a device (device.type cuda or emulated; see nc_task_impl.h): the GNN
// and its optimizer on the device; a step's rows (feature rows, read-only, or learnable
// embeddings), its sampled blocks, the nodes' ids and the seeds' labels staged through
// DeviceRows into page-locked memory and copied on the copy stream while the previous step
// computes; feature rows the device holds already (the device row cache, within
// device.gpu_budget) are not copied again. Float16 features are widened and row-normalised on the
// device; embeddings are updated there and written back through the host cache as on the CPU.

#include <algorithm>
#include <cstdio>

#ifdef SLUICE_HAVE_CUDA
#include "sampler/cuda/khop_cuda.h"
#endif
#include "common/clock.h"
#include "train/device_steps.h"
#include "train/model_step.h"
#include "train/nc/nc_task_impl.h"

namespace sluice {

Status NcTask::SetUpDevice() {
  if (!cfg_.device.on_device() || purpose_ != Purpose::kTrain) return Status::Ok();
  const std::string what = "device.type " + std::string(EnumName(cfg_.device.type));
  if (factory_ || !encoder_name_.empty()) {
    return InvalidArgument(what + ": node classification trains a user's model or encoder on the CPU in this "
                           "version (device.type: cpu)");
  }
  if (!embeddings_ && features_->dtype() == DType::kFloat16 && feature_dim_ % 2 != 0) {
    return InvalidArgument(what + ": float16 features of odd width (" + std::to_string(feature_dim_) +
                           ") are not staged to a device; convert them to float32 or pad a column");
  }
  SLUICE_ASSIGN_OR_RETURN(acc_, OpenAccelerator(cfg_.device));
  net_->to(acc_->device());
  return Status::Ok();
}

DeviceRowsOptions NcTask::DeviceOptions() const {
  DeviceRowsOptions o;
  o.row_floats = row_bytes_ / 4;
  // Float16 feature rows travel as they are (two to a float) and are widened on the device.
  o.dim = embeddings_ ? feature_dim_ : o.row_floats;
  o.optimizer = cfg_.train.embedding_optimizer;
  o.lr = static_cast<float>(cfg_.train.embedding_lr * lr_scale_);
  o.planner = cfg_.device.planner;
  o.total_rows = num_nodes_;
  // Feature rows never change: with no device cache a step's rows are copied as they are, with
  // no cache to plan (the host's share of a step on a GPU).
  o.direct = !embeddings_ && (cfg_.device.gpu_budget.value == 0 || cfg_.device.planner == PlannerKind::kNone);
  o.ranked = true;  // by in-degree (device.planner static)
  return o;
}

// The probe's largest sample, with a margin (a step that does not fit beside the running one in
// the device's slots takes that step's slots and its copy waits: DeviceRows::Stage).
uint64_t NcTask::DeviceStepRows() const { return probe_nodes_ * 3 / 2 + 64; }

Result<DevicePlan> NcTask::PlanDeviceRows() const {
  const uint64_t nodes = DeviceStepRows(), words = probe_slot_words_ * 3 / 2 + 64;
  DeviceStepShape shape;
  shape.uses = shape.rows = nodes;
  // Labels of the seeds, the nodes' ids, every block's offsets and sources; alignment.
  shape.extra_bytes = static_cast<uint64_t>(cfg_.train.batch) * 8 + nodes * 8 + words * 8 +
                      64 * (2 * static_cast<uint64_t>(cfg_.model.layers) + 2);
  return PlanDevice(cfg_.device, DeviceOptions(), shape, acc_->device().is_cpu(), net_->StepBytes());
}

uint64_t NcTask::DeviceHostBytes() const {
  if (acc_ == nullptr) return 0;
  Result<DevicePlan> plan = PlanDeviceRows();
  return plan.ok() ? plan->host_bytes : 0;  // a plan that fails fails at SetUpDeviceRows
}

Status NcTask::SetUpDeviceRows() {
  if (acc_ == nullptr) return Status::Ok();
  SLUICE_ASSIGN_OR_RETURN(DevicePlan plan, PlanDeviceRows());
  if (cfg_.device.planner == PlannerKind::kStatic) {  // the slots two steps in flight leave
    const uint64_t in_flight = 2 * DeviceStepRows(), slots = plan.options.capacity_rows;
    device_pinned_ = HottestRows(slots > in_flight ? slots - in_flight : 0);
    plan.options.pinned = &device_pinned_;
  }
  device_rows_ = std::make_unique<DeviceRows>(acc_.get(), plan.options);
  return Status::Ok();
}

namespace {

torch::Tensor HostView(const void* data, size_t n) {
  return torch::from_blob(const_cast<void*>(data), {static_cast<int64_t>(n)}, torch::kLong);
}

}  // namespace

Status NcTask::StageStep(Batch& b) {
  const auto start = SteadyClock::now();
  const SampledSubgraph& s = b.sub;
  const std::vector<int64_t>& seeds = s.layers.front();
  torch::Tensor labels = torch::empty({static_cast<int64_t>(seeds.size())}, torch::kLong);
  int64_t* lab = labels.data_ptr<int64_t>();
  for (size_t i = 0; i < seeds.size(); ++i) lab[i] = labels_[static_cast<size_t>(seeds[i])];
  // Views of the batch's own vectors: Stage copies them into the staging buffer before it returns.
  std::vector<torch::Tensor> extras{labels, HostView(s.layers.back().data(), s.layers.back().size())};
  for (size_t l = s.blocks.size(); l-- > 0;) {  // outermost block first, as StepInput
    extras.push_back(HostView(s.blocks[l].offsets.data(), s.blocks[l].offsets.size()));
    extras.push_back(HostView(s.blocks[l].src_local.data(), s.blocks[l].src_local.size()));
  }
  inverse_.resize(b.rows.uses());  // a sample's nodes are distinct: use i is row i
  for (size_t i = 0; i < inverse_.size(); ++i) inverse_[i] = static_cast<int64_t>(i);
  const std::span<float* const> rows(reinterpret_cast<float* const*>(b.rows.rows.data()), b.rows.rows.size());
  SLUICE_RETURN_IF_ERROR(device_rows_->Stage(b.rows.unique, rows, {inverse_}, extras));
  gather_s_ += SecondsSince(start);
  return Status::Ok();
}

torch::Tensor NcTask::DeviceFeatures(torch::Tensor uses) {
  torch::NoGradGuard no_grad;
  if (features_->dtype() == DType::kFloat16) uses = uses.view(torch::kHalf).to(torch::kFloat);
  // Checked on the device; FinishStep reads the flag once the step is done and names the node.
  device_nonfinite_ = torch::isfinite(uses).logical_not().any();
  if (cfg_.features.normalize == FeatureNormalize::kRow) {
    const torch::Tensor sum = uses.sum(1, /*keepdim=*/true);
    uses = uses * torch::where(sum != 0, sum.reciprocal(), torch::ones_like(sum));
  }
  return uses;
}

Status NcTask::LaunchStep(const Batch& b, const Pass& pass, uint64_t step) {
  const auto start = SteadyClock::now();
  DeviceStep staged = device_rows_->Begin(/*training=*/embeddings_);
  ModelInput in;
  if (!embeddings_) {
    staged.table.uses = DeviceFeatures(staged.table.uses);
    staged.table.inverse = torch::Tensor();
  }
  in.tables.push_back(std::move(staged.table));
  in.labels = staged.extras[0];
  in.ids["nodes"] = staged.extras[1];
  const SampledSubgraph& s = b.sub;
  for (size_t l = s.blocks.size(), i = 2; l-- > 0; i += 2) {
    BlockInput bi;
    bi.num_dst = static_cast<int64_t>(s.blocks[l].num_dst), bi.num_src = static_cast<int64_t>(s.blocks[l].num_src);
    bi.offsets = staged.extras[i], bi.src_local = staged.extras[i + 1];
    in.blocks.push_back(std::move(bi));
  }
  in.key = {pass.seed, pass.epoch, step};
  in.training = true;
  net_->train();
  opt_->zero_grad();
  SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*net_, in, /*allow_fused=*/false, /*defer_loss=*/true));
  opt_->step();
  if (embeddings_) device_rows_->Update(g.use_grads.at(0));
  device_loss_ = g.loss_value;
  compute_s_ += SecondsSince(start);
  return Status::Ok();
}

// Waits for the step; its updated embedding rows are in the host cache when it returns.
Result<double> NcTask::FinishStep(const Batch& b) {
  const auto start = SteadyClock::now();
  if (embeddings_) {
    SLUICE_RETURN_IF_ERROR(device_rows_->Finish());
  } else {
    device_rows_->End();
    if (device_nonfinite_.item<bool>()) {  // the host's check names the node and the feature
      torch::Tensor rows;
      SLUICE_RETURN_IF_ERROR(GatherRows(b.rows, FeatureSource(), rows));
      return Corruption(feature_path_ + ": a feature row of this step is not finite");
    }
  }
  const double loss = device_loss_.item<double>();
  compute_s_ += SecondsSince(start);
  return loss;
}

Result<EpochOutcome> NcTask::TrainEpochOnDevice(Pass& pass, StepSink& sink) {
  auto p = MakePipeline(pass, FeatureSource());
  p->Start();
  sink.EpochStart(std::min<uint64_t>(pass.first_step * pass.batch, pass.nodes->size()));
  DevicePass<Batch, Pipeline> d;
  d.pipeline = p.get(), d.rows = device_rows_.get();
  d.first = pass.first_step, d.steps = pass.steps();
  d.stage = [this](Batch& b) { return StageStep(b); };
  d.launch = [this, &pass](uint64_t s, Batch& b) { return LaunchStep(b, pass, s); };
  d.finish = [this](Batch& b) { return FinishStep(b); };
  d.units = [](const Batch& b) { return b.rows.samples; };
  d.finish_pass = [this](Pipeline& pipeline) { return FinishPass(pipeline); };
  return RunDevicePass(d, sink, device_wall_s_);
}

Result<SampledSubgraph> NcTask::SampleWithCuda(void* sampler, std::span<const int64_t> seeds,
                                               const SampleKey& key) {
#ifdef SLUICE_HAVE_CUDA
  return static_cast<CudaKHopSampler*>(sampler)->Sample(seeds, key);
#else
  (void)sampler, (void)seeds, (void)key;
  return FailedPrecondition("train.sampler: cuda needs a CUDA build of sluice");
#endif
}

Status NcTask::SetUpSampler() {
  const SamplerDevice want = cfg_.train.sampler;
  const bool gpu_run = acc_ != nullptr && !acc_->device().is_cpu();
  sample_on_device_ = false;
  sampler_line_ = "sampler: cpu";
  if (want == SamplerDevice::kCpu || (want == SamplerDevice::kAuto && !gpu_run)) return Status::Ok();
#ifndef SLUICE_HAVE_CUDA
  if (want == SamplerDevice::kCuda) {
    return FailedPrecondition("train.sampler: cuda needs a CUDA build of sluice (cmake -DSLUICE_CUDA=ON) and a "
                              "GPU; use cpu or auto");
  }
  return Status::Ok();
#else
  std::string why;
  if (!CudaDeviceAvailable(&why)) {
    if (want == SamplerDevice::kCuda) return FailedPrecondition("train.sampler: cuda: " + why);
    sampler_line_ = "sampler: cpu (no GPU for the CUDA sampler: " + why + ")";
    return Status::Ok();
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<CudaKHopSampler> cuda, CudaKHopSampler::Create(graph_, train_options_));
  cuda_sampler_ = std::shared_ptr<void>(std::move(cuda));
  if (want == SamplerDevice::kCuda) {
    sample_on_device_ = true;
    sampler_line_ = "sampler: cuda (train.sampler: cuda)";
    return Status::Ok();
  }
  return CalibrateSampler();
#endif
}

namespace {

// Seconds a step and sampled edges a step of `sample` over the steps' seeds (one warm-up
// step first), each step cut to its first `share` of seeds.
template <class Sample>
Result<std::pair<double, double>> TimeSampler(const std::vector<std::vector<int64_t>>& steps, size_t share,
                                              Sample&& sample) {
  double edges = 0;
  SLUICE_RETURN_IF_ERROR(sample(std::span<const int64_t>(steps[0]), uint64_t{0}).status());
  const auto start = SteadyClock::now();
  for (size_t t = 0; t < steps.size(); ++t) {
    const size_t n = std::max<size_t>(1, steps[t].size() / share);
    SLUICE_ASSIGN_OR_RETURN(SampledSubgraph s, sample(std::span<const int64_t>(steps[t].data(), n), uint64_t{t}));
    for (const SampledBlock& b : s.blocks) edges += static_cast<double>(b.src_local.size());
  }
  const auto k = static_cast<double>(steps.size());
  return std::make_pair(SecondsSince(start) / k, edges / k);
}

}  // namespace

Status NcTask::CalibrateSampler() {
  constexpr uint64_t kSteps = 8;
  std::vector<int64_t> nodes;
  const Pass pass = TrainPass(0, 0, nodes);
  std::vector<std::vector<int64_t>> steps;
  for (uint64_t t = 0; t < kSteps && t < pass.steps(); ++t) {
    const std::span<const int64_t> seeds = pass.Seeds(t);
    steps.emplace_back(seeds.begin(), seeds.end());
  }
  void* cuda = cuda_sampler_.get();
  auto on_cpu = [this](std::span<const int64_t> seeds, uint64_t t) -> Result<SampledSubgraph> {
    return sampler_->Sample(seeds, {cfg_.train.seed, 0, t}, train_options_);
  };
  auto on_gpu = [this, cuda](std::span<const int64_t> seeds, uint64_t t) {
    return SampleWithCuda(cuda, seeds, {cfg_.train.seed, 0, t});
  };
  // At full batch and at a quarter: cost = fixed + per edge, for each; they cross where equal.
  SLUICE_ASSIGN_OR_RETURN(const auto cpu, TimeSampler(steps, 1, on_cpu));
  SLUICE_ASSIGN_OR_RETURN(const auto gpu, TimeSampler(steps, 1, on_gpu));
  SLUICE_ASSIGN_OR_RETURN(const auto cpu_q, TimeSampler(steps, 4, on_cpu));
  SLUICE_ASSIGN_OR_RETURN(const auto gpu_q, TimeSampler(steps, 4, on_gpu));
  sampler_cpu_ms_ = cpu.first * 1e3, sampler_cuda_ms_ = gpu.first * 1e3;
  sample_on_device_ = gpu.first < cpu.first;
  const double de = cpu.second - cpu_q.second;
  // -1: the GPU is not cheaper per edge (no crossover); 0: faster at every size.
  sampler_crossover_edges_ = -1;
  if (de > 0) {
    const double b_cpu = (cpu.first - cpu_q.first) / de, b_gpu = (gpu.first - gpu_q.first) / de;
    const double a_cpu = cpu.first - b_cpu * cpu.second, a_gpu = gpu.first - b_gpu * gpu.second;
    if (b_cpu > b_gpu) sampler_crossover_edges_ = std::max(0.0, (a_gpu - a_cpu) / (b_cpu - b_gpu));
  }
  char cross[96];
  if (sampler_crossover_edges_ < 0) {
    std::snprintf(cross, sizeof cross, "the GPU is not cheaper per sampled edge: no crossover");
  } else if (sampler_crossover_edges_ == 0) {
    std::snprintf(cross, sizeof cross, "the GPU is faster at both sizes");
  } else {
    std::snprintf(cross, sizeof cross, "the GPU is faster above about %.0f edges a step", sampler_crossover_edges_);
  }
  char line[320];
  std::snprintf(line, sizeof line,
                "sampler: %s (auto, timed on %zu steps: %.0f sampled edges a step took %.2f ms on the CPU, "
                "%.2f ms on the GPU; %s)",
                sample_on_device_ ? "cuda" : "cpu", steps.size(), cpu.second, sampler_cpu_ms_, sampler_cuda_ms_, cross);
  sampler_line_ = line;
  return Status::Ok();
}

}  // namespace sluice
