#include "cache/partition_order.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/units.h"

namespace sluice {
namespace {

class Builder {
 public:
  Builder(uint32_t p, std::vector<uint32_t> order, bool shuffle_buckets, uint64_t seed)
      : p_(p), order_(std::move(order)), trained_(uint64_t{p} * p, false), rng_(seed),
        shuffle_(shuffle_buckets) {}

  // Makes `target` the resident set (swapping partitions in one at a time) and emits a state.
  void MoveTo(const std::vector<uint32_t>& target, PartitionOrder& out) {
    std::vector<uint32_t> next = target;
    if (!resident_.empty()) {
      for (uint32_t x : target) {
        if (std::find(resident_.begin(), resident_.end(), x) == resident_.end()) ++out.swaps;
      }
    }
    resident_ = std::move(next);
    Emit(out);
  }

  const std::vector<uint32_t>& order() const { return order_; }

 private:
  void Emit(PartitionOrder& out) {
    BufferState state;
    state.resident = resident_;
    for (uint32_t a : resident_) {
      for (uint32_t b : resident_) {
        const uint64_t k = uint64_t{a} * p_ + b;
        if (trained_[k]) continue;
        trained_[k] = true;
        state.buckets.emplace_back(a, b);
      }
    }
    if (shuffle_) std::shuffle(state.buckets.begin(), state.buckets.end(), rng_);
    out.states.push_back(std::move(state));
  }

