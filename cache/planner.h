#pragma once
// Planners turn the block sets of the coming steps into per-step plans: which blocks to load
// into which slots, and which to evict (writing dirty ones back). A step needs its whole block
// set resident at once; blocks of the last `protect_steps` steps are never evicted either, so
// io for a few steps may run ahead of compute without destroying blocks still in use.
//
//   oracle: evict the resident block whose next use is farthest, looking at most `window`
//           steps ahead; blocks not used within the window go first, clean before dirty, then
//           the least often used so far, then the least recently used. With a window covering
//           the trace this is Belady's MIN.
//   lru:    evict the least recently used block (no lookahead).
//   static: pin the hottest blocks (by access frequency in the trace, or given scores, as
//           Quiver and PaGraph pin by degree) in all slots but those the largest step needs;
//           other blocks are read through those reserve slots for one step.
//   none:   read-through: every step loads all of its blocks and evicts them after.
//
// The oracle is incremental: OraclePlanner::Append feeds steps as the sampler produces them,
// and PlanNext plans step t once steps up to t + window are appended (or Finish was called).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/trace.h"
#include "common/config.h"
#include "common/status.h"

namespace sluice {

// kAuto is a config value only (recommendation): resolved to oracle or LRU at start-up
// (prefetch/lookahead_choice.h); no planner is built of that kind.
enum class PlannerKind { kOracle, kLru, kStatic, kNone, kAuto };
template <>
struct EnumNames<PlannerKind> {
  static constexpr std::pair<PlannerKind, const char*> kNames[] = {{PlannerKind::kOracle, "oracle"},
                                                                  {PlannerKind::kLru, "lru"},
                                                                  {PlannerKind::kStatic, "static"},
                                                                  {PlannerKind::kNone, "none"},
                                                                  {PlannerKind::kAuto, "auto"}};
};
const char* PlannerKindName(PlannerKind kind);

inline constexpr uint64_t kWholeTrace = ~uint64_t{0};

struct PlannerOptions {
  uint32_t capacity_blocks = 0;     // slots in the arena
  uint64_t window_steps = kWholeTrace;  // oracle lookahead
  uint32_t protect_steps = 0;       // blocks of the last d steps stay resident (io run-ahead)
  std::vector<double> static_scores;  // static: hotness per block; empty = trace frequency
};

struct LoadOp {
  BlockId block;
  uint32_t slot;
};
struct EvictOp {
  BlockId block;
  uint32_t slot;
  bool write_back;  // the block was written since it was loaded
};

// A pass's first steps, whose loads the summary reports per epoch (a cache that carries over an
// epoch boundary loads few there; one that starts empty reloads its working set).
inline constexpr uint64_t kPassHeadSteps = 100;

struct PlanStats {
  uint64_t steps = 0;
  uint64_t accesses = 0;       // distinct blocks per step, summed
  uint64_t loads = 0;
  uint64_t evictions = 0;
  uint64_t write_backs = 0;
};

// Per-step loads and evictions in CSR form. A step's evictions free the slots its loads use.
struct Plan {
  std::vector<uint64_t> load_offsets{0};
  std::vector<LoadOp> loads;
  std::vector<uint64_t> evict_offsets{0};
  std::vector<EvictOp> evictions;
  PlanStats stats;

  uint64_t num_steps() const { return load_offsets.size() - 1; }
  std::span<const LoadOp> step_loads(uint64_t t) const {
    return {loads.data() + load_offsets[t], loads.data() + load_offsets[t + 1]};
  }
  std::span<const EvictOp> step_evictions(uint64_t t) const {
    return {evictions.data() + evict_offsets[t], evictions.data() + evict_offsets[t + 1]};
  }
};

// Plans a whole known trace. Fails (naming the step) when a step needs more blocks than fit.
Result<Plan> MakePlan(const AccessTrace& trace, PlannerKind kind, const PlannerOptions& options);

// The oracle (and LRU) planner over a growing trace.
class HeapPlanner {
 public:
  HeapPlanner(PlannerKind kind, uint32_t num_blocks, const PlannerOptions& options);

