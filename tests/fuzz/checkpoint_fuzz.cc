#include <string>

#include "common/check.h"
#include "tests/fuzz/fuzz_targets.h"
#include "train/checkpoint_store.h"

namespace sluice::fuzz {

int CheckpointState(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<sluice::CheckpointState> s = sluice::CheckpointState::Parse(text, "state.json");
  if (!s.ok()) return 0;
  const std::string json = s->ToJson();
  Result<sluice::CheckpointState> again = sluice::CheckpointState::Parse(json, "state.json (written)");
  SLUICE_CHECK(again.ok(), "a parsed state's JSON does not parse: %s\n%s",
               again.status().message().c_str(), json.c_str());
  SLUICE_CHECK(again->ToJson() == json, "a parsed state's JSON parses to another state:\n%s", json.c_str());
  return 0;
}

}  // namespace sluice::fuzz
