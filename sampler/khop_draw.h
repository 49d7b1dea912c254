#pragma once
// The per-node draw of the k-hop sampler, shared by the CPU sampler and the CUDA kernels so
// both produce the same sample bit for bit. Plain pointers and no library calls: this code is
// compiled for the host and, under nvcc, for the device.

#include <cstdint>

#include "sampler/random.h"

namespace sluice::khop {

// How many neighbours a node of degree `degree` draws (fanout -1: all of them).
SLUICE_HOST_DEVICE inline uint64_t SampleSize(uint64_t degree, int fanout, bool replace) {
  if (fanout < 0) return degree;
  if (degree == 0) return 0;
  if (replace) return static_cast<uint64_t>(fanout);
  return degree < static_cast<uint64_t>(fanout) ? degree : static_cast<uint64_t>(fanout);
}

// Writes node v's sample as positions into the CSR neighbour array: out[0, count) with
// count = SampleSize(...). `first` and `degree` locate v's neighbours; `hop` is the hop's key.
SLUICE_HOST_DEVICE inline void DrawPositions(uint64_t first, uint64_t degree, int64_t v,
                                             int fanout, bool replace, const Key& hop,
                                             int64_t* out, uint64_t count) {
  const uint64_t d = degree;
  if (fanout < 0 || (!replace && d <= static_cast<uint64_t>(fanout))) {
    for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(first + i);
    return;
  }
  const Key k = hop.With(static_cast<uint64_t>(v));
  if (replace) {
    for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(first + k.Below(i, d));
    return;
  }
  // Floyd's algorithm: `fanout` distinct positions out of d, in draw order.
  uint64_t n = 0;
  for (uint64_t j = d - static_cast<uint64_t>(fanout); j < d; ++j) {
    const int64_t t = static_cast<int64_t>(first + k.Below(j, j + 1));
    bool taken = false;
    for (uint64_t m = 0; m < n && !taken; ++m) taken = out[m] == t;
    out[n++] = taken ? static_cast<int64_t>(first + j) : t;
  }
}

// The key of hop h (1-based) of a step.
SLUICE_HOST_DEVICE inline Key HopKey(uint64_t seed, uint64_t epoch, uint64_t step, uint64_t hop) {
  return Key(seed).With(epoch).With(step).With(hop);
}

}  // namespace sluice::khop