  // Before the first Append: block b is resident already, in `slot` (dirty: written since it
  // was last stored), as the previous pass left the cache. It is a hit when a step uses it and
  // an eviction candidate like any other (its next use is its first use in the window).
  void Adopt(BlockId b, uint32_t slot, bool dirty);
  // Appends the next step's blocks (what the sampler produced).
  void Append(std::span<const BlockId> blocks, bool writes);
  // No more steps will be appended: the window may look past the end.
  void Finish() { finished_ = true; }
  // True when the next step can be planned: its window is appended (or the trace finished).
  bool Ready() const;
  // Plans the next step, appending its ops to `plan`.
  Status PlanNext(Plan& plan);
  uint64_t next_step() const { return next_step_; }

 private:
  static constexpr uint64_t kNever = ~uint64_t{0};
  static constexpr uint32_t kNone = ~uint32_t{0};
  // A heap entry: the eviction key packed into 128 bits so comparisons are one instruction
  // pair. Larger = better victim: next use (kNever = not within the window), then clean before
  // dirty, then fewer past uses (beyond the window, past frequency is the best estimate of
  // reuse on skewed traces), then least recently used, then the larger block id.
  __extension__ typedef unsigned __int128 Key;  // GCC/Clang 128-bit integer
  struct Entry {
    Key key;
    uint32_t version;
    BlockId block() const { return static_cast<BlockId>(key); }
    bool operator<(const Entry& o) const { return key < o.key; }
  };
  static Entry MakeEntry(uint64_t next_use, bool clean, uint64_t uses, uint64_t last_step,
                         BlockId b, uint32_t version);
  // The entry of resident block b as of step t: pinned and protected blocks sort last.
  Entry CurrentEntry(BlockId b, uint64_t t) const;
  void Push(BlockId b, uint64_t t);
  void PushPinned(BlockId b);
  bool Protected(BlockId b, uint64_t t) const;
  void EnterWindow(uint64_t t);
  void ReleaseProtected(uint64_t t);
  Result<uint32_t> TakeSlot(uint64_t t, Plan& plan);
  void UpdateAfterStep(uint64_t t);
  void CompactIfNeeded();
  void TrimConsumed();

  PlannerKind kind_;
  PlannerOptions options_;
  bool finished_ = false;
  // The appended window (distinct blocks per step), positions relative to base_pos_.
  std::vector<BlockId> blocks_;
  std::vector<uint64_t> step_first_;  // per appended step (from base_step_): first position
  std::vector<uint8_t> step_writes_;
  std::vector<uint64_t> next_use_of_;  // per position: the step of the block's next use
  uint64_t base_pos_ = 0;
  uint64_t base_step_ = 0;
  uint64_t appended_steps_ = 0;
  uint64_t next_step_ = 0;
  // Per block, together so one access touches one cache line.
  struct BlockState {
    uint64_t last_pos = kNever;   // latest appended position of the block
    uint64_t last_append_step = 0;  // the step of that position
    uint64_t next_use = kNever;   // next use step after its last planned access
    uint64_t last_step = kNever;  // last planned step that used it
    uint64_t mark = 0;            // step + 1 while it is in the current step's set (pinned)
    uint32_t slot_of = kNone;     // kNone when not resident
    uint32_t version = 0;         // bumped whenever its heap entries go stale
    uint32_t uses = 0;            // steps that used it so far
    uint8_t dirty = 0;
  };
  std::vector<BlockState> st_;
  std::vector<Entry> heap_;  // a binary max-heap with stale entries (lazy deletion)
  std::vector<uint32_t> free_slots_;
  std::vector<BlockId> misses_;
  uint32_t resident_ = 0;
};

}  // namespace sluice
