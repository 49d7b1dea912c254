#pragma once
// A small JSON writer for the files sluice writes (checkpoint state, metrics lines, summaries).
// Reading goes through yaml-cpp (JSON is YAML).
//
//   JsonObject o;
//   o.Add("epoch", 3).Add("loss", 0.25).AddRaw("valid", metrics_json);
//   o.str()  ->  {"epoch": 3, "loss": 0.25, "valid": {...}}
//
// Doubles are written with 17 significant digits (they read back bit for bit); NaN and
// infinities, which JSON cannot hold, are written as null.

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

// `s` as a quoted JSON string (quotes, backslashes and control characters escaped).
std::string JsonString(std::string_view s);
// Where `s` stops being UTF-8 (the offset of the first byte of an invalid or truncated
// sequence), or npos. The readers of sluice's own text files (configs, manifests, checkpoint
// states) refuse other encodings: such bytes cannot be written back as they were read.
size_t InvalidUtf8At(std::string_view s);
// True when `s` can be a key of a JSON object sluice writes and reads back: at most 256 bytes, no
// control characters (escaped, a long key would pass the 1024-character limit YAML readers put
// on keys of flow mappings, which yaml-cpp enforces on JSON).
bool IsPlainKey(std::string_view s);
// "<what>: not UTF-8 text (byte 0xNN at line L)" when `s` is not UTF-8, else "".
std::string Utf8Problem(std::string_view s, const std::string& what);
// A double with 17 significant digits, or null when not finite.
std::string JsonNumber(double v);

class JsonObject {
 public:
  JsonObject& Add(std::string_view key, double v);
  JsonObject& Add(std::string_view key, uint64_t v);
  JsonObject& Add(std::string_view key, int64_t v);
  JsonObject& Add(std::string_view key, int v) { return Add(key, static_cast<int64_t>(v)); }
  JsonObject& Add(std::string_view key, uint32_t v) { return Add(key, uint64_t{v}); }
  JsonObject& Add(std::string_view key, bool v);
  JsonObject& Add(std::string_view key, std::string_view v);
  JsonObject& Add(std::string_view key, const char* v) { return Add(key, std::string_view(v)); }
  JsonObject& Add(std::string_view key, const std::string& v) {
    return Add(key, std::string_view(v));
  }
  // `json` must already be valid JSON (an object, an array, a number).
  JsonObject& AddRaw(std::string_view key, std::string_view json);
  bool empty() const { return body_.empty(); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

}  // namespace sluice
