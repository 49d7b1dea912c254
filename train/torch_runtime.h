#pragma once
// The libtorch side of the thread plan, and what the run summary says about libtorch.

#include <string>

#include "common/thread_plan.h"

namespace sluice {

// Sets libtorch's intra-op (and inter-op) thread counts from the plan.
void ApplyTorchThreads(const ThreadPlan& plan);
// "libtorch 1.13.1, 2 intra-op threads, BLAS: OpenBLAS (2 threads)"
std::string TorchRuntimeSummary();
// "GPU: NVIDIA H200 (cuda:0), 139.8 GiB" when this build has CUDA and sees a device, else why
// not (`sluice version` prints it; the GPU tests look for it). In train/accelerator.cc.
std::string DeviceSummary();

}  // namespace sluice
