// CUDA k-hop sampler: the CPU sampler's algorithm (sampler/khop_sampler.cc) as kernels.
//
// Per hop: sample sizes (one thread per frontier node) and their scan; the draws (one thread
// per node, the shared khop::DrawPositions, then the neighbour loads); the deduplication (an
// atomic min of the first draw position per node, a flag per draw that is its node's first,
// an exclusive scan of the flags giving each new node its local index); and the local index of
// every draw. Layers and blocks are prefixes of two device arrays, copied back once per call.

#include "sampler/cuda/khop_cuda.h"

#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

#include <cstdio>
#include <vector>

#include "sampler/khop_draw.h"

namespace sluice {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kLow32 = 0xFFFFFFFFull;

#define SLUICE_CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                       \
    const cudaError_t sluice_cuda_error = (expr);                                            \
    if (sluice_cuda_error != cudaSuccess) {                                                  \
      return Unavailable(std::string("cuda: ") + #expr + ": " +                              \
                         cudaGetErrorString(sluice_cuda_error));                             \
    }                                                                                        \
  } while (0)

unsigned Blocks(uint64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// A device array that grows (keeping its contents) and frees itself.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  // Room for n elements; a move to a bigger allocation carries over the first `keep` (the
  // ones in use: copying the rest would copy memory never written).
  Status Reserve(uint64_t n, uint64_t keep, cudaStream_t stream) {
    if (n <= capacity_) return Status::Ok();
    const uint64_t grown = n > 2 * capacity_ ? n : 2 * capacity_;
    T* bigger = nullptr;
    SLUICE_CUDA_RETURN_IF_ERROR(cudaMalloc(&bigger, grown * sizeof(T)));
    if (data_ != nullptr) {
      if (keep > 0) {
        SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bigger, data_, keep * sizeof(T),
                                                    cudaMemcpyDeviceToDevice, stream));
      }
      SLUICE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
      cudaFree(data_);
    }
    data_ = bigger;
    capacity_ = grown;
    return Status::Ok();
  }
  T* get() { return data_; }

 private:
  T* data_ = nullptr;
  uint64_t capacity_ = 0;
};

__global__ void SizesKernel(const uint64_t* __restrict__ graph_offsets,
                            const int64_t* __restrict__ nodes, uint64_t frontier, int fanout,
                            bool replace, uint64_t* __restrict__ sizes) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= frontier) return;
  const int64_t v = nodes[i];
  sizes[i] = khop::SampleSize(graph_offsets[v + 1] - graph_offsets[v], fanout, replace);
}

__global__ void DrawKernel(const uint64_t* __restrict__ graph_offsets,
                           const int64_t* __restrict__ neighbors, const int64_t* __restrict__ nodes,
                           uint64_t frontier, const uint64_t* __restrict__ offsets, int fanout,
                           bool replace, Key hop, int64_t* __restrict__ out) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= frontier) return;
  const int64_t v = nodes[i];
  const uint64_t first = graph_offsets[v];
  int64_t* mine = out + offsets[i];
  const uint64_t count = offsets[i + 1] - offsets[i];
  khop::DrawPositions(first, graph_offsets[v + 1] - first, v, fanout, replace, hop, mine, count);
  for (uint64_t j = 0; j < count; ++j) mine[j] = neighbors[mine[j]];
}

// first[v] holds ((~tag) << 32) | position: a newer tag is smaller, so a plain atomic min
// replaces stale entries and keeps the earliest position of this hop.
__device__ uint64_t FirstCode(uint32_t tag, uint64_t position) {
  return (static_cast<uint64_t>(~tag) << 32) | position;
}

__global__ void FirstKernel(const int64_t* __restrict__ draws, uint64_t n,
                            const uint64_t* __restrict__ local, uint64_t call, uint32_t tag,
                            unsigned long long* __restrict__ first) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t v = draws[i];
  if ((local[v] & ~kLow32) == call) return;  // already in the layer
  atomicMin(first + v, static_cast<unsigned long long>(FirstCode(tag, i)));
}

__global__ void FlagKernel(const int64_t* __restrict__ draws, uint64_t n,
                           const unsigned long long* __restrict__ first, uint32_t tag,
                           uint32_t* __restrict__ flags) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  flags[i] = first[draws[i]] == FirstCode(tag, i) ? 1u : 0u;
}

