#pragma once
// Where a run's model computes (the `device` section every task's config has): the host, a CUDA
// GPU, or the emulated device that runs the GPU path's logic on the CPU (tests and debugging
// without a GPU). On a device, a step's rows are staged through page-locked host buffers and
// copied on their own stream while the previous step computes; the rows recently used stay in
// device memory (the device row cache, within gpu_budget); the row optimizer runs there and
// every updated row is written back through the host cache (train/device_rows.h).

#include <cstdint>

#include "cache/planner.h"
#include "common/config.h"

namespace sluice {

enum class DeviceType { kCpu, kCuda, kEmulated };
template <>
struct EnumNames<DeviceType> {
  static constexpr std::pair<DeviceType, const char*> kNames[] = {
      {DeviceType::kCpu, "cpu"}, {DeviceType::kCuda, "cuda"}, {DeviceType::kEmulated, "emulated"}};
};

struct DeviceConfig {
  DeviceType type = DeviceType::kCpu;
  Bytes gpu_budget{0};
  PlannerKind planner = PlannerKind::kLru;
  bool deterministic = true;

  bool on_device() const { return type != DeviceType::kCpu; }

  template <class V>
  void VisitFields(V& v) {
    v.Field("type", type,
            "where the model computes: cpu (the host path), cuda (a GPU: a build with "
            "-DSLUICE_CUDA=ON against a CUDA libtorch) or emulated (the GPU path run on the CPU: "
            "tests and debugging)");
    v.Field("gpu_budget", gpu_budget,
            "device memory for sluice's own buffers: the device row cache and two staged steps "
            "(libtorch's activations are reported, not planned); 0: the steps in flight only, no "
            "row cache", InRange(Bytes{0}, Bytes{uint64_t{1} << 50}));
    v.Field("planner", planner,
            "device row cache: lru (rows recently used stay), oracle (rows the next steps use "
            "stay, as far ahead as the sampler has filled them, at most 4 steps; among the others "
            "the least often used go first), none (only the steps in flight) or static (node "
            "classification's feature rows: the highest in-degree nodes stay once loaded, as "
            "Quiver places them by access probability; the rest pass through)",
            OneOfEnum({PlannerKind::kLru, PlannerKind::kOracle, PlannerKind::kNone, PlannerKind::kStatic}));
    v.Field("deterministic", deterministic,
            "deterministic GPU kernels (torch's deterministic algorithms, cuBLAS workspace "
            ":4096:8): a GPU run repeats bit for bit, in memory and out of core");
  }
};

}  // namespace sluice
