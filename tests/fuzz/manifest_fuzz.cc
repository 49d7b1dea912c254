#include <string>

#include "common/check.h"
#include "storage/dataset.h"
#include "tests/fuzz/fuzz_targets.h"

namespace sluice::fuzz {

int Manifest(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<sluice::Manifest> m = sluice::Manifest::Parse(text, "manifest.json");
  if (!m.ok()) return 0;
  const std::string json = m->ToJson();
  Result<sluice::Manifest> again = sluice::Manifest::Parse(json, "manifest.json (written)");
  SLUICE_CHECK(again.ok(), "a parsed manifest's JSON does not parse: %s\n%s",
               again.status().message().c_str(), json.c_str());
  SLUICE_CHECK(again->ToJson() == json, "a parsed manifest's JSON parses to another manifest:\n%s\nthen\n%s",
               json.c_str(), again->ToJson().c_str());
  return 0;
}

}  // namespace sluice::fuzz
