#include "common/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace sluice {
namespace {

struct Unit {
  const char* name;
  uint64_t factor;
};
constexpr Unit kUnits[] = {
    {"", 1},          {"b", 1},           {"kb", 1000},           {"mb", 1000 * 1000},
    {"gb", 1000ULL * 1000 * 1000},        {"tb", 1000ULL * 1000 * 1000 * 1000},
    {"kib", kKiB},    {"mib", kMiB},      {"gib", kGiB},          {"tib", 1024 * kGiB},
    {"k", kKiB},      {"m", kMiB},        {"g", kGiB},            {"t", 1024 * kGiB},
};

}  // namespace

Result<uint64_t> ParseBytes(std::string_view text) {
  auto bad = [&](const char* why) {
    return InvalidArgument("'" + std::string(text) + "' is not a byte size (" + why +
                           "; e.g. 512, 64KiB, 2.5GiB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  double number = 0;
  auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), number);
  if (ec != std::errc() || end == text.data() + i) return bad("no number");
  if (number < 0 || !std::isfinite(number)) return bad("negative or not finite");
  std::string unit;
  for (const char* p = end; p != text.data() + text.size(); ++p) {
    if (std::isspace(static_cast<unsigned char>(*p))) continue;
    unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(*p))));
  }
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      double bytes = number * static_cast<double>(u.factor);
      if (bytes >= 1.8e19) return bad("too large");
      return static_cast<uint64_t>(std::llround(bytes));
    }
  }
  return bad("unknown unit");
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.2f %s", value, kNames[unit]);
  }
  return text;
}

}  // namespace sluice
