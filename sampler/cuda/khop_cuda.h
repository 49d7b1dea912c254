#pragma once
// k-hop sampling on a CUDA GPU, built when SLUICE_CUDA is on. Same semantics as KHopSampler
// (sampler/khop_sampler.h), and the same output bit for bit: the draws come from the same
// counter-based generator, and new nodes are ordered by their first draw position (an atomic
// min per node, then a scan), exactly as the CPU sampler orders them.
//
// This header includes no CUDA header, so C++ code (tests, benches, the trainer) can use it.

#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "sampler/csr_graph.h"
#include "sampler/khop_sampler.h"

namespace sluice {

// Whether a CUDA device can be used here; when not, `why` says why (no driver, no device).
bool CudaDeviceAvailable(std::string* why = nullptr);

class CudaKHopSampler {
 public:
  // Copies the graph to device `device`.
  static Result<std::unique_ptr<CudaKHopSampler>> Create(const CsrGraph& graph,
                                                         KHopOptions options, int device = 0);
  ~CudaKHopSampler();
  CudaKHopSampler(const CudaKHopSampler&) = delete;
  CudaKHopSampler& operator=(const CudaKHopSampler&) = delete;

  // Samples on the device and copies the layers and blocks back to host memory.
  Result<SampledSubgraph> Sample(std::span<const int64_t> seeds, const SampleKey& key);

 private:
  struct Impl;
  explicit CudaKHopSampler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
