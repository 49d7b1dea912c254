#pragma once
// Edge-bucket orderings for link prediction with p partitions of which c fit in memory.
// Every bucket (i, j) must be trained while partitions i and j are both resident; the cost is
// the number of partition swaps (loads after the initial fill).
//
//   beta:       Marius's BETA idea: hold c-1 partitions fixed and sweep every later partition
//               through the last slot (each swap covers c-1 new partition pairs), then move on
//               to the next c-1 partitions.
//   randomized: the same over a seeded random permutation of the partitions, with the
//               buckets of each buffer state shuffled.
//   split:      the randomized ordering's buffer states; every bucket's edges are cut into
//               as many pieces as there are states holding both its partitions, one piece
//               per such state (a seeded rotation says which). Every state trains a share of
//               every bucket it can, so consecutive states mix the same buckets and no state
//               is a block of correlated edges. Same swaps.
//   spread:     the randomized ordering's buffer states, but each bucket is trained in a
//               seeded random one of the states that hold both its partitions rather than in
//               the first. Same swaps; a bucket's edges meet a different set of resident
//               partitions (so of negatives) from epoch to epoch, and the states' sizes even
//               out (the first state no longer takes every bucket among its c partitions).
//   rolling:    one partition swapped per state, chosen greedily: the swap that brings the
//               most untrained partition pairs together, the partition that came in longest
//               ago leaving and the one absent longest coming in on ties (when no single
//               swap trains a new pair, the first untrained pair comes in). Buckets dealt as
//               split. The orderings above hold c-1 partitions fixed while the rest sweep
//               past: those c-1 train all their buckets with later partitions in one run of
//               states and are absent for the rest of the epoch; rolling brings every
//               partition back throughout the epoch, the nearest a buffer of c partitions
//               gets to the global shuffle's mixing. It costs swaps above the lower bound
//               (16 partitions, 4 resident: 44-50 an epoch against 38; about 2x at 32 resident and more) and closes most of
//               the quality gap (docs/link_prediction.md).
//
// Lower bound on swaps (a counting argument, as in the Marius paper, Mohoney et al., OSDI
// 2021): there are p(p-1)/2 unordered pairs of distinct partitions to bring together; the
// initial fill brings c(c-1)/2; each swap loads one partition, which meets at most the c-1
// others resident, so swaps >= ceil((p(p-1)/2 - c(c-1)/2) / (c-1)).

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace sluice {

struct BufferState {
  std::vector<uint32_t> resident;                       // c partitions (fewer if p < c)
  std::vector<std::pair<uint32_t, uint32_t>> buckets;   // (src, dst) trained in this state
  // split: per bucket, the piece of its edges trained here, as (piece, pieces): edges
  // [n * piece / pieces, n * (piece + 1) / pieces) of the bucket's n. Empty otherwise (whole).
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
};

struct PartitionOrder {
  std::vector<BufferState> states;
  uint64_t swaps = 0;  // partition loads after the initial fill
};

enum class OrderingKind { kBeta, kRandomized, kSpread, kSplit, kRolling };
template <>
struct EnumNames<OrderingKind> {
  static constexpr std::pair<OrderingKind, const char*> kNames[] = {
      {OrderingKind::kBeta, "beta"}, {OrderingKind::kRandomized, "randomized"},
      {OrderingKind::kSpread, "spread"}, {OrderingKind::kSplit, "split"},
      {OrderingKind::kRolling, "rolling"}};
};

// Requires 1 <= p and 2 <= c (c > p is clamped to p).
Result<PartitionOrder> MakePartitionOrder(uint32_t p, uint32_t c, OrderingKind kind,
                                          uint64_t seed);
uint64_t SwapLowerBound(uint32_t p, uint32_t c);

// `order` over p partitions with its partitions renamed so that it begins with the partitions a
// previous epoch ended with: `recent` lists partitions, most recently used first (the previous
// epoch's last state's, then the state's before it that are new, ...). The partitions in the
// order of their first appearance in `order` (a state's in ascending order) become recent's in
// turn, then the others in ascending order; so the first state holds the start of `recent` and
// the next states' newcomers are the partitions a cache is likeliest to hold still. A renaming
// keeps every property of the ordering (each bucket trained once, the same swaps).
PartitionOrder StartingWith(PartitionOrder order, const std::vector<uint32_t>& recent, uint32_t p);
// Partitions of `states` by recency of their last use, most recent first (a state's ascending).
std::vector<uint32_t> RecentFirst(const std::vector<BufferState>& states);

// How many partitions fit: (budget - reserved) / partition_bytes, at most p. Fails, saying
// what would be needed, when fewer than 2 fit (a bucket needs two partitions at once).
Result<uint32_t> ResidentPartitions(uint64_t budget_bytes, uint64_t reserved_bytes,
                                    uint64_t partition_bytes, uint32_t p);

}  // namespace sluice
