#pragma once
// Batch orders, enumerable ahead so the planner can look W steps into the future: a seeded
// per-epoch shuffle of training items (nodes or edges), and the grouped order a partition
// schedule needs (each group's items shuffled within the group, groups in schedule order).

#include <cstdint>
#include <span>
#include <vector>

namespace sluice {

// A permutation of [0, n) that depends only on (seed, epoch).
std::vector<int64_t> EpochPermutation(uint64_t n, uint64_t seed, uint64_t epoch);

// Items of each group (e.g. the edge ranges of the buckets trained in one buffer state),
// shuffled within the group, groups kept in order. group_ranges[g] lists [begin, end) ranges.
std::vector<int64_t> GroupedOrder(const std::vector<std::vector<std::pair<int64_t, int64_t>>>& groups,
                                  uint64_t seed, uint64_t epoch);

// Batch b of an order: items [b * batch, min((b + 1) * batch, n)).
inline std::span<const int64_t> Batch(const std::vector<int64_t>& order, uint64_t batch_size,
                                      uint64_t b) {
  const uint64_t begin = std::min<uint64_t>(b * batch_size, order.size());
  const uint64_t end = std::min<uint64_t>(begin + batch_size, order.size());
  return {order.data() + begin, order.data() + end};
}

}  // namespace sluice
