#include "train/torch_runtime.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/version.h>

#include <cstdio>

namespace sluice {

void ApplyTorchThreads(const ThreadPlan& plan) {
  at::set_num_threads(plan.compute_threads);
  static bool interop_set = false;  // libtorch allows setting inter-op threads only once
  if (!interop_set) {
    at::set_num_interop_threads(1);
    interop_set = true;
  }
}

std::string TorchRuntimeSummary() {
  using GetThreads = int (*)();
  auto* openblas = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  char text[256];
  std::snprintf(text, sizeof(text), "libtorch %s, %d intra-op threads, BLAS: %s", TORCH_VERSION,
                at::get_num_threads(),
                openblas ? ("OpenBLAS (" + std::to_string(openblas()) + " threads)").c_str()
                         : "not OpenBLAS (reference BLAS is ~30x slower: install "
                           "libopenblas0-pthread)");
  return text;
}

}  // namespace sluice
