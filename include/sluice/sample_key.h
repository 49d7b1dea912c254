#pragma once
// Public API. What every random draw of a step is keyed on (negatives, neighbour samples,
// dropout masks), never a global generator: the same key gives the same draw in memory and out
// of core, at any thread count, after a resume.

#include <cstdint>

namespace sluice {

struct SampleKey {
  uint64_t seed = 0;   // the run's train.seed
  uint64_t epoch = 0;
  uint64_t step = 0;   // the step within the epoch
};

}  // namespace sluice
