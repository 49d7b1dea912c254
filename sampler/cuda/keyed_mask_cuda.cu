#include "sampler/cuda/keyed_mask_cuda.h"

#include <cuda_runtime.h>

#include <string>

namespace sluice {
namespace {

__global__ void MaskKernel(float* __restrict__ out, uint64_t n, Key key, double p, float scale) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = key.Unit(i) >= p ? scale : 0.0f;
  }
}

}  // namespace

Status KeyedMaskCuda(float* out, uint64_t n, const Key& key, double p, float scale, void* stream) {
  if (n == 0) return Status::Ok();
  constexpr unsigned kThreads = 256;
  const uint64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = blocks < 65535 * 8 ? static_cast<unsigned>(blocks) : 65535u * 8;
  MaskKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(out, n, key, p, scale);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Unavailable(std::string("cuda: the dropout mask kernel: ") + cudaGetErrorString(e));
  return Status::Ok();
}

}  // namespace sluice
