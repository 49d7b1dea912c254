#include "common/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sluice {

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

size_t InvalidUtf8At(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned c = b[i];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range (narrower after E0, ED, F0, F4)
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + n >= s.size()) return i;  // truncated at the end
    for (size_t k = 1; k <= n; ++k) {
      const unsigned x = b[i + k];
      if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return i;
    }
    i += n + 1;
  }
  return std::string_view::npos;
}

bool IsPlainKey(std::string_view s) {
  if (s.size() > 256) return false;
  return std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

std::string Utf8Problem(std::string_view s, const std::string& what) {
  const size_t at = InvalidUtf8At(s);
  if (at == std::string_view::npos) return "";
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(s[at]));
  const size_t line = 1 + static_cast<size_t>(std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  return what + ": not UTF-8 text (byte " + byte + " at line " + std::to_string(line) + ")";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

JsonObject& JsonObject::AddRaw(std::string_view key, std::string_view json) {
  if (!body_.empty()) body_ += ", ";
  body_ += JsonString(key);
  body_ += ": ";
  body_ += json;
  return *this;
}

JsonObject& JsonObject::Add(std::string_view key, double v) { return AddRaw(key, JsonNumber(v)); }
JsonObject& JsonObject::Add(std::string_view key, uint64_t v) {
  return AddRaw(key, std::to_string(v));
}
JsonObject& JsonObject::Add(std::string_view key, int64_t v) {
  return AddRaw(key, std::to_string(v));
}
JsonObject& JsonObject::Add(std::string_view key, bool v) { return AddRaw(key, v ? "true" : "false"); }
JsonObject& JsonObject::Add(std::string_view key, std::string_view v) {
  return AddRaw(key, JsonString(v));
}

}  // namespace sluice
