#pragma once
// The keyed dropout mask (train/model_step.h's KeyedDropoutMask) drawn on a CUDA device: the
// same counter-based draws as on the host, so a GPU step drops exactly the elements the CPU
// step drops, without building the mask on the host and copying it (a step's first-layer mask
// is as large as its gathered features). Torch-free, like the CUDA sampler.

#include <cstdint>

#include "common/status.h"
#include "sampler/random.h"

namespace sluice {

// out[i] = key.Unit(i) >= p ? scale : 0 for i in [0, n), queued on `stream` (a cudaStream_t)
// of the current device. Fails with the CUDA error's text.
Status KeyedMaskCuda(float* out, uint64_t n, const Key& key, double p, float scale, void* stream);

}  // namespace sluice
