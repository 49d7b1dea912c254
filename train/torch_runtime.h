#pragma once
// The libtorch side of the thread plan, and what the run summary says about libtorch.

#include <string>

#include "common/thread_plan.h"

namespace sluice {

// Sets libtorch's intra-op (and inter-op) thread counts from the plan.
void ApplyTorchThreads(const ThreadPlan& plan);
// "libtorch 1.13.1, 2 intra-op threads, BLAS: OpenBLAS (2 threads)"
std::string TorchRuntimeSummary();

}  // namespace sluice
