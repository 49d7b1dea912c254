#pragma once
// The fuzz targets: each takes one input and returns 0, aborting (SLUICE_CHECK) when a property
// fails; a crash or a sanitizer report is a finding. Built two ways: as libFuzzer executables
// (scripts/fuzz.sh, the `fuzz` preset, where fuzz_main.cc gives each its LLVMFuzzerTestOneInput)
// and into fuzz_replay_test, the plain unit test CI runs over tests/fuzz/corpus/<target>/ and
// every input a fuzzer ever crashed on (tests/fuzz/crashes/<target>/).

#include <cstddef>
#include <cstdint>

namespace sluice::fuzz {

// A YAML config, then after the first NUL byte NUL-separated `--set` assignments, loaded as each
// task's config. A config that loads dumps to YAML that loads back to the same dump.
int Config(const uint8_t* data, size_t size);
// A dataset manifest (manifest.json). One that parses serialises to JSON that parses back to
// the same JSON.
int Manifest(const uint8_t* data, size_t size);
// A checkpoint's state.json, with the same round-trip property.
int CheckpointState(const uint8_t* data, size_t size);
// Three layout bytes (sparse and dense fields, batch), then a recommendation split's record
// file: written as a dataset, opened, read step by step and checked record by record. Every
// outcome is a clean error or every record read.
int Records(const uint8_t* data, size_t size);

}  // namespace sluice::fuzz