__global__ void ScatterKernel(const int64_t* __restrict__ draws, uint64_t n,
                              const uint32_t* __restrict__ flags, const uint32_t* __restrict__ rank,
                              uint64_t base, uint64_t call, int64_t* __restrict__ layer,
                              uint64_t* __restrict__ local) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || flags[i] == 0) return;
  const uint64_t at = base + rank[i];
  layer[at] = draws[i];
  local[draws[i]] = call | at;
}

__global__ void LocalKernel(const int64_t* __restrict__ draws, uint64_t n,
                            const uint64_t* __restrict__ local, int64_t* __restrict__ out) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = static_cast<int64_t>(local[draws[i]] & kLow32);
}

}  // namespace

struct CudaKHopSampler::Impl {
  KHopOptions options;
  int device = 0;
  uint64_t num_nodes = 0;
  cudaStream_t stream = nullptr;
  DeviceArray<uint64_t> graph_offsets;
  DeviceArray<int64_t> neighbors;
  DeviceArray<uint64_t> local;               // per node: (call << 32) | local index
  DeviceArray<unsigned long long> first;     // per node: see FirstCode
  uint32_t call = 0;
  uint32_t tag = 0;
  // Per call, grown as needed.
  DeviceArray<int64_t> layer, draws, draws_local, seeds;
  DeviceArray<uint64_t> sizes, offsets;
  DeviceArray<uint32_t> flags, rank;
  DeviceArray<unsigned char> scan_scratch;
  uint64_t scan_scratch_bytes = 0;

  ~Impl() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  Status Scratch(size_t bytes) {
    SLUICE_RETURN_IF_ERROR(scan_scratch.Reserve(bytes, 0, stream));
    scan_scratch_bytes = bytes > scan_scratch_bytes ? bytes : scan_scratch_bytes;
    return Status::Ok();
  }

