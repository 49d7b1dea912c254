#include "cache/planner.h"

#include <algorithm>
#include <numeric>

namespace sluice {

const char* PlannerKindName(PlannerKind kind) { return EnumName(kind); }

HeapPlanner::HeapPlanner(PlannerKind kind, uint32_t num_blocks, const PlannerOptions& options)
    : kind_(kind),
      options_(options),
      st_(num_blocks) {
  SLUICE_CHECK(kind == PlannerKind::kOracle || kind == PlannerKind::kLru, "heap planner kind");
  if (kind_ == PlannerKind::kLru) options_.window_steps = 0;
  free_slots_.resize(options.capacity_blocks);
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0u);  // slot 0 is handed out first
}

void HeapPlanner::Adopt(BlockId b, uint32_t slot, bool dirty) {
  SLUICE_CHECK(appended_steps_ == 0, "Adopt after steps were appended");
  auto free = std::find(free_slots_.begin(), free_slots_.end(), slot);
  SLUICE_CHECK(free != free_slots_.end() && st_[b].slot_of == kNone, "adopting block %u into slot %u twice", b, slot);
  free_slots_.erase(free);
  st_[b].slot_of = slot;
  st_[b].dirty = dirty ? 1 : 0;
  ++resident_;
  Push(b, 0);
}

void HeapPlanner::Append(std::span<const BlockId> blocks, bool writes) {
  const uint64_t step = appended_steps_++;
  step_first_.push_back(base_pos_ + blocks_.size());
  step_writes_.push_back(writes ? 1 : 0);
  // Only a block's first occurrence in a step is kept: the planner works on distinct sets.
  for (BlockId b : blocks) {
    BlockState& s = st_[b];
    if (s.last_pos != kNever && s.last_append_step == step) continue;
    const uint64_t p = base_pos_ + blocks_.size();
    blocks_.push_back(b);
    next_use_of_.push_back(kNever);
    if (s.last_pos != kNever && s.last_pos >= base_pos_) next_use_of_[s.last_pos - base_pos_] = step;
    // An adopted block not planned yet: its first use in the window is its next use (later
    // steps reach it through EnterWindow).
    const uint64_t w = options_.window_steps;
    if (s.last_pos == kNever && s.slot_of != kNone && s.last_step == kNever &&
        (w == kWholeTrace || step <= next_step_ + w)) {
      s.next_use = step;
      Push(b, next_step_);
    }
    s.last_pos = p;
    s.last_append_step = step;
  }
}

bool HeapPlanner::Ready() const {
  if (next_step_ >= appended_steps_) return false;
  if (finished_) return true;
  if (options_.window_steps == kWholeTrace) return false;
  return next_step_ + options_.window_steps < appended_steps_;
}

bool HeapPlanner::Protected(BlockId b, uint64_t t) const {
  return options_.protect_steps > 0 && st_[b].last_step != kNever &&
         st_[b].last_step + options_.protect_steps >= t;
}

// Layout, high to low: next use (40 bits; kNever saturates), clean (1), fewer past uses (23),
// older last use (32, modulo 2^32 steps), block (32).
HeapPlanner::Entry HeapPlanner::MakeEntry(uint64_t next_use, bool clean, uint64_t uses,
                                          uint64_t last_step, BlockId b, uint32_t version) {
  constexpr uint64_t kStepMask = (uint64_t{1} << 40) - 1;
  constexpr uint64_t kUsesMask = (uint64_t{1} << 23) - 1;
  const uint64_t next = next_use == kNever ? kStepMask : std::min(next_use, kStepMask - 1);
  const uint64_t rare = kUsesMask - std::min(uses, kUsesMask);
  const uint64_t old = 0xffffffffu - (last_step & 0xffffffffu);
  const uint64_t hi = (next << 24) | (uint64_t{clean} << 23) | rare;
  const uint64_t lo = (old << 32) | b;
  return Entry{(static_cast<Key>(hi) << 64) | lo, version};
}

