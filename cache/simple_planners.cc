// The planners without a heap: static (a pinned hot set plus read-through reserve slots) and
// none (read-through), and MakePlan, which runs any planner over a whole known trace.

#include <algorithm>
#include <numeric>

#include "cache/planner.h"

namespace sluice {
namespace {

constexpr uint32_t kNoSlot = ~uint32_t{0};

// Distinct blocks of step t, in first-occurrence order.
void Distinct(const AccessTrace& trace, uint64_t t, std::vector<uint64_t>& stamp,
              std::vector<BlockId>& out) {
  out.clear();
  for (BlockId b : trace.step(t)) {
    if (stamp[b] == t + 1) continue;
    stamp[b] = t + 1;
    out.push_back(b);
  }
}

uint32_t MaxStepBlocks(const AccessTrace& trace) {
  std::vector<uint64_t> stamp(trace.num_blocks(), 0);
  std::vector<BlockId> distinct;
  size_t most = 0;
  for (uint64_t t = 0; t < trace.num_steps(); ++t) {
    Distinct(trace, t, stamp, distinct);
    most = std::max(most, distinct.size());
  }
  return static_cast<uint32_t>(most);
}

void EndStep(Plan& plan) {
  plan.load_offsets.push_back(plan.loads.size());
  plan.evict_offsets.push_back(plan.evictions.size());
  ++plan.stats.steps;
}

// A set of resident blocks in slots, evicted and loaded step by step.
struct Slots {
  std::vector<uint32_t> slot_of;
  std::vector<uint8_t> dirty;
  std::vector<uint32_t> free;
  std::vector<BlockId> resident;  // the read-through blocks resident now

  void Evict(BlockId b, Plan& plan) {
    plan.evictions.push_back(EvictOp{b, slot_of[b], dirty[b] != 0});
    ++plan.stats.evictions;
    plan.stats.write_backs += dirty[b];
    free.push_back(slot_of[b]);
    slot_of[b] = kNoSlot;
    dirty[b] = 0;
  }
  void Load(BlockId b, Plan& plan) {
    slot_of[b] = free.back();
    free.pop_back();
    plan.loads.push_back(LoadOp{b, slot_of[b]});
    ++plan.stats.loads;
  }
};

Status CheckFits(const AccessTrace& trace, uint32_t capacity, uint32_t most) {
  if (most <= capacity) return Status::Ok();
  return FailedPrecondition("a step of the trace needs " + std::to_string(most) +
                            " blocks but the cache holds " + std::to_string(capacity) +
                            " (of " + std::to_string(trace.num_blocks()) + " blocks)");
}

std::vector<bool> HotSet(const AccessTrace& trace, const PlannerOptions& options, uint32_t hot) {
  std::vector<double> score = options.static_scores;
  if (score.empty()) {  // access frequency: steps that use the block
    score.assign(trace.num_blocks(), 0);
    std::vector<uint64_t> stamp(trace.num_blocks(), 0);
    std::vector<BlockId> distinct;
    for (uint64_t t = 0; t < trace.num_steps(); ++t) {
      Distinct(trace, t, stamp, distinct);
      for (BlockId b : distinct) score[b] += 1;
    }
  }
  std::vector<BlockId> order(trace.num_blocks());
  std::iota(order.begin(), order.end(), 0u);
  hot = std::min<uint32_t>(hot, trace.num_blocks());
  std::partial_sort(order.begin(), order.begin() + hot, order.end(), [&](BlockId a, BlockId b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
  std::vector<bool> is_hot(trace.num_blocks(), false);
  for (uint32_t i = 0; i < hot; ++i) is_hot[order[i]] = true;
  return is_hot;
}

Result<Plan> PlanStaticOrNone(const AccessTrace& trace, PlannerKind kind,
                              const PlannerOptions& options) {
  if (options.protect_steps != 0) {
    return InvalidArgument(std::string(PlannerKindName(kind)) +
                           " planner does not support protect_steps");
  }
  const uint32_t capacity = options.capacity_blocks;
  const uint32_t most = MaxStepBlocks(trace);
  SLUICE_RETURN_IF_ERROR(CheckFits(trace, capacity, most));
  const uint32_t hot = kind == PlannerKind::kStatic ? capacity - most : 0;
  const std::vector<bool> is_hot = HotSet(trace, options, hot);
  Plan plan;
  Slots slots{std::vector<uint32_t>(trace.num_blocks(), kNoSlot),
              std::vector<uint8_t>(trace.num_blocks(), 0), {}, {}};
  for (uint32_t s = capacity; s-- > 0;) slots.free.push_back(s);
  std::vector<uint64_t> stamp(trace.num_blocks(), 0);
  std::vector<BlockId> distinct, kept;
  for (uint64_t t = 0; t < trace.num_steps(); ++t) {
    Distinct(trace, t, stamp, distinct);
    plan.stats.accesses += distinct.size();
    // Read-through blocks of the previous step leave now, unless static keeps a repeat.
    kept.clear();
    for (BlockId b : slots.resident) {
      if (kind == PlannerKind::kStatic && stamp[b] == t + 1) {
        kept.push_back(b);
      } else {
        slots.Evict(b, plan);
      }
    }
    slots.resident.swap(kept);
    for (BlockId b : distinct) {
      if (slots.slot_of[b] != kNoSlot) continue;
      slots.Load(b, plan);
      if (!is_hot[b]) slots.resident.push_back(b);
    }
    if (trace.writes(t)) {
      for (BlockId b : distinct) slots.dirty[b] = 1;
    }
    EndStep(plan);
  }
  return plan;
}

}  // namespace

Result<Plan> MakePlan(const AccessTrace& trace, PlannerKind kind, const PlannerOptions& options) {
  if (options.capacity_blocks == 0) return InvalidArgument("a cache needs at least one slot");
  if (kind == PlannerKind::kStatic || kind == PlannerKind::kNone) {
    return PlanStaticOrNone(trace, kind, options);
  }
  HeapPlanner planner(kind, trace.num_blocks(), options);
  for (uint64_t t = 0; t < trace.num_steps(); ++t) planner.Append(trace.step(t), trace.writes(t));
  planner.Finish();
  Plan plan;
  plan.loads.reserve(trace.num_accesses() / 4);
  while (planner.Ready()) SLUICE_RETURN_IF_ERROR(planner.PlanNext(plan));
  return plan;
}

}  // namespace sluice
