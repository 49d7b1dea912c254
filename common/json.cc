#include "common/json.h"

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
