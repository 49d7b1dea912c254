#include "train/accelerator.h"

#include <cstdlib>

#include "common/clock.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

// The GPU path on the CPU: "device" tensors are separate CPU tensors, copies are plain copies
// (timed as copy time), a step's busy time is the wall time from BeginStep to CopyOut.
class EmulatedAccelerator final : public Accelerator {
 public:
  torch::Device device() const override { return torch::Device(torch::kCPU); }
  std::string Describe() const override { return "emulated device (the GPU path on the CPU)"; }
  torch::Tensor HostBytes(int64_t bytes) override { return torch::empty({bytes}, torch::kUInt8); }
  torch::Tensor DeviceBytes(int64_t bytes) override { return torch::empty({bytes}, torch::kUInt8); }
  void CopyIn(int /*lane*/, const torch::Tensor& host, const torch::Tensor& dev) override {
    const auto start = SteadyClock::now();
    dev.copy_(host);
    times_.copy_s += SecondsSince(start);
    times_.bytes_in += static_cast<uint64_t>(host.numel());
  }
  void WaitCopyIn(int /*lane*/) override {}
  void BeginStep(int /*lane*/) override { step_start_ = SteadyClock::now(); }
  void CopyOut(int /*lane*/, const torch::Tensor& dev, const torch::Tensor& host) override {
    times_.busy_s += SecondsSince(step_start_);
    host.copy_(dev);
    times_.bytes_out += static_cast<uint64_t>(host.numel());
  }
  void WaitCopyOut(int /*lane*/) override { ++times_.steps; }
  void Synchronize() override {}

 private:
  SteadyClock::time_point step_start_{};
};

}  // namespace

#ifndef SLUICE_HAVE_TORCH_CUDA
bool BuiltWithCuda() { return false; }
Result<std::unique_ptr<Accelerator>> OpenCudaAccelerator() {
  return FailedPrecondition(
      "device.type: cuda needs a CUDA build of sluice (cmake -DSLUICE_CUDA=ON with Torch_DIR at a "
      "CUDA libtorch; Debian's libtorch is CPU-only); this build runs device.type cpu or emulated");
}
#endif

std::string DeviceSummary() {
  if (!BuiltWithCuda()) return "GPU: none (this build has no CUDA; device.type cpu or emulated)";
  Result<std::unique_ptr<Accelerator>> gpu = OpenCudaAccelerator();
  return gpu.ok() ? "GPU: " + (*gpu)->Describe() : "GPU: none (" + gpu.status().message() + ")";
}

Result<std::unique_ptr<Accelerator>> OpenAccelerator(const DeviceConfig& config) {
  if (config.deterministic) {
    // cuBLAS reads it when it starts: before the first GPU matrix product.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, false);
  }
  if (config.type == DeviceType::kEmulated) return std::unique_ptr<Accelerator>(new EmulatedAccelerator());
  if (config.type == DeviceType::kCuda) return OpenCudaAccelerator();
  return InvalidArgument("device.type: cpu runs on the host path, not on an accelerator");
}

}  // namespace sluice
