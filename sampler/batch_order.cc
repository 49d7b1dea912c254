#include "sampler/batch_order.h"

#include <numeric>
#include <utility>

#include "sampler/random.h"

namespace sluice {
namespace {

// Fisher-Yates with counter-based draws keyed on (seed, epoch, salt).
void Shuffle(std::span<int64_t> items, const Key& key) {
  for (uint64_t i = items.size(); i > 1; --i) {
    std::swap(items[i - 1], items[key.Below(i, i)]);
  }
}

}  // namespace

std::vector<int64_t> EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  Shuffle(order, Key(seed).With(epoch).With(0x6f72646572));  // "order"
  return order;
}

std::vector<int64_t> GroupedOrder(
    const std::vector<std::vector<std::pair<int64_t, int64_t>>>& groups, uint64_t seed,
    uint64_t epoch) {
  std::vector<int64_t> order;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t first = order.size();
    for (auto [begin, end] : groups[g]) {
      for (int64_t i = begin; i < end; ++i) order.push_back(i);
    }
    Shuffle(std::span<int64_t>(order.data() + first, order.size() - first),
            Key(seed).With(epoch).With(g));
  }
  return order;
}

}  // namespace sluice