  uint32_t p_;
  std::vector<uint32_t> order_;
  std::vector<bool> trained_;
  std::vector<uint32_t> resident_;
  std::mt19937_64 rng_;
  bool shuffle_;
};

// Deals every bucket again among the states holding both its partitions: spread gives it to
// one of them, chosen uniformly; split gives each of the k a piece (the m-th trains piece
// (m + r) mod k for a seeded r). Then shuffles each state's buckets (with their pieces).
void DealBuckets(uint32_t p, bool split, std::mt19937_64& rng, PartitionOrder& out) {
  std::vector<std::vector<bool>> holds(out.states.size(), std::vector<bool>(p, false));
  for (size_t s = 0; s < out.states.size(); ++s) {
    for (uint32_t x : out.states[s].resident) holds[s][x] = true;
    out.states[s].buckets.clear();
    out.states[s].pieces.clear();
  }
  std::vector<size_t> eligible;
  for (uint32_t a = 0; a < p; ++a) {
    for (uint32_t b = 0; b < p; ++b) {
      eligible.clear();
      for (size_t s = 0; s < out.states.size(); ++s) {
        if (holds[s][a] && holds[s][b]) eligible.push_back(s);
      }
      if (!split) {
        const size_t pick = eligible[std::uniform_int_distribution<size_t>(0, eligible.size() - 1)(rng)];
        out.states[pick].buckets.emplace_back(a, b);
        continue;
      }
      const auto k = static_cast<uint32_t>(eligible.size());
      const uint32_t r = std::uniform_int_distribution<uint32_t>(0, k - 1)(rng);
      for (uint32_t m = 0; m < k; ++m) {
        out.states[eligible[m]].buckets.emplace_back(a, b);
        out.states[eligible[m]].pieces.emplace_back((m + r) % k, k);
      }
    }
  }
  for (BufferState& state : out.states) {
    if (!split) {
      std::shuffle(state.buckets.begin(), state.buckets.end(), rng);
      continue;
    }
    std::vector<size_t> order(state.buckets.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    BufferState shuffled;
    for (size_t i : order) {
      shuffled.buckets.push_back(state.buckets[i]);
      shuffled.pieces.push_back(state.pieces[i]);
    }
    state.buckets = std::move(shuffled.buckets);
    state.pieces = std::move(shuffled.pieces);
  }
}

// The rolling ordering (see the header). Pairs are unordered, the diagonal included; a state
// trains every untrained pair among its partitions.
class Rolling {
 public:
  Rolling(uint32_t p, uint32_t c, std::mt19937_64& rng)
      : p_(p), perm_(p), trained_(uint64_t{p} * p, false), came_in_(p, 0), last_resident_(p, 0) {
    std::iota(perm_.begin(), perm_.end(), 0u);
    std::shuffle(perm_.begin(), perm_.end(), rng);
    resident_.assign(perm_.begin(), perm_.begin() + c);
    left_ = uint64_t{p} * (p + 1) / 2;
  }

  PartitionOrder Make() {
    PartitionOrder out;
    Emit(out);
    while (left_ > 0) {
      if (!SwapOne(out)) BringInUntrainedPair(out);
      Emit(out);
    }
    return out;
  }

 private:
  uint64_t Pair(uint32_t a, uint32_t b) const { return uint64_t{std::min(a, b)} * p_ + std::max(a, b); }
  bool Untrained(uint32_t a, uint32_t b) const { return !trained_[Pair(a, b)]; }
  bool Resident(uint32_t x) const {
    return std::find(resident_.begin(), resident_.end(), x) != resident_.end();
  }
  void Load(size_t slot, uint32_t x, PartitionOrder& out) {
    resident_[slot] = x;
    came_in_[x] = clock_;
    ++out.swaps;
  }

  void Emit(PartitionOrder& out) {
    BufferState state;
    state.resident = resident_;
    for (uint32_t a : resident_) {
      last_resident_[a] = clock_;
      for (uint32_t b : resident_) {
        if (Untrained(a, b)) trained_[Pair(a, b)] = true, --left_;
      }
    }
    out.states.push_back(std::move(state));
    ++clock_;
  }

  // The swap that trains the most new pairs; among those, the one evicting the partition that
  // came in longest ago, then bringing in the one absent longest. False when none trains any.
  // O(p * c): a newcomer's pairs with every resident are counted once, less the evicted one's.
  bool SwapOne(PartitionOrder& out) {
    std::vector<bool> resident(p_, false);
    for (uint32_t r : resident_) resident[r] = true;
    std::vector<uint64_t> with_all(p_, 0);  // untrained pairs with itself and every resident
    for (uint32_t x : perm_) {
      if (resident[x]) continue;
      with_all[x] = Untrained(x, x) ? 1 : 0;
      for (uint32_t r : resident_) with_all[x] += Untrained(x, r);
    }
    uint64_t best_gain = 0, best_age = 0;
    size_t best_slot = 0;
    uint32_t best_in = 0;
    for (size_t slot = 0; slot < resident_.size(); ++slot) {
      const uint32_t leaving = resident_[slot];
      for (uint32_t x : perm_) {
        if (resident[x]) continue;
        const uint64_t gain = with_all[x] - (Untrained(x, leaving) ? 1 : 0);
        const uint64_t age = (clock_ - came_in_[leaving]) * (uint64_t{p_} + 1) + (clock_ - last_resident_[x]);
        if (gain > best_gain || (gain == best_gain && gain > 0 && age > best_age)) {
          best_gain = gain, best_age = age, best_slot = slot, best_in = x;
        }
      }
    }
    if (best_gain == 0) return false;
    Load(best_slot, best_in, out);
    return true;
  }

  // No single swap trains a new pair: the first untrained pair (in the seeded permutation's
  // order) comes in, in place of the partitions that came in longest ago.
  void BringInUntrainedPair(PartitionOrder& out) {
    for (uint32_t a : perm_) {
      for (uint32_t b : perm_) {
        if (!Untrained(a, b)) continue;
        for (uint32_t x : {a, b}) {
          if (Resident(x)) continue;
          size_t oldest = resident_.size();
          for (size_t slot = 0; slot < resident_.size(); ++slot) {
            const uint32_t r = resident_[slot];
            if (r == a || r == b) continue;
            if (oldest == resident_.size() || came_in_[r] < came_in_[resident_[oldest]]) oldest = slot;
          }
          Load(oldest, x, out);
        }
        return;
      }
    }
  }

  uint32_t p_;
  std::vector<uint32_t> perm_;
  std::vector<bool> trained_;
  std::vector<uint64_t> came_in_, last_resident_;  // per partition: clock of the event
  std::vector<uint32_t> resident_;
  uint64_t left_ = 0, clock_ = 1;
};

}  // namespace

uint64_t SwapLowerBound(uint32_t p, uint32_t c) {
  c = std::min(c, p);
  if (c < 2) return 0;
  const uint64_t pairs = uint64_t{p} * (p - 1) / 2 - uint64_t{c} * (c - 1) / 2;
  return (pairs + c - 2) / (c - 1);
}

Result<PartitionOrder> MakePartitionOrder(uint32_t p, uint32_t c, OrderingKind kind,
                                          uint64_t seed) {
  if (p == 0) return InvalidArgument("a partition ordering needs at least one partition");
  if (c < 2 && p > 1) {
    return InvalidArgument("a partition ordering needs at least 2 resident partitions, got " +
                           std::to_string(c));
  }
  c = std::min(c, p);
  std::vector<uint32_t> order(p);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937_64 rng(seed);
  if (kind == OrderingKind::kRolling) {
    PartitionOrder out = Rolling(p, c, rng).Make();
    DealBuckets(p, true, rng, out);
    return out;
  }
  if (kind != OrderingKind::kBeta) std::shuffle(order.begin(), order.end(), rng);
  Builder builder(p, order, kind != OrderingKind::kBeta, seed ^ 0x9e3779b97f4a7c15ull);
  PartitionOrder out;
  // Invariant at the top of each round: resident = fixed group F (c-1 partitions from g) plus
  // the first partition after it.
  uint32_t g = 0;
  builder.MoveTo(std::vector<uint32_t>(order.begin(), order.begin() + c), out);
  while (g + c < p) {  // more than one partition after F: sweep them through the last slot
    std::vector<uint32_t> state(order.begin() + g, order.begin() + g + c - 1);
    state.push_back(0);
    for (uint32_t k = g + c; k < p; ++k) {
      state.back() = order[k];
      builder.MoveTo(state, out);
    }
    // F is paired with everything after it: the next c-1 partitions become F.
    g += c - 1;
    const uint32_t end = std::min(p, g + c);
    builder.MoveTo(std::vector<uint32_t>(order.begin() + g, order.begin() + end), out);
  }
  if (kind == OrderingKind::kSpread || kind == OrderingKind::kSplit) {
    DealBuckets(p, kind == OrderingKind::kSplit, rng, out);
  }
  return out;
}

Result<uint32_t> ResidentPartitions(uint64_t budget_bytes, uint64_t reserved_bytes,
                                    uint64_t partition_bytes, uint32_t p) {
  const uint64_t room = budget_bytes > reserved_bytes ? budget_bytes - reserved_bytes : 0;
  const uint64_t fit = partition_bytes == 0 ? p : room / partition_bytes;
  if (fit < 2 && p > 1) {
    return FailedPrecondition(
        "the memory budget " + FormatBytes(budget_bytes) + " leaves " + FormatBytes(room) +
        " for partitions of " + FormatBytes(partition_bytes) + ": 2 must fit at once (needs " +
        FormatBytes(reserved_bytes + 2 * partition_bytes) + "); raise memory.budget or use more "
        "partitions");
  }
  return static_cast<uint32_t>(std::min<uint64_t>(fit, p));
}

PartitionOrder StartingWith(PartitionOrder order, const std::vector<uint32_t>& recent, uint32_t p) {
  std::vector<uint32_t> appearance;  // order's partitions by first appearance
  std::vector<bool> seen(p, false);
  for (const BufferState& st : order.states) {
    std::vector<uint32_t> r = st.resident;
    std::sort(r.begin(), r.end());
    for (uint32_t x : r) {
      if (!seen[x]) appearance.push_back(x), seen[x] = true;
    }
  }
  std::vector<uint32_t> target;  // recent, then the others ascending
  std::vector<bool> taken(p, false);
  for (uint32_t x : recent) {
    if (x < p && !taken[x]) target.push_back(x), taken[x] = true;
  }
  for (uint32_t x = 0; x < p; ++x) {
    if (!taken[x]) target.push_back(x);
  }
  for (uint32_t x = 0; x < p; ++x) {
    if (!seen[x]) appearance.push_back(x);
  }
  std::vector<uint32_t> to(p);
  for (uint32_t k = 0; k < p; ++k) to[appearance[k]] = target[k];
  for (BufferState& st : order.states) {
    for (uint32_t& x : st.resident) x = to[x];
    for (auto& [a, b] : st.buckets) a = to[a], b = to[b];
  }
  return order;
}

std::vector<uint32_t> RecentFirst(const std::vector<BufferState>& states) {
  std::vector<uint32_t> out;
  for (auto st = states.rbegin(); st != states.rend(); ++st) {
    std::vector<uint32_t> r = st->resident;
    std::sort(r.begin(), r.end());
    for (uint32_t x : r) {
      if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    }
  }
  return out;
}

}  // namespace sluice
