// The DLRM task on a device (device.type cuda or emulated; see dlrm_task_impl.h): the model and
// its optimizer on the device, a step's rows, dense features and labels staged through
// DeviceRows while the previous step computes, the row optimizer on the device and every
// updated row written back through the host cache.

#include <algorithm>

#include "common/clock.h"
#include "train/device_steps.h"
#include "train/dlrm/dlrm_task_impl.h"
#include "train/model_step.h"

namespace sluice {

Status DlrmTask::SetUpDevice() {
  if (!cfg_.device.on_device() || purpose_ != Purpose::kTrain) return Status::Ok();
  if (!cfg_.model.torchscript.empty()) {
    return InvalidArgument("device.type " + std::string(EnumName(cfg_.device.type)) +
                           ": a TorchScript model (model.torchscript) trains on the CPU only");
  }
  SLUICE_ASSIGN_OR_RETURN(acc_, OpenAccelerator(cfg_.device));
  net_->to(acc_->device());
  return Status::Ok();
}

DeviceRowsOptions DlrmTask::DeviceOptions() const {
  DeviceRowsOptions o;
  o.dim = tables_->width();
  o.row_floats = tables_->row_bytes() / 4;
  o.optimizer = tables_->optimizer();
  o.lr = static_cast<float>(cfg_.train.lr * lr_scale_);
  o.planner = cfg_.device.planner;
  return o;
}

Result<DevicePlan> DlrmTask::PlanDeviceRows() const {
  DeviceStepShape shape;
  shape.uses = shape.rows = static_cast<uint64_t>(cfg_.train.batch) * tables_->tables();
  shape.extra_bytes = static_cast<uint64_t>(cfg_.train.batch) * (rec_.dense + 1) * 4 + 128;  // dense, labels
  return PlanDevice(cfg_.device, DeviceOptions(), shape, acc_->device().is_cpu(), net_->StepBytes());
}

uint64_t DlrmTask::DeviceHostBytes() const {
  if (acc_ == nullptr) return 0;
  Result<DevicePlan> plan = PlanDeviceRows();
  return plan.ok() ? plan->host_bytes : 0;  // a plan that fails fails at SetUpDeviceRows
}

Status DlrmTask::SetUpDeviceRows() {
  if (acc_ == nullptr) return Status::Ok();
  SLUICE_ASSIGN_OR_RETURN(DevicePlan plan, PlanDeviceRows());
  device_rows_ = std::make_unique<DeviceRows>(acc_.get(), plan.options);
  return Status::Ok();
}

Status DlrmTask::StageStep(RowBatch& b) {
  const auto start = SteadyClock::now();
  torch::Tensor dense, labels;
  SLUICE_RETURN_IF_ERROR(ReadBatch(b, "train", dense, labels));
  inverse_.assign(b.inverse.begin(), b.inverse.end());
  const std::span<float* const> rows(reinterpret_cast<float* const*>(b.rows.data()), b.rows.size());
  SLUICE_RETURN_IF_ERROR(device_rows_->Stage(b.unique, rows, {inverse_}, {dense, labels}));
  time_.gather_s += SecondsSince(start);
  return Status::Ok();
}

Status DlrmTask::LaunchStep(const RowBatch& b) {
  const auto start = SteadyClock::now();
  DeviceStep step = device_rows_->Begin(/*training=*/true);
  ModelInput in;
  in.dense = step.extras[0];
  in.labels = step.extras[1];
  in.tables.push_back(std::move(step.table));
  in.key = {cfg_.train.seed, 0, b.step};
  opt_->zero_grad();
  SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*net_, in, /*allow_fused=*/false, /*defer_loss=*/true));
  opt_->step();
  device_rows_->Update(g.use_grads.at(0));
  device_loss_ = g.loss_value;
  time_.compute_s += SecondsSince(start);
  return Status::Ok();
}

Result<EpochOutcome> DlrmTask::TrainEpochOnDevice(uint64_t first, StepSink& sink) {
  const RecordSource* source = &*train_source_;
  StartPreload(source, first);
  auto p = MakePipeline(source, first, /*writes=*/true);
  p->Start();
  sink.EpochStart(source->RecordsBefore(first));
  DevicePass<RowBatch, Pipeline> pass;
  pass.pipeline = p.get(), pass.rows = device_rows_.get();
  pass.first = first, pass.steps = source->steps();
  pass.stage = [this](RowBatch& b) { return StageStep(b); };
  pass.launch = [this](uint64_t, RowBatch& b) { return LaunchStep(b); };
  pass.finish = [this](RowBatch&) -> Result<double> {
    const auto start = SteadyClock::now();
    SLUICE_RETURN_IF_ERROR(device_rows_->Finish());
    const double loss = device_loss_.item<double>();
    time_.update_s += SecondsSince(start);
    return loss;
  };
  pass.units = [](const RowBatch& b) { return b.samples; };
  pass.finish_pass = [this](Pipeline& pipeline) { return FinishPass(pipeline); };
  return RunDevicePass(pass, sink, device_wall_s_);
}

}  // namespace sluice
