#pragma once
// The device a run's model computes on when it is not the host (device.type cuda or emulated),
// and the two streams of its steps: the compute stream (the current stream: the model, the row
// optimizer, the copy of updated rows back to the host) and the copy stream (a step's staged
// bytes to the device, while the previous step computes).
//
// Steps alternate between two lanes (step t uses lane t % 2); each lane has its own staging
// buffers and events, so step t + 1 is staged and copied while step t runs:
//
//   CopyIn(l, host, dev)     copy stream: host -> dev (returns at once on a GPU)
//   WaitCopyIn(l)            host: lane l's last CopyIn has read `host` (it may be refilled)
//   BeginStep(l)             compute stream: waits for lane l's CopyIn; the step starts
//   ... kernels of the step on the compute stream ...
//   CopyOut(l, dev, host)    compute stream: the step ends; dev -> host after its kernels
//   WaitCopyOut(l)           host: lane l's CopyOut is done; the step's times are added
//
// The emulated device does the same on the CPU (copies are plain copies, the "device" memory is
// separate tensors), so the GPU path's logic is tested where no GPU is.
//
// Thread safety: one thread (the compute thread).

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "train/device_config.h"

namespace sluice {

// Device time of the steps run so far, from events on the streams (wall clock when emulated).
struct AcceleratorTimes {
  uint64_t steps = 0;
  double busy_s = 0;   // compute stream: from each step's start (its copy arrived) to its end
  double copy_s = 0;   // copy stream: the steps' staged bytes to the device
  double stall_s = 0;  // compute stream waiting for a step's copy: copy time not hidden
  uint64_t bytes_in = 0, bytes_out = 0;
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;
  virtual torch::Device device() const = 0;
  // "NVIDIA H200 (cuda:0), 139.8 GiB" / "emulated device (CPU)".
  virtual std::string Describe() const = 0;
  // Host bytes for staging [bytes] uint8: page-locked on a GPU.
  virtual torch::Tensor HostBytes(int64_t bytes) = 0;
  // Device bytes [bytes] uint8 that CopyIn writes on the copy stream and the compute stream
  // reads: allocated for the copy stream and recorded for the compute stream, so the allocator
  // reuses the block only after both streams are done with it. (A block allocated for the
  // compute stream may still be in use by queued compute kernels when the copy stream writes
  // it: the first GPU run corrupted staged indices that way.)
  virtual torch::Tensor DeviceBytes(int64_t bytes) = 0;
  virtual void CopyIn(int lane, const torch::Tensor& host, const torch::Tensor& dev) = 0;
  virtual void WaitCopyIn(int lane) = 0;
  virtual void BeginStep(int lane) = 0;
  virtual void CopyOut(int lane, const torch::Tensor& dev, const torch::Tensor& host) = 0;
  virtual void WaitCopyOut(int lane) = 0;
  // Blocks until everything issued on both streams is done.
  virtual void Synchronize() = 0;
  // Host memory the device's runtime adds to the process beyond what it held when the memory
  // plan measured it (the CUDA context, cuBLAS, kernels loaded on first use); 0 when emulated.
  virtual uint64_t RuntimeHostBytes() const { return 0; }
  // Peak bytes libtorch's allocator held on the device (activations included); 0 when emulated.
  virtual uint64_t PeakDeviceBytes() const { return 0; }
  const AcceleratorTimes& times() const { return times_; }

 protected:
  AcceleratorTimes times_;
};

// Whether this build has the CUDA path (-DSLUICE_CUDA=ON against a CUDA libtorch).
bool BuiltWithCuda();

// The configured device (type cuda or emulated). A GPU needs a CUDA build and a visible device;
// with `deterministic`, torch's deterministic algorithms are switched on (and cuBLAS's workspace
// set to :4096:8 unless CUBLAS_WORKSPACE_CONFIG is set: it must be before cuBLAS starts).
Result<std::unique_ptr<Accelerator>> OpenAccelerator(const DeviceConfig& config);

// The CUDA device (train/cuda/cuda_accelerator.cc, built with CUDA only).
Result<std::unique_ptr<Accelerator>> OpenCudaAccelerator();

class Key;
#ifdef SLUICE_HAVE_TORCH_CUDA
// [sizes] float on CUDA device `device`: element i is key.Unit(i) >= p ? scale : 0, drawn by a
// kernel on the current stream (train/model_step.h's KeyedDropoutMask on a GPU).
torch::Tensor CudaKeyedMask(at::IntArrayRef sizes, const Key& key, double p, float scale,
                            const torch::Device& device);
#endif

}  // namespace sluice
