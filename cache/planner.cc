#include "cache/planner.h"

#include <algorithm>
#include <numeric>

namespace sluice {

Result<PlannerKind> ParsePlannerKind(const std::string& name) {
  for (PlannerKind k : {PlannerKind::kOracle, PlannerKind::kLru, PlannerKind::kStatic,
                        PlannerKind::kNone}) {
    if (name == PlannerKindName(k)) return k;
  }
  return InvalidArgument("unknown planner '" + name + "' (expected oracle, lru, static or none)");
}

const char* PlannerKindName(PlannerKind kind) {
  switch (kind) {
    case PlannerKind::kOracle: return "oracle";
    case PlannerKind::kLru: return "lru";
    case PlannerKind::kStatic: return "static";
    case PlannerKind::kNone: return "none";
  }
  return "?";
}

HeapPlanner::HeapPlanner(PlannerKind kind, uint32_t num_blocks, const PlannerOptions& options)
    : kind_(kind),
      options_(options),
      last_pos_(num_blocks, kNever),
      next_use_(num_blocks, kNever),
      last_step_(num_blocks, kNever),
      slot_of_(num_blocks, kNone),
      version_(num_blocks, 0),
      dirty_(num_blocks, 0),
      mark_(num_blocks, 0) {
  SLUICE_CHECK(kind == PlannerKind::kOracle || kind == PlannerKind::kLru, "heap planner kind");
  if (kind_ == PlannerKind::kLru) options_.window_steps = 0;
  free_slots_.resize(options.capacity_blocks);
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0u);  // slot 0 is handed out first
}

void HeapPlanner::Append(std::span<const BlockId> blocks, bool writes) {
  const uint64_t step = appended_steps_++;
  step_first_.push_back(base_pos_ + blocks_.size());
  step_writes_.push_back(writes ? 1 : 0);
  for (BlockId b : blocks) {
    const uint64_t p = base_pos_ + blocks_.size();
    blocks_.push_back(b);
    next_pos_.push_back(kNever);
    pos_step_.push_back(step);
    if (last_pos_[b] != kNever && last_pos_[b] >= base_pos_) next_pos_[last_pos_[b] - base_pos_] = p;
    last_pos_[b] = p;
  }
}

bool HeapPlanner::Ready() const {
  if (next_step_ >= appended_steps_) return false;
  if (finished_) return true;
  if (options_.window_steps == kWholeTrace) return false;
  return next_step_ + options_.window_steps < appended_steps_;
}

bool HeapPlanner::Protected(BlockId b, uint64_t t) const {
  return options_.protect_steps > 0 && last_step_[b] != kNever &&
         last_step_[b] + options_.protect_steps >= t;
}

HeapPlanner::Entry HeapPlanner::CurrentEntry(BlockId b, uint64_t t) const {
  if (mark_[b] == t + 1 || Protected(b, t)) return Entry{0, 0, 0, b, version_[b]};
  const uint64_t age = last_step_[b] == kNever ? kNever : kNever - last_step_[b];
  if (kind_ == PlannerKind::kLru) return Entry{1, 0, age, b, version_[b]};
  return Entry{next_use_[b], static_cast<uint8_t>(dirty_[b] ? 0 : 1), age, b, version_[b]};
}

void HeapPlanner::Push(BlockId b, uint64_t t) {
  ++version_[b];
  heap_.push(CurrentEntry(b, t));
}

// Step t + W enters the window: resident blocks whose next use it is stop counting as
// "never used within the window".
void HeapPlanner::EnterWindow(uint64_t t) {
  const uint64_t w = options_.window_steps;
  if (kind_ != PlannerKind::kOracle || w == kWholeTrace || w == 0) return;
  const uint64_t front = t + w;
  if (front >= appended_steps_) return;
  const uint64_t rel = front - base_step_;
  const uint64_t end = rel + 1 < step_first_.size() ? step_first_[rel + 1] : base_pos_ + blocks_.size();
  for (uint64_t p = step_first_[rel]; p < end; ++p) {
    const BlockId b = blocks_[p - base_pos_];
    if (slot_of_[b] != kNone && next_use_[b] == kNever) {
      next_use_[b] = front;
      Push(b, t);
    }
  }
}

// Blocks last used at step t - d - 1 are no longer protected at step t.
void HeapPlanner::ReleaseProtected(uint64_t t) {
  const uint64_t d = options_.protect_steps;
  if (d == 0 || t < d + 1) return;
  const uint64_t s = t - d - 1;
  if (s < base_step_) return;
  const uint64_t rel = s - base_step_;
  for (uint64_t p = step_first_[rel]; p < step_first_[rel + 1]; ++p) {
    const BlockId b = blocks_[p - base_pos_];
    if (slot_of_[b] != kNone && last_step_[b] == s) Push(b, t);
  }
}

