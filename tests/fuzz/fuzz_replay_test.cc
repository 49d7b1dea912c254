// Replays every fuzz input kept in the repository through its target: the seed corpora
// (tests/fuzz/corpus/<target>/) and each input a fuzzer crashed on (tests/fuzz/crashes/<target>/,
// kept once the bug is fixed). A target aborts on a failed property, so a regression fails here.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_targets.h"

namespace sluice::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};

constexpr Target kTargets[] = {
    {"config", &Config}, {"manifest", &Manifest}, {"checkpoint", &CheckpointState}, {"records", &Records}};

class FuzzReplay : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplay, EveryKeptInputPasses) {
  const Target& t = GetParam();
  size_t inputs = 0;
  for (const char* kind : {"corpus", "crashes"}) {
    const fs::path dir = fs::path(SLUICE_FUZZ_DIR) / kind / t.name;
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(e.path().string());
      EXPECT_EQ(t.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
      ++inputs;
    }
  }
  EXPECT_GE(inputs, 3u) << "the seed corpus of " << t.name << " is missing";
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace sluice::fuzz