HeapPlanner::Entry HeapPlanner::CurrentEntry(BlockId b, uint64_t t) const {
  // Pinned (in the current step) and protected blocks sort below every candidate.
  const BlockState& s = st_[b];
  if (s.mark == t + 1 || Protected(b, t)) return Entry{b, s.version};
  const uint64_t last = s.last_step == kNever ? 0 : s.last_step;
  if (kind_ == PlannerKind::kLru) return MakeEntry(1, false, 0, last, b, s.version);
  return MakeEntry(s.next_use, s.dirty == 0, s.uses, last, b, s.version);
}

void HeapPlanner::Push(BlockId b, uint64_t t) {
  ++st_[b].version;
  heap_.push_back(CurrentEntry(b, t));
  std::push_heap(heap_.begin(), heap_.end());
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
    if (st_[b].slot_of != kNone && st_[b].next_use == kNever) {
      st_[b].next_use = front;
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
    if (st_[b].slot_of != kNone && st_[b].last_step == s) Push(b, t);
  }
}

Result<uint32_t> HeapPlanner::TakeSlot(uint64_t t, Plan& plan) {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  while (!heap_.empty()) {
    const Entry e = heap_.front();
    const BlockId b = e.block();
    if (e.version != st_[b].version || st_[b].slot_of == kNone) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.pop_back();
      continue;
    }
    if (st_[b].mark == t + 1 || Protected(b, t)) break;  // only pinned ones remain
    std::pop_heap(heap_.begin(), heap_.end());
    heap_.pop_back();
    const uint32_t slot = st_[b].slot_of;
    const bool write_back = st_[b].dirty != 0;
    plan.evictions.push_back(EvictOp{b, slot, write_back});
    ++plan.stats.evictions;
    plan.stats.write_backs += write_back ? 1 : 0;
    st_[b].slot_of = kNone;
    st_[b].dirty = 0;
    ++st_[b].version;
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
    BlockState& s = st_[blocks_[p - base_pos_]];
    s.last_step = t;
    ++s.uses;
    if (step_writes_[rel]) s.dirty = 1;
    uint64_t next = next_use_of_[p - base_pos_];
    if (w != kWholeTrace && next != kNever && next > t + w) next = kNever;
    s.next_use = next;
    s.mark = 0;  // unpinned: push its real (or protected) entry
    Push(blocks_[p - base_pos_], t + 1);
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
    st_[b].mark = t + 1;
    ++plan.stats.accesses;
    if (st_[b].slot_of == kNone) {
      misses_.push_back(b);
    } else {
      ++st_[b].version;  // pinned for this step: its old heap entries go stale
    }
  }
  for (BlockId b : misses_) {
    SLUICE_ASSIGN_OR_RETURN(uint32_t slot, TakeSlot(t, plan));
    st_[b].slot_of = slot;
    ++resident_;
    ++st_[b].version;
    plan.loads.push_back(LoadOp{b, slot});
    ++plan.stats.loads;
  }
  UpdateAfterStep(t);
  plan.load_offsets.push_back(plan.loads.size());
  plan.evict_offsets.push_back(plan.evictions.size());
  ++plan.stats.steps;
  ++next_step_;
  CompactIfNeeded();
  TrimConsumed();
  return Status::Ok();
}

// Drops stale entries once they outnumber live ones 3 to 1: O(n), amortised O(1) per push.
void HeapPlanner::CompactIfNeeded() {
  if (heap_.size() <= 4 * uint64_t{resident_} + 4096) return;
  auto stale = [&](const Entry& e) {
    return e.version != st_[e.block()].version || st_[e.block()].slot_of == kNone;
  };
  heap_.erase(std::remove_if(heap_.begin(), heap_.end(), stale), heap_.end());
  std::make_heap(heap_.begin(), heap_.end());
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
  next_use_of_.erase(next_use_of_.begin(), next_use_of_.begin() + static_cast<int64_t>(drop_pos));
  step_first_.erase(step_first_.begin(), step_first_.begin() + static_cast<int64_t>(drop_steps));
  step_writes_.erase(step_writes_.begin(), step_writes_.begin() + static_cast<int64_t>(drop_steps));
  base_pos_ += drop_pos;
  base_step_ += drop_steps;
}

}  // namespace sluice