Result<uint32_t> HeapPlanner::TakeSlot(uint64_t t, Plan& plan) {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  while (!heap_.empty()) {
    const Entry e = heap_.top();
    if (e.version != version_[e.block] || slot_of_[e.block] == kNone) {
      heap_.pop();
      continue;
    }
    if (mark_[e.block] == t + 1 || Protected(e.block, t)) break;  // only pinned ones remain
    heap_.pop();
    const uint32_t slot = slot_of_[e.block];
    const bool write_back = dirty_[e.block] != 0;
    plan.evictions.push_back(EvictOp{e.block, slot, write_back});
    ++plan.stats.evictions;
    plan.stats.write_backs += write_back ? 1 : 0;
    slot_of_[e.block] = kNone;
    dirty_[e.block] = 0;
    ++version_[e.block];
    --resident_;
    return slot;
  }
  return FailedPrecondition(
      "step " + std::to_string(t) + " needs more blocks than the cache holds (" +
      std::to_string(options_.capacity_blocks) + " slots" +
      (options_.protect_steps ? ", blocks of the last " + std::to_string(options_.protect_steps) +
                                    " steps protected"
                              : std::string()) +
      "): raise the memory budget or shrink the batch");
}

void HeapPlanner::UpdateAfterStep(uint64_t t) {
  const uint64_t rel = t - base_step_;
  const uint64_t first = step_first_[rel];
  const uint64_t end = rel + 1 < step_first_.size() ? step_first_[rel + 1] : base_pos_ + blocks_.size();
  const uint64_t w = options_.window_steps;
  for (uint64_t p = first; p < end; ++p) {
    const BlockId b = blocks_[p - base_pos_];
    if (last_step_[b] == t) continue;  // a repeat within the step
    last_step_[b] = t;
    if (step_writes_[rel]) dirty_[b] = 1;
    // The next use in a later step (skip repeats within this step).
    uint64_t np = next_pos_[p - base_pos_];
    while (np != kNever && StepOf(np) == t) np = next_pos_[np - base_pos_];
    uint64_t next = np == kNever ? kNever : StepOf(np);
    if (w != kWholeTrace && next != kNever && next > t + w) next = kNever;
    next_use_[b] = next;
  }
  for (uint64_t p = first; p < end; ++p) {
    const BlockId b = blocks_[p - base_pos_];
    if (mark_[b] == t + 1) {
      mark_[b] = 0;  // unpinned: push its real (or protected) entry once
      Push(b, t + 1);
    }
  }
}

Status HeapPlanner::PlanNext(Plan& plan) {
  SLUICE_CHECK(Ready(), "step %llu planned before its window was appended",
               static_cast<unsigned long long>(next_step_));
  const uint64_t t = next_step_;
  EnterWindow(t);
  ReleaseProtected(t);
  const uint64_t rel = t - base_step_;
  const uint64_t first = step_first_[rel];
  const uint64_t end = rel + 1 < step_first_.size() ? step_first_[rel + 1] : base_pos_ + blocks_.size();
  misses_.clear();
  for (uint64_t p = first; p < end; ++p) {
    const BlockId b = blocks_[p - base_pos_];
    if (mark_[b] == t + 1) continue;
    mark_[b] = t + 1;
    ++plan.stats.accesses;
    if (slot_of_[b] == kNone) {
      misses_.push_back(b);
    } else {
      ++version_[b];  // pinned for this step: its old heap entries go stale
    }
  }
  for (BlockId b : misses_) {
    SLUICE_ASSIGN_OR_RETURN(uint32_t slot, TakeSlot(t, plan));
    slot_of_[b] = slot;
    ++resident_;
    ++version_[b];
    plan.loads.push_back(LoadOp{b, slot});
    ++plan.stats.loads;
  }
  UpdateAfterStep(t);
  plan.load_offsets.push_back(plan.loads.size());
  plan.evict_offsets.push_back(plan.evictions.size());
  ++plan.stats.steps;
  ++next_step_;
  CompactIfNeeded(next_step_);
  TrimConsumed();
  return Status::Ok();
}

void HeapPlanner::CompactIfNeeded(uint64_t t) {
  if (heap_.size() <= 4 * uint64_t{resident_} + 4096) return;
  std::vector<Entry> live;
  live.reserve(resident_);
  while (!heap_.empty()) {
    const Entry e = heap_.top();
    heap_.pop();
    if (e.version == version_[e.block] && slot_of_[e.block] != kNone) live.push_back(e);
  }
  (void)t;
  heap_ = std::priority_queue<Entry>(std::less<Entry>(), std::move(live));
}

// Drops appended steps that are planned and no longer needed (protection looks d+1 back).
void HeapPlanner::TrimConsumed() {
  const uint64_t keep_from = next_step_ > options_.protect_steps + 1
                                 ? next_step_ - options_.protect_steps - 1
                                 : 0;
  const uint64_t drop_steps = keep_from > base_step_ ? keep_from - base_step_ : 0;
  if (drop_steps < 1024 || drop_steps * 2 < step_first_.size()) return;
  const uint64_t drop_pos =
      (drop_steps < step_first_.size() ? step_first_[drop_steps] : base_pos_ + blocks_.size()) -
      base_pos_;
  blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<int64_t>(drop_pos));
  next_pos_.erase(next_pos_.begin(), next_pos_.begin() + static_cast<int64_t>(drop_pos));
  pos_step_.erase(pos_step_.begin(), pos_step_.begin() + static_cast<int64_t>(drop_pos));
  step_first_.erase(step_first_.begin(), step_first_.begin() + static_cast<int64_t>(drop_steps));
  step_writes_.erase(step_writes_.begin(), step_writes_.begin() + static_cast<int64_t>(drop_steps));
  base_pos_ += drop_pos;
  base_step_ += drop_steps;
}

}  // namespace sluice
