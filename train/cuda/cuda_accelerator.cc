// The CUDA device (train/accelerator.h). Built only with -DSLUICE_CUDA=ON against a CUDA
// libtorch. Streams come from c10::cuda (the same in libtorch 1.13 and 2.x); events are the
// CUDA runtime's own, timed (torch's event classes moved between versions).

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "sampler/cuda/keyed_mask_cuda.h"
#include "train/accelerator.h"

namespace sluice {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
  }
}

// A timed CUDA event.
class Event {
 public:
  Event() { Check(cudaEventCreate(&event_), "create an event"); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void Record(const c10::cuda::CUDAStream& s) { Check(cudaEventRecord(event_, s.stream()), "record an event"); }
  void Block(const c10::cuda::CUDAStream& s) { Check(cudaStreamWaitEvent(s.stream(), event_, 0), "wait for an event"); }
  void Synchronize() { Check(cudaEventSynchronize(event_), "synchronize an event"); }
  // Seconds from this event to `later` (both recorded and done).
  double SecondsTo(const Event& later) const {
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, event_, later.event_), "time events");
    return ms / 1e3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaAccelerator final : public Accelerator {
 public:
  explicit CudaAccelerator(c10::DeviceIndex index)
      : index_(index),
        compute_(c10::cuda::getCurrentCUDAStream(index)),
        copy_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)) {
    cudaDeviceProp prop{};
    Check(cudaGetDeviceProperties(&prop, index), "read the device's properties");
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1ull << 30));
    name_ = std::string(prop.name) + " (cuda:" + std::to_string(static_cast<int>(index)) + "), " + memory;
  }

  torch::Device device() const override { return torch::Device(torch::kCUDA, index_); }
  std::string Describe() const override { return name_; }
  torch::Tensor HostBytes(int64_t bytes) override {
    return torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  }
  torch::Tensor DeviceBytes(int64_t bytes) override {
    torch::Tensor t;
    {
      c10::cuda::CUDAStreamGuard guard(copy_);
      t = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device()));
    }
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), compute_);
    return t;
  }
  void CopyIn(int lane, const torch::Tensor& host, const torch::Tensor& dev) override {
    Lane& l = lanes_[lane];
    c10::cuda::CUDAStreamGuard guard(copy_);
    l.copy_begin.Record(copy_);
    dev.copy_(host, /*non_blocking=*/true);
    l.copy_end.Record(copy_);
    l.copied = true;
    times_.bytes_in += static_cast<uint64_t>(host.numel());
  }
  void WaitCopyIn(int lane) override {
    if (lanes_[lane].copied) lanes_[lane].copy_end.Synchronize();
  }
  void BeginStep(int lane) override {
    Lane& l = lanes_[lane];
    l.step_begin.Record(compute_);
    if (l.copied) l.copy_end.Block(compute_);
    l.step_ready.Record(compute_);
  }
  void CopyOut(int lane, const torch::Tensor& dev, const torch::Tensor& host) override {
    Lane& l = lanes_[lane];
    l.step_end.Record(compute_);
    host.copy_(dev, /*non_blocking=*/true);
    l.out_end.Record(compute_);
    times_.bytes_out += static_cast<uint64_t>(host.numel());
  }
  void WaitCopyOut(int lane) override {
    Lane& l = lanes_[lane];
    l.out_end.Synchronize();
    if (l.copied) times_.copy_s += l.copy_begin.SecondsTo(l.copy_end);
    times_.stall_s += l.step_begin.SecondsTo(l.step_ready);
    times_.busy_s += l.step_ready.SecondsTo(l.step_end);
    ++times_.steps;
    l.copied = false;
  }
  void Synchronize() override {
    Check(cudaStreamSynchronize(copy_.stream()), "synchronize the copy stream");
    Check(cudaStreamSynchronize(compute_.stream()), "synchronize the compute stream");
  }
  // Measured on an H200 with PyTorch 2.11 (cu130): a run's peak RSS on the GPU less the same
  // run's on the CPU, 0.61 GiB for link prediction on FB15k-237; the CUDA context, cuBLAS and the
  // kernels loaded on first use, most of it after the plan measured the process.
  uint64_t RuntimeHostBytes() const override { return 640ull << 20; }
  uint64_t PeakDeviceBytes() const override {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
    return static_cast<uint64_t>(stats.allocated_bytes[0].peak);  // 0: the aggregate
  }

 private:
  struct Lane {
    Event copy_begin, copy_end, step_begin, step_ready, step_end, out_end;
    bool copied = false;
  };
  c10::DeviceIndex index_;
  c10::cuda::CUDAStream compute_, copy_;
  Lane lanes_[2];
  std::string name_;
};

}  // namespace

bool BuiltWithCuda() { return true; }

torch::Tensor CudaKeyedMask(at::IntArrayRef sizes, const Key& key, double p, float scale,
                            const torch::Device& device) {
  torch::Tensor mask = torch::empty(sizes, torch::TensorOptions().dtype(torch::kFloat).device(device));
  const Status s = KeyedMaskCuda(mask.data_ptr<float>(), static_cast<uint64_t>(mask.numel()), key, p, scale,
                                 c10::cuda::getCurrentCUDAStream(device.index()).stream());
  if (!s.ok()) throw std::runtime_error(s.message());
  return mask;
}

Result<std::unique_ptr<Accelerator>> OpenCudaAccelerator() {
  if (!torch::cuda::is_available() || torch::cuda::device_count() == 0) {
    return FailedPrecondition("device.type: cuda: no CUDA device is visible to this process");
  }
  try {
    return std::unique_ptr<Accelerator>(new CudaAccelerator(0));
  } catch (const std::exception& e) {
    return FailedPrecondition(std::string("device.type: cuda: ") + e.what());
  }
}

}  // namespace sluice
