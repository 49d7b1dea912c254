#pragma once
// RowCache: a row-granular cache for tables addressed by (table, id) keys: the recommendation
// workload's embedding rows (Bagpipe's oracle cacher). It decides, step by step, which rows to
// load into which arena slots and which resident rows to evict (writing dirty ones back); it
// does no io itself (prefetch/RowPrefetcher runs the plan).
//
//   oracle: steps are appended `window` steps before they are planned, so the cache knows which
//           rows the next W steps use. A row used within the window is evicted only when no
//           other row can be (the window holds more rows than the cache; with capacity of at
//           least MinCapacityRows(W, d, rows per step) that never happens). Among the others it
//           evicts the row used least often so far, then the least recently used (on
//           Zipf-skewed ids past frequency is the best predictor of reuse beyond the window).
//           Uses rank exactly up to 47; beyond, by powers of two (64-127 uses rank alike).
//   lru:    evicts the least recently used row; no lookahead (window 0).
//   static: a fixed hot set (`pinned`, e.g. the highest-degree nodes, as Quiver and PaGraph
//           place them) stays once loaded; the other rows pass through the remaining slots,
//           least recently used first.
//   none:   read-through: a row stays only while the steps in flight use it (give the cache
//           just the rows of those steps).
//
// Run-ahead: step t is planned with protect_steps = d, so it only evicts rows last used at or
// before step t - d - 1; its io may then be issued as soon as compute has finished that step.
//
// Capacity: the arena must hold every row of the steps in flight (MinCapacityRows(0, d, m) for
// steps of at most m rows); Plan fails (FailedPrecondition, naming the numbers) when it cannot.
// A step larger than planned for then need not end the run: the step stays half placed, and
// once compute has finished the earlier steps (all of them, or all but the last `keep`: a
// consumer that reads a step ahead holds the previous one), PlaceAfterDrain releases their rows
// and places the rest (the static kind's pinned rows yielding their slots if need be: they are
// pinned again once a step loads them); that step's io runs with at most `keep` steps ahead of
// compute. Only a step that does not fit beside those kept fails for good.
//
// Thread safety: none (one planner thread).

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cache/candidate_queue.h"
#include "cache/planner.h"
#include "common/status.h"
#include "storage/kv_table.h"

