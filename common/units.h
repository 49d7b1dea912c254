#pragma once
// Byte sizes as users write them ("512", "64KiB", "2.5GiB", "1GB") and as we print them.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// Parses a non-negative byte count: a number (fractions allowed) with an optional unit B, KB, MB,
// GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive, spaces allowed
// between number and unit. Errors name the text and what was expected.
Result<uint64_t> ParseBytes(std::string_view text);

// "0 B", "512 B", "4.0 KiB", "2.50 GiB".
std::string FormatBytes(uint64_t bytes);

// Rounds up/down to a multiple of `alignment` (a power of two).
constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}
constexpr uint64_t AlignDown(uint64_t value, uint64_t alignment) {
  return value & ~(alignment - 1);
}
constexpr bool IsPowerOfTwo(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

}  // namespace sluice
