#pragma once
// RadixSortBy: a stable LSD radix sort of 64-bit words by their high part (word >> shift), for
// the io thread's per-step sorts of row ids (hundreds of thousands a step): 2-3 counting
// passes over the bits the largest key uses instead of a comparison sort's ~18 per element.
// With the low bits (below shift) ascending in input order among equal keys (an index pushed
// in order), the result is the words in ascending order, exactly as std::sort gives.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace sluice {

// `scratch` is reused between calls (it ends up the size of v); v holds fewer than 2^32 words.
inline void RadixSortBy(std::vector<uint64_t>& v, std::vector<uint64_t>& scratch, unsigned shift = 0) {
  if (v.size() < 512) {  // a comparison sort wins on small inputs
    std::stable_sort(v.begin(), v.end(), [shift](uint64_t a, uint64_t b) { return (a >> shift) < (b >> shift); });
    return;
  }
  uint64_t bits_seen = 0;
  for (const uint64_t w : v) bits_seen |= w >> shift;
  if (bits_seen == 0) return;  // one key: stable means unchanged
  const auto bits = static_cast<unsigned>(64 - __builtin_clzll(bits_seen));
  constexpr unsigned kMaxDigit = 11;  // 2,048 counters: 8 KiB, within L1
  const unsigned passes = (bits + kMaxDigit - 1) / kMaxDigit;
  const unsigned digit = (bits + passes - 1) / passes;
  const uint64_t mask = (uint64_t{1} << digit) - 1;
  scratch.resize(v.size());
  std::array<uint32_t, size_t{1} << kMaxDigit> count;
  for (unsigned p = 0; p < passes; ++p) {
    const unsigned s = shift + p * digit;
    std::fill(count.begin(), count.begin() + static_cast<std::ptrdiff_t>(mask + 1), 0u);
    for (const uint64_t w : v) ++count[(w >> s) & mask];
    uint32_t sum = 0;
    for (uint64_t d = 0; d <= mask; ++d) {
      const uint32_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (const uint64_t w : v) scratch[count[(w >> s) & mask]++] = w;
    v.swap(scratch);
  }
}

}  // namespace sluice