  // Appends the nodes of draws[0, n) not yet in the layer, in first-occurrence order.
  Result<uint64_t> AddNew(const int64_t* d_draws, uint64_t n, uint64_t layer_size) {
    if (n == 0) return layer_size;
    if (n >= (1ull << 32)) return InvalidArgument("cuda k-hop sampler: over 2^32 draws in a hop");
    if (++tag == 0) {
      SLUICE_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(first.get(), 0xFF, num_nodes * sizeof(unsigned long long), stream));
      tag = 1;
    }
    const uint64_t call_bits = static_cast<uint64_t>(call) << 32;
    SLUICE_RETURN_IF_ERROR(flags.Reserve(n, 0, stream));
    SLUICE_RETURN_IF_ERROR(rank.Reserve(n, 0, stream));
    FirstKernel<<<Blocks(n), kThreads, 0, stream>>>(d_draws, n, local.get(), call_bits, tag,
                                                    first.get());
    FlagKernel<<<Blocks(n), kThreads, 0, stream>>>(d_draws, n, first.get(), tag, flags.get());
    size_t bytes = 0;
    SLUICE_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(nullptr, bytes, flags.get(),
                                                              rank.get(), n, stream));
    SLUICE_RETURN_IF_ERROR(Scratch(bytes));
    SLUICE_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(
        scan_scratch.get(), bytes, flags.get(), rank.get(), n, stream));
    uint32_t tail[2] = {0, 0};
    SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&tail[0], rank.get() + n - 1, sizeof(uint32_t),
                                                cudaMemcpyDeviceToHost, stream));
    SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&tail[1], flags.get() + n - 1, sizeof(uint32_t),
                                                cudaMemcpyDeviceToHost, stream));
    SLUICE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const uint64_t added = static_cast<uint64_t>(tail[0]) + tail[1];
    if (layer_size + added >= (1ull << 32)) {
      return InvalidArgument("cuda k-hop sampler: layer over 2^32 nodes");
    }
    SLUICE_RETURN_IF_ERROR(layer.Reserve(layer_size + added, layer_size, stream));
    ScatterKernel<<<Blocks(n), kThreads, 0, stream>>>(d_draws, n, flags.get(), rank.get(),
                                                      layer_size, call_bits, layer.get(),
                                                      local.get());
    SLUICE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return layer_size + added;
  }

  // Checks and uploads a call's seeds, and stamps the call; returns the seed layer's size.
  Result<uint64_t> Begin(std::span<const int64_t> ids) {
    for (int64_t v : ids) {
      if (v < 0 || static_cast<uint64_t>(v) >= num_nodes) {
        return OutOfRange("cuda k-hop sampler: seed " + std::to_string(v) + " out of range [0, " +
                          std::to_string(num_nodes) + ")");
      }
    }
    if (++call == 0) {
      SLUICE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(local.get(), 0, num_nodes * sizeof(uint64_t), stream));
      call = 1;
    }
    SLUICE_RETURN_IF_ERROR(seeds.Reserve(ids.size() + 1, 0, stream));
    if (!ids.empty()) {
      SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(seeds.get(), ids.data(), ids.size() * sizeof(int64_t),
                                                  cudaMemcpyHostToDevice, stream));
    }
    SLUICE_RETURN_IF_ERROR(layer.Reserve(ids.size() + 1, 0, stream));
    return AddNew(seeds.get(), ids.size(), 0);
  }

  // Draws hop h's neighbours of layer[expanded, expanded + frontier) into draws[total, ...);
  // host_offsets gets each node's first draw (relative to `total`). Returns the hop's draws.
  Result<uint64_t> DrawHop(size_t h, uint64_t expanded, uint64_t frontier, uint64_t total,
                           const SampleKey& key, std::vector<uint64_t>& host_offsets) {
    const int fanout = options.fanouts[h];
    const bool replace = options.replace;
    SLUICE_RETURN_IF_ERROR(sizes.Reserve(frontier + 1, 0, stream));
    SLUICE_RETURN_IF_ERROR(offsets.Reserve(frontier + 1, 0, stream));
    host_offsets.assign(frontier + 1, 0);
    if (frontier == 0) return uint64_t{0};
    const int64_t* nodes = layer.get() + expanded;
    SizesKernel<<<Blocks(frontier), kThreads, 0, stream>>>(graph_offsets.get(), nodes, frontier,
                                                           fanout, replace, sizes.get());
    SLUICE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(offsets.get(), 0, sizeof(uint64_t), stream));
    size_t bytes = 0;
    SLUICE_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveSum(nullptr, bytes, sizes.get(),
                                                              offsets.get() + 1, frontier, stream));
    SLUICE_RETURN_IF_ERROR(Scratch(bytes));
    SLUICE_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveSum(
        scan_scratch.get(), bytes, sizes.get(), offsets.get() + 1, frontier, stream));
    SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_offsets.data(), offsets.get(),
                                                (frontier + 1) * sizeof(uint64_t),
                                                cudaMemcpyDeviceToHost, stream));
    SLUICE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const uint64_t hop_draws = host_offsets[frontier];
    SLUICE_RETURN_IF_ERROR(draws.Reserve(total + hop_draws + 1, total, stream));
    SLUICE_RETURN_IF_ERROR(draws_local.Reserve(total + hop_draws + 1, total, stream));
    DrawKernel<<<Blocks(frontier), kThreads, 0, stream>>>(
        graph_offsets.get(), neighbors.get(), nodes, frontier, offsets.get(), fanout, replace,
        khop::HopKey(key.seed, key.epoch, key.step, h + 1), draws.get() + total);
    SLUICE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return hop_draws;
  }

  // Copies the final layer and all local indices back; layers and blocks are prefixes.
  Result<SampledSubgraph> CopyBack(const std::vector<uint64_t>& layer_sizes,
                                   const std::vector<uint64_t>& sample_begin,
                                   const std::vector<uint64_t>& block_ends) {
    const uint64_t layer_size = layer_sizes.back();
    const uint64_t total = block_ends.empty() ? 0 : block_ends.back();
    std::vector<int64_t> host_layer(layer_size), host_local(total);
    if (layer_size > 0) {
      SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_layer.data(), layer.get(),
                                                  layer_size * sizeof(int64_t),
                                                  cudaMemcpyDeviceToHost, stream));
    }
    if (total > 0) {
      SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_local.data(), draws_local.get(),
                                                  total * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                                  stream));
    }
    SLUICE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    SampledSubgraph out;
    for (uint64_t size : layer_sizes) {
      out.layers.emplace_back(host_layer.begin(), host_layer.begin() + size);
    }
    for (size_t h = 0; h < block_ends.size(); ++h) {
      SampledBlock b;
      b.num_dst = layer_sizes[h];
      b.num_src = layer_sizes[h + 1];
      b.offsets.assign(sample_begin.begin(), sample_begin.begin() + b.num_dst);
      b.offsets.push_back(block_ends[h]);
      b.src_local.assign(host_local.begin(), host_local.begin() + block_ends[h]);
      out.blocks.push_back(std::move(b));
    }
    return out;
  }
};

