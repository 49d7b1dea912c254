// libFuzzer's entry point for one target, named at compile time (SLUICE_FUZZ_TARGET).
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return sluice::fuzz::SLUICE_FUZZ_TARGET(data, size);
}
