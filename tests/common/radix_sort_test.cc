// RadixSortBy against std::sort: whole words (shift 0) and index-tagged keys (key << 32 | index
// pushed in order, shift 32, the spill's loads and region passes), over sizes either side of
// the comparison-sort cutoff and key widths that take 1, 2 and 3 digit passes.

#include "common/radix_sort.h"

#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(RadixSort, SortsWholeWordsAsStdSort) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> scratch;
  for (size_t n : {0, 1, 100, 511, 512, 5000, 200000}) {
    for (unsigned bits : {1u, 10u, 11u, 22u, 24u, 33u, 64u}) {
      std::vector<uint64_t> v(n);
      for (uint64_t& w : v) w = bits == 64 ? rng() : rng() & ((uint64_t{1} << bits) - 1);
      std::vector<uint64_t> want = v;
      std::sort(want.begin(), want.end());
      RadixSortBy(v, scratch);
      ASSERT_EQ(v, want) << n << " words of " << bits << " bits";
    }
  }
}

TEST(RadixSort, KeysWithTheirIndexComeOutAsStdSortOrdersThem) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> scratch;
  for (size_t n : {300, 70000}) {
    for (uint64_t keys : {uint64_t{1}, uint64_t{50}, uint64_t{10'000'000}}) {
      std::vector<uint64_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = (rng() % keys) << 32 | i;  // many equal keys
      std::vector<uint64_t> want = v;
      std::sort(want.begin(), want.end());
      RadixSortBy(v, scratch, 32);
      ASSERT_EQ(v, want) << n << " words, keys below " << keys;
    }
  }
}

}  // namespace
}  // namespace sluice