bool CudaDeviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = std::string("no usable CUDA driver: ") + cudaGetErrorString(e);
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device";
    return false;
  }
  return true;
}

CudaKHopSampler::CudaKHopSampler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaKHopSampler::~CudaKHopSampler() = default;

Result<std::unique_ptr<CudaKHopSampler>> CudaKHopSampler::Create(const CsrGraph& graph,
                                                                 KHopOptions options,
                                                                 int device) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) return Unavailable("cuda k-hop sampler: " + why);
  if (graph.num_nodes() >= (1ull << 32)) {
    return InvalidArgument("cuda k-hop sampler: more than 2^32 nodes");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->device = device;
  impl->num_nodes = graph.num_nodes();
  SLUICE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  SLUICE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  cudaStream_t stream = impl->stream;
  const uint64_t n = graph.num_nodes();
  const uint64_t m = graph.num_edges();
  SLUICE_RETURN_IF_ERROR(impl->graph_offsets.Reserve(n + 1, 0, stream));
  SLUICE_RETURN_IF_ERROR(impl->neighbors.Reserve(m > 0 ? m : 1, 0, stream));
  SLUICE_RETURN_IF_ERROR(impl->local.Reserve(n > 0 ? n : 1, 0, stream));
  SLUICE_RETURN_IF_ERROR(impl->first.Reserve(n > 0 ? n : 1, 0, stream));
  SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl->graph_offsets.get(), graph.offsets().data(),
                                              (n + 1) * sizeof(uint64_t), cudaMemcpyHostToDevice,
                                              stream));
  if (m > 0) {
    // The device kernels read int64 ids; a graph stored as int32 is widened on the way.
    std::vector<int64_t> wide;
    const int64_t* host = graph.VisitNeighbors([&](auto all) -> const int64_t* {
      if constexpr (sizeof(all[0]) == sizeof(int64_t)) {
        return all.data();
      } else {
        wide.assign(all.begin(), all.end());
        return wide.data();
      }
    });
    SLUICE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl->neighbors.get(), host, m * sizeof(int64_t),
                                                cudaMemcpyHostToDevice, stream));
    SLUICE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // before `wide` goes
  }
  SLUICE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl->local.get(), 0, n * sizeof(uint64_t), stream));
  SLUICE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(impl->first.get(), 0xFF, n * sizeof(unsigned long long), stream));
  SLUICE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return std::unique_ptr<CudaKHopSampler>(new CudaKHopSampler(std::move(impl)));
}

Result<SampledSubgraph> CudaKHopSampler::Sample(std::span<const int64_t> seeds,
                                                const SampleKey& key) {
  Impl& s = *impl_;
  SLUICE_CUDA_RETURN_IF_ERROR(cudaSetDevice(s.device));
  SLUICE_ASSIGN_OR_RETURN(uint64_t layer_size, s.Begin(seeds));
  std::vector<uint64_t> layer_sizes = {layer_size};
  std::vector<uint64_t> sample_begin, block_ends, host_offsets;
  uint64_t total = 0;     // draws so far
  uint64_t expanded = 0;  // layer[0, expanded) already drew
  for (size_t h = 0; h < s.options.fanouts.size(); ++h) {
    const uint64_t frontier = layer_size - expanded;
    SLUICE_ASSIGN_OR_RETURN(const uint64_t hop_draws,
                            s.DrawHop(h, expanded, frontier, total, key, host_offsets));
    for (uint64_t i = 0; i < frontier; ++i) sample_begin.push_back(total + host_offsets[i]);
    const uint64_t dst_count = layer_size;
    SLUICE_ASSIGN_OR_RETURN(layer_size, s.AddNew(s.draws.get() + total, hop_draws, layer_size));
    if (hop_draws > 0) {
      LocalKernel<<<Blocks(hop_draws), kThreads, 0, s.stream>>>(
          s.draws.get() + total, hop_draws, s.local.get(), s.draws_local.get() + total);
      SLUICE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
    total += hop_draws;
    expanded = dst_count;
    layer_sizes.push_back(layer_size);
    block_ends.push_back(total);
  }
  return s.CopyBack(layer_sizes, sample_begin, block_ends);
}

}  // namespace sluice
