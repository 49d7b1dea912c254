#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/json_round_trip.h"
#include "train/checkpoint_store.h"

namespace sluice::fuzz {

int CheckpointState(const uint8_t* data, size_t size) {
  return JsonRoundTrip<sluice::CheckpointState>(data, size, "state.json");
}

}  // namespace sluice::fuzz
