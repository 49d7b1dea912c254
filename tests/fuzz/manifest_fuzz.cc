#include "storage/dataset.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/json_round_trip.h"

namespace sluice::fuzz {

int Manifest(const uint8_t* data, size_t size) {
  return JsonRoundTrip<sluice::Manifest>(data, size, "manifest.json");
}

}  // namespace sluice::fuzz