namespace sluice {

using RowKey = TableKey;

struct RowCacheOptions {
  PlannerKind kind = PlannerKind::kOracle;  // oracle or lru
  uint64_t capacity_rows = 0;
  uint32_t window_steps = 0;   // oracle lookahead (ignored by lru)
  uint32_t protect_steps = 0;  // rows of the last d planned steps stay resident
  // Rows the index holds besides the resident ones: those pending in the window and the new
  // rows of the step being planned (inserted before its evictions). The index is sized for
  // capacity + window_rows entries once; more makes it double (LRU with 0 here outgrew a
  // 1 GiB plan by 15%).
  uint64_t window_rows = 0;
  // static: table 0's pinned rows, a bitmap by id (not owned; outlives the cache). Pinned rows
  // are never evicted, so they must leave room for the steps in flight.
  const std::vector<uint64_t>* pinned = nullptr;
  // oracle: rows kept over the others beyond the window (the next pass's first rows, which a
  // pass that starts over in the same order needs first): a bitmap by global row,
  // keep_offsets[table] + id (neither owned; both outlive the cache). A kept row is evicted only
  // when no row outside the window and outside the set is left; among kept rows the usual order
  // holds. The set should leave most of the cache to the others.
  const std::vector<uint64_t>* keep = nullptr;
  const std::vector<uint64_t>* keep_offsets = nullptr;
  // Keys are table 0's ids below total_rows (0: any keys). The index is then an array by id
  // when that takes at most twice the hashed index's memory (its entries are 8 bytes, and the
  // oracle's counts of uses and pending steps 4 more beside them; hashed ones are 32), and with
  // capacity_rows >= total_rows no row is ever evicted, so the cache keeps no eviction candidates.
  uint64_t total_rows = 0;
};

// Rows the arena needs so no step can fail: every row of window + protect + 1 steps.
uint64_t MinCapacityRows(uint32_t window_steps, uint32_t protect_steps, uint64_t max_rows_per_step);

// A read-only pass (evaluation) through a cache sized for training, whose steps may be larger
// than training's (a split in id order on a degree-ordered graph starts with its hubs): the
// largest run-ahead d, at most `run_ahead`, with which window + d + 1 steps of `step_rows` rows
// fit `capacity_rows` (0 when none does), and the rows a step may then take: the d + 1 steps in
// flight must fit, the window's rows may be evicted (the oracle then plans with less
// foresight). Such a pass runs with less io ahead of compute instead of failing.
struct PassFit {
  uint32_t run_ahead = 0;
  uint64_t max_rows = 0;  // capacity / (run_ahead + 1), at least 1
};
PassFit FitPass(uint64_t capacity_rows, uint32_t window_steps, uint32_t run_ahead, uint64_t step_rows);
// RAM the cache's bookkeeping takes besides the rows: its index (entries of cached rows and of
// at most `window_rows` other rows; at most 3/4 full), its
// eviction candidates (compacted at twice the capacity) and its free-slot list.
// The index's bytes; with total_rows (RowCacheOptions::total_rows) the dense index's when the
// cache would use one.
uint64_t RowCacheIndexBytes(PlannerKind kind, uint64_t capacity_rows, uint64_t window_rows, uint64_t total_rows = 0);
// Whether the cache indexes rows by id (total_rows entries of 12 bytes for the oracle, 8 for the
// others): when that takes at most twice the hashed index's bytes.
bool RowCacheUsesDenseIndex(PlannerKind kind, uint64_t capacity_rows, uint64_t window_rows, uint64_t total_rows);

struct RowStepPlan {
  std::vector<uint32_t> slots;       // per row of the step (in the caller's order): its slot
  std::vector<RowKey> load_keys;     // rows to load, and their slots
  std::vector<uint32_t> load_slots;
  std::vector<RowKey> write_keys;    // evicted dirty rows to write back first, and their slots
  std::vector<uint32_t> write_slots;
  void Clear();
};

struct RowCacheStats {
  uint64_t steps = 0;
  uint64_t accesses = 0;  // distinct rows per step, summed
  uint64_t hits = 0;
  uint64_t loads = 0;
  uint64_t evictions = 0;
  uint64_t write_backs = 0;
  uint64_t window_evictions = 0;  // oracle: rows evicted although used within the window
  uint64_t drained_steps = 0;     // steps placed only once the steps in flight had computed
};

class RowCache {
 public:
  explicit RowCache(const RowCacheOptions& options);

  const RowCacheOptions& options() const { return options_; }
  // Appends the next step's distinct rows to the lookahead window (oracle; lru ignores it).
  // Steps must be planned in the order they were appended.
  void Append(std::span<const RowKey> rows);
  // Steps appended and not yet planned.
  uint64_t appended_unplanned() const { return window_.size(); }
  // Plans the next step: its distinct rows (as appended, when oracle; no row twice), whether it
  // writes them (training marks them dirty; evaluation only reads).
  Status Plan(std::span<const RowKey> rows, bool writes, RowStepPlan& out);
  // After Plan failed for want of a slot (step_unplaced): the step's placed rows keep their slots,
  // its other rows have none. Once compute has finished every step planned before it but the
  // last keep_steps (at most the run-ahead), this releases those steps' rows and places the
  // rest: out.slots (of the Plan call) is completed, and out's loads and write-backs are those
  // of the rows placed now (the first call's stay with the caller). Fails when the step does not
  // fit beside the kept steps.
  bool step_unplaced() const { return unplaced_from_ != kNoneUnplaced; }
  Status PlaceAfterDrain(std::span<const RowKey> rows, uint32_t keep_steps, RowStepPlan& out);
  // Forgets appended steps that will not be planned (a pass stopped early).
  void DropWindow();
  // Every planned step has computed: protected rows become evictable.
  void ReleaseProtected();
  // Between passes (nothing appended, nothing protected: after DropWindow and
  // ReleaseProtected): the run-ahead of the next pass (FitPass).
  void SetProtectSteps(uint32_t protect_steps);
  // static, between passes as SetProtectSteps: whether the pinned rows stay resident (true, the
  // default) or are evicted as any other row (a pass whose steps need the room: evaluation's
  // samples can be larger than training's). Off: the resident pinned rows become eviction
  // candidates, oldest last use first. On again: those still resident stay from then on, and
  // those evicted meanwhile stay once a step loads them.
  void SetPinning(bool on);
  // Dirty resident rows (to flush), at most max_rows per call so that a flush needs bounded
  // memory: start with cursor 0 and call until it returns false (no rows); MarkAllClean after
  // they are written.
  bool DirtyRows(size_t& cursor, size_t max_rows, std::vector<RowKey>& keys, std::vector<uint32_t>& slots) const;
  void MarkAllClean();
  uint64_t resident_rows() const { return resident_; }
  uint64_t index_slots() const { return slim_index_ ? slim_.size() : table_.size(); }
  uint64_t index_bytes() const {
    return table_.size() * sizeof(Entry) + slim_.size() * sizeof(Slim) + counts_.size() * sizeof(Counts);
  }
  uint64_t next_step() const { return step_; }
  const RowCacheStats& stats() const { return stats_; }
  // The key's hash: its top 32 bits place it in the index; its low bits are free for others
  // (ShardedRowCache picks a key's shard with them).
  static uint64_t Hash(const RowKey& k);

