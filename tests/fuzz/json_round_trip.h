#pragma once
// The property the manifest and checkpoint-state targets share: text that T::Parse accepts
// serialises (ToJson) to JSON that parses back to the same JSON.

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/check.h"

namespace sluice::fuzz {

template <class T>
int JsonRoundTrip(const uint8_t* data, size_t size, const char* name) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = T::Parse(text, name);
  if (!parsed.ok()) return 0;
  const std::string json = parsed->ToJson();
  auto again = T::Parse(json, std::string(name) + " (written)");
  SLUICE_CHECK(again.ok(), "a parsed %s's JSON does not parse: %s\n%s", name, again.status().message().c_str(),
               json.c_str());
  SLUICE_CHECK(again->ToJson() == json, "a parsed %s's JSON parses to another one:\n%s\nthen\n%s", name,
               json.c_str(), again->ToJson().c_str());
  return 0;
}

}  // namespace sluice::fuzz