 private:
  static constexpr uint32_t kNoSlot = ~uint32_t{0};
  // 32 bytes: the hashed index's entry: the key's parts unpadded, steps relative to the cache's
  // first (32 bits).
  struct Entry {
    uint64_t id = 0;
    uint32_t table = 0;
    uint32_t slot = kNoSlot;
    uint32_t uses = 0;       // planned steps that used it
    uint32_t last_step = 0;  // last planned step that used it
    uint16_t pending = 0;    // appended, unplanned steps that use it (at most the window)
    uint8_t used = 0;        // this table slot holds an entry
    uint8_t dirty = 0;
    RowKey key() const { return RowKey{id, table}; }
    bool Is(const RowKey& k) const { return id == k.id && table == k.table; }
    static uint32_t Stamp(uint64_t step) { return static_cast<uint32_t>(step); }
    uint32_t Last() const { return last_step; }
    void SetLast(uint64_t step) { last_step = Stamp(step); }
    bool Dirty() const { return dirty != 0; }
    void SetDirty(bool d) { dirty = d ? 1 : 0; }
  };
  static_assert(sizeof(Entry) == 32);
  // 8 bytes: the dense index's entry. Its key is its position; the last step (31 bits) beside the
  // dirty bit; the oracle's uses and pending steps apart (Counts), so the passes that need only
  // slots and last steps (releasing a step, evicting) touch 8 bytes a row. A row that is not
  // resident keeps its entry (kNoSlot).
  struct Slim {
    uint32_t slot = kNoSlot;
    uint32_t stamp = 0;  // last_step << 1 | dirty
    static uint32_t Stamp(uint64_t step) { return static_cast<uint32_t>(step) & 0x7FFFFFFFu; }
    uint32_t Last() const { return stamp >> 1; }
    void SetLast(uint64_t step) { stamp = Stamp(step) << 1 | (stamp & 1u); }
    bool Dirty() const { return (stamp & 1u) != 0; }
    void SetDirty(bool d) { stamp = (stamp & ~1u) | (d ? 1u : 0u); }
  };
  static_assert(sizeof(Slim) == 8);
  // The oracle's counts of a dense index's row (counts_[id]): uses saturate (they only rank).
  struct Counts {
    uint16_t pending = 0;  // appended, unplanned steps that use it (at most the window)
    uint16_t uses = 0;     // planned steps that used it, at most 65535
  };
  static_assert(sizeof(Counts) == 4);
  // The oracle's candidate buckets: [0, 128) the main ones (a row's rank: kept rows after the
  // others, then by uses), [128, 256) those set aside for rows used within the window, ranked
  // the same. lru and static: one bucket.
  static constexpr uint32_t kRankBuckets = 128, kOracleBuckets = 2 * kRankBuckets;
  static uint32_t Rank(uint32_t uses, bool kept);

  // The index of either layout; the planning code is written once for both (row_cache.cc).
  template <class E>
  std::vector<E>& Table() {
    if constexpr (std::is_same_v<E, Slim>) {
      return slim_;
    } else {
      return table_;
    }
  }
  // A key's home in the hashed index (any size below 2^32: the hash's top bits scaled), the
  // next slot.
  uint64_t Home(const RowKey& k) const { return (Hash(k) >> 32) * table_.size() >> 32; }
  uint64_t Next(uint64_t i) const { return i + 1 == table_.size() ? 0 : i + 1; }
  template <class E>
  void Prefetch(const RowKey& k);
  template <class E>
  E* Find(const RowKey& k);
  template <class E>
  E& FindOrInsert(const RowKey& k);
  template <class E>
  RowKey KeyOf(const E& e) const;
  void Erase(Entry* e);
  void Grow();
  template <class E>
  void MaybeErase(E* e);  // drops an entry that is neither resident nor pending
  // The oracle's counts of an entry (in it, or beside a slim one).
  Counts& CountsOf(const Slim& e) { return counts_[static_cast<size_t>(&e - slim_.data())]; }
  template <class E>
  uint16_t& PendingOf(E& e);
  template <class E>
  uint32_t UsesOf(const E& e);
  template <class E>
  void CountUse(E& e);  // a planned step uses it
  template <class E>
  void AppendIn(std::span<const RowKey> rows);
  template <class E>
  void DropWindowIn();
  bool PinnedKey(const RowKey& k) const;
  bool Kept(const RowKey& k) const;
  template <class E>
  void PushCandidate(const E& e);
  template <class E>
  bool Stale(const EvictionCandidate& c);
  void CompactCandidates();
  template <class E>
  void CompactCandidatesIn();
  void ReleaseProtectedDownTo(size_t n);
  void ReleaseStep(const std::vector<RowKey>& rows, uint64_t step);
  template <class E>
  void ReleaseStepIn(const std::vector<RowKey>& rows, uint64_t step);
  // The resident pinned rows last used before step `before` become eviction candidates.
  template <class E>
  void PushPinned(uint64_t before = ~uint64_t{0});
  template <class E>
  uint32_t TakeSlot(RowStepPlan& out);  // kNoSlot: nothing can be evicted
  template <class E>
  Status PlanIn(std::span<const RowKey> rows, bool writes, RowStepPlan& out);
  // Gives the step's missing rows from missing_[first] on their slots; on a full cache remembers
  // where it stopped (unplaced_from_) and fails.
  template <class E>
  bool PlaceMissing(std::span<const RowKey> rows, size_t first, RowStepPlan& out);
  // drained: after PlaceAfterDrain kept `kept` steps.
  Status FullError(uint64_t step, size_t step_rows, bool drained, uint32_t kept = 0) const;

  RowCacheOptions options_;
  // The index is by id (total_rows entries in slim_, with counts_ for the oracle; never grown);
  // otherwise hashed in table_.
  bool slim_index_ = false;
  bool fits_ = false;   // every row fits: no candidates, no protected steps
  bool pinning_ = true;  // static: pinned rows are never evicted (SetPinning)
  std::vector<Entry> table_;  // open addressing, linear probing, at most 3/4 full
  std::vector<Slim> slim_;    // by id
  std::vector<Counts> counts_;  // by id: the oracle's, beside slim_
  uint64_t size_ = 0;
  std::deque<std::vector<RowKey>> window_;     // appended, not yet planned
  std::deque<std::vector<RowKey>> protected_;  // the last protect_steps planned steps
  uint64_t protected_first_ = 0;               // the step of protected_.front()
  // Eviction candidates (none when every row fits): room for 2 x capacity + 4096 of them, the
  // memory plan's figure, allocated once. Steps release their rows in step order, so each bucket
  // holds its candidates oldest last use first.
  std::optional<CandidateQueue> queue_;
  uint32_t main_buckets_ = 1;  // Pop's range for the main candidates: [0, main_buckets_)
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> missing_;  // scratch of Plan: the step's rows without a slot
  static constexpr size_t kNoneUnplaced = ~size_t{0};
  size_t unplaced_from_ = kNoneUnplaced;  // missing_[unplaced_from_...] still need slots
  uint64_t resident_ = 0;
  uint64_t step_ = 0;
  RowCacheStats stats_;
};

}  // namespace sluice
