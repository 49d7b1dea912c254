#include "cache/row_cache.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "common/check.h"

namespace sluice {

uint64_t MinCapacityRows(uint32_t window_steps, uint32_t protect_steps,
                         uint64_t max_rows_per_step) {
  return (uint64_t{window_steps} + protect_steps + 1) * max_rows_per_step;
}

PassFit FitPass(uint64_t capacity_rows, uint32_t window_steps, uint32_t run_ahead, uint64_t step_rows) {
  const uint64_t fits = capacity_rows / std::max<uint64_t>(1, step_rows);  // whole steps
  uint32_t d = run_ahead;
  while (d > 0 && uint64_t{window_steps} + d + 1 > fits) --d;
  return PassFit{d, std::max<uint64_t>(1, capacity_rows / (uint64_t{d} + 1))};
}

namespace {
// Index entries fetched ahead of a pass over a step's rows (which miss the CPU's caches).
constexpr size_t kPrefetchAhead = 16;

// Index slots for `rows` entries at most 3/4 full.
uint64_t IndexSlots(uint64_t rows) { return std::max<uint64_t>(1024, (4 * (rows + 1) + 2) / 3); }
}  // namespace

// Bytes of a dense index's entry: a slot and a last step (8 bytes), and the oracle's counts of
// uses and pending steps (4 more).
static uint64_t DenseEntryBytes(PlannerKind kind) { return kind == PlannerKind::kOracle ? 12 : 8; }

bool RowCacheUsesDenseIndex(PlannerKind kind, uint64_t capacity_rows, uint64_t window_rows, uint64_t total_rows) {
  constexpr uint64_t kEntryBytes = 32;  // the hashed index's (RowCache::Entry, asserted beside it)
  return total_rows != 0 &&
         total_rows * DenseEntryBytes(kind) <= 2 * IndexSlots(capacity_rows + window_rows) * kEntryBytes;
}

uint64_t RowCacheIndexBytes(PlannerKind kind, uint64_t capacity_rows, uint64_t window_rows, uint64_t total_rows) {
  constexpr uint64_t kEntryBytes = 32;
  const uint64_t index = RowCacheUsesDenseIndex(kind, capacity_rows, window_rows, total_rows)
                             ? total_rows * DenseEntryBytes(kind)
                             : IndexSlots(capacity_rows + window_rows) * kEntryBytes;
  const bool fits = total_rows != 0 && capacity_rows >= total_rows;
  const uint32_t buckets = kind == PlannerKind::kOracle ? 256 : 1;  // (RowCache::kOracleBuckets)
  return index + (fits ? 0 : CandidateQueue::Bytes(buckets, 2 * capacity_rows + 4096)) + capacity_rows * 4;
}

void RowStepPlan::Clear() {
  slots.clear();
  load_keys.clear();
  load_slots.clear();
  write_keys.clear();
  write_slots.clear();
}

RowCache::RowCache(const RowCacheOptions& options) : options_(options) {
  SLUICE_CHECK(options.kind != PlannerKind::kStatic || options.pinned != nullptr,
               "the static row cache needs its pinned rows");
  if (options_.kind != PlannerKind::kOracle) options_.window_steps = 0;
  fits_ = options_.total_rows != 0 && options_.capacity_rows >= options_.total_rows;
  slim_index_ = RowCacheUsesDenseIndex(options_.kind, options_.capacity_rows, options_.window_rows, options_.total_rows);
  if (slim_index_) {
    slim_.resize(options_.total_rows);
    if (options_.kind == PlannerKind::kOracle) counts_.resize(options_.total_rows);
  } else {
    table_.resize(IndexSlots(options_.capacity_rows + options_.window_rows));
  }
  if (!fits_) {
    const bool oracle = options_.kind == PlannerKind::kOracle;
    static_assert(kOracleBuckets == 256);  // (RowCacheIndexBytes)
    queue_.emplace(oracle ? kOracleBuckets : 1, 2 * options_.capacity_rows + 4096);
    main_buckets_ = oracle ? kRankBuckets : 1;
  }
  free_slots_.reserve(options_.capacity_rows);
  for (uint64_t s = options_.capacity_rows; s > 0; --s) free_slots_.push_back(static_cast<uint32_t>(s - 1));
}

uint64_t RowCache::Hash(const RowKey& k) {
  uint64_t x = k.id ^ (uint64_t{k.table} * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

template <class E>
void RowCache::Prefetch(const RowKey& k) {
  __builtin_prefetch(&Table<E>()[std::is_same_v<E, Slim> ? k.id : Home(k)]);
  if constexpr (std::is_same_v<E, Slim>) {
    if (!counts_.empty()) __builtin_prefetch(&counts_[k.id]);  // (the oracle's, read beside it)
  }
}

template <class E>
E* RowCache::Find(const RowKey& k) {
  if constexpr (std::is_same_v<E, Slim>) {
    return &slim_[k.id];  // (keys come from planned steps: checked when they were inserted)
  } else {
    for (uint64_t i = Home(k);; i = Next(i)) {
      Entry& e = table_[i];
      if (!e.used) return nullptr;
      if (e.Is(k)) return &e;
    }
  }
}

template <class E>
E& RowCache::FindOrInsert(const RowKey& k) {
  if (slim_index_) {
    SLUICE_CHECK(k.table == 0 && k.id < options_.total_rows, "row cache: key %llu of table %u beyond the %llu rows",
                 static_cast<unsigned long long>(k.id), k.table,
                 static_cast<unsigned long long>(options_.total_rows));
  } else if (4 * (size_ + 1) > 3 * table_.size()) {
    Grow();  // load factor at most 3/4
  }
  if constexpr (std::is_same_v<E, Slim>) {
    return slim_[k.id];
  } else {
    for (uint64_t i = Home(k);; i = Next(i)) {
      Entry& e = table_[i];
      if (!e.used) {
        e = Entry{};
        e.id = k.id;
        e.table = k.table;
        e.used = 1;
        ++size_;
        return e;
      }
      if (e.Is(k)) return e;
    }
  }
}

template <class E>
RowKey RowCache::KeyOf(const E& e) const {
  if constexpr (std::is_same_v<E, Slim>) {
    return RowKey{static_cast<uint64_t>(&e - slim_.data()), 0};
  } else {
    return e.key();
  }
}

void RowCache::Grow() {
  std::vector<Entry> old = std::move(table_);
  table_.assign(old.size() * 2, Entry{});
  for (const Entry& e : old) {
    if (!e.used) continue;
    uint64_t i = Home(e.key());
    while (table_[i].used) i = Next(i);
    table_[i] = e;
  }
}

// Backward-shift deletion: later entries of the probe run move up so lookups never stop early.
void RowCache::Erase(Entry* e) {
  uint64_t hole = static_cast<uint64_t>(e - table_.data());
  table_[hole].used = 0;
  --size_;
  for (uint64_t i = Next(hole); table_[i].used; i = Next(i)) {
    const uint64_t home = Home(table_[i].key());
    // Move entry i into the hole if its home is not in the cyclic range (hole, i].
    const bool in_range = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!in_range) {
      table_[hole] = table_[i];
      table_[i].used = 0;
      hole = i;
    }
  }
}

template <class E>
uint16_t& RowCache::PendingOf(E& e) {
  if constexpr (std::is_same_v<E, Slim>) {
    return CountsOf(e).pending;
  } else {
    return e.pending;
  }
}

template <class E>
uint32_t RowCache::UsesOf(const E& e) {
  if constexpr (std::is_same_v<E, Slim>) {
    return CountsOf(e).uses;
  } else {
    return e.uses;
  }
}

template <class E>
void RowCache::CountUse(E& e) {
  if constexpr (std::is_same_v<E, Slim>) {
    Counts& c = CountsOf(e);
    --c.pending;
    if (c.uses != 0xFFFF) ++c.uses;
  } else {
    --e.pending;
    ++e.uses;
  }
}

template <class E>
void RowCache::MaybeErase(E* e) {
  if constexpr (std::is_same_v<E, Entry>) {
    if (e->slot == kNoSlot && e->pending == 0) Erase(e);
  } else if (!counts_.empty()) {
    // A slim entry stays (its slot says the row is not resident); its uses restart, as an
    // erased entry's do, so both layouts plan alike.
    Counts& c = CountsOf(*e);
    if (e->slot == kNoSlot && c.pending == 0) c.uses = 0;
  }
}

bool RowCache::PinnedKey(const RowKey& k) const {
  const std::vector<uint64_t>* p = options_.pinned;
  return p != nullptr && k.table == 0 && k.id / 64 < p->size() && ((*p)[k.id / 64] >> (k.id % 64) & 1);
}

bool RowCache::Kept(const RowKey& key) const {
  const std::vector<uint64_t>* k = options_.keep;
  if (k == nullptr || key.table >= options_.keep_offsets->size()) return false;
  const uint64_t row = (*options_.keep_offsets)[key.table] + key.id;
  return row / 64 < k->size() && ((*k)[row / 64] >> (row % 64) & 1);
}

uint32_t RowCache::Rank(uint32_t uses, bool kept) {
  const uint32_t by_uses = uses < 48 ? uses : 48 + std::min<uint32_t>(15, std::bit_width(uses) - 6);
  return (kept ? 64 : 0) + by_uses;
}

template <class E>
void RowCache::PushCandidate(const E& e) {
  if (fits_) return;  // nothing is ever evicted
  const RowKey k = KeyOf(e);
  if (options_.kind == PlannerKind::kStatic && pinning_ && PinnedKey(k)) return;  // never evicted
  // Kept rows (the next pass's first) after every other; then fewer uses, older last use.
  const uint32_t bucket = options_.kind == PlannerKind::kOracle ? Rank(UsesOf(e), Kept(k)) : 0;
  // Stale candidates (rows used again since) pile up when evictions are rare: drop them. (At
  // most one candidate per resident row is live, so this always makes room.)
  if (queue_->Full()) CompactCandidates();
  SLUICE_CHECK(!queue_->Full(), "row cache: eviction candidates overflow");
  queue_->Push(bucket, EvictionCandidate{k.id, k.table, e.Last()});
}

// A candidate whose row was evicted or used again since it was pushed.
template <class E>
bool RowCache::Stale(const EvictionCandidate& c) {
  const E* e = Find<E>(RowKey{c.id, c.table});
  return e == nullptr || e->slot == kNoSlot || e->Last() != c.last_step;
}

void RowCache::CompactCandidates() { slim_index_ ? CompactCandidatesIn<Slim>() : CompactCandidatesIn<Entry>(); }

template <class E>
void RowCache::CompactCandidatesIn() {
  queue_->RemoveIf([this](const EvictionCandidate& c) { return Stale<E>(c); });
}

void RowCache::ReleaseStep(const std::vector<RowKey>& rows, uint64_t step) {
  slim_index_ ? ReleaseStepIn<Slim>(rows, step) : ReleaseStepIn<Entry>(rows, step);
}

template <class E>
void RowCache::ReleaseStepIn(const std::vector<RowKey>& rows, uint64_t step) {
  // static: pinned rows never become candidates; their bits answer without a probe of the index.
  const bool skip_pinned = options_.kind == PlannerKind::kStatic && pinning_ && options_.pinned != nullptr;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kPrefetchAhead < rows.size() && !(skip_pinned && PinnedKey(rows[i + kPrefetchAhead]))) {
      Prefetch<E>(rows[i + kPrefetchAhead]);
    }
    const RowKey& k = rows[i];
    if (skip_pinned && PinnedKey(k)) continue;
    E* e = Find<E>(k);
    if (e != nullptr && e->slot != kNoSlot && e->Last() == E::Stamp(step)) PushCandidate(*e);
  }
}

void RowCache::Append(std::span<const RowKey> rows) {
  if (options_.kind != PlannerKind::kOracle) return;
  SLUICE_CHECK(window_.size() < 0xFFFF, "row cache: window too long");
  slim_index_ ? AppendIn<Slim>(rows) : AppendIn<Entry>(rows);
  window_.emplace_back(rows.begin(), rows.end());
}

template <class E>
void RowCache::AppendIn(std::span<const RowKey> rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kPrefetchAhead < rows.size()) Prefetch<E>(rows[i + kPrefetchAhead]);
    ++PendingOf(FindOrInsert<E>(rows[i]));
  }
}

void RowCache::DropWindow() { slim_index_ ? DropWindowIn<Slim>() : DropWindowIn<Entry>(); }

template <class E>
void RowCache::DropWindowIn() {
  for (const auto& rows : window_) {
    for (const RowKey& k : rows) {
      E* e = Find<E>(k);  // (only the oracle appends)
      SLUICE_CHECK(e != nullptr && PendingOf(*e) > 0, "row cache: window out of sync");
      if (--PendingOf(*e) == 0) {
        if (e->slot != kNoSlot) {
          PushCandidate(*e);
        } else {
          MaybeErase(e);
        }
      }
    }
  }
  window_.clear();
}

// Releases the oldest protected steps (their rows become evictable) until `n` remain.
void RowCache::ReleaseProtectedDownTo(size_t n) {
  while (protected_.size() > n) {
    ReleaseStep(protected_.front(), protected_first_);
    protected_.pop_front();
    ++protected_first_;
  }
}

void RowCache::ReleaseProtected() {
  unplaced_from_ = kNoneUnplaced;
  ReleaseProtectedDownTo(0);
  protected_first_ = step_;
}

void RowCache::SetProtectSteps(uint32_t protect_steps) {
  SLUICE_CHECK(window_.empty() && protected_.empty(), "run-ahead changed inside a pass (%zu appended, %zu protected)",
               window_.size(), protected_.size());
  options_.protect_steps = protect_steps;
}

void RowCache::SetPinning(bool on) {
  SLUICE_CHECK(window_.empty() && protected_.empty(), "row cache: pinning changed inside a pass (%zu appended, %zu protected)",
               window_.size(), protected_.size());
  if (options_.kind != PlannerKind::kStatic || on == pinning_) return;
  pinning_ = on;
  if (fits_) return;  // nothing is ever evicted
  if (on) {  // the pinned rows' candidates leave the queue
    queue_->RemoveIf([this](const EvictionCandidate& c) { return PinnedKey(RowKey{c.id, c.table}); });
    return;
  }
  slim_index_ ? PushPinned<Slim>() : PushPinned<Entry>();
}

// The resident pinned rows (last used before step `before`) become candidates, oldest last use
// first.
template <class E>
void RowCache::PushPinned(uint64_t before) {
  std::vector<const E*> pinned;
  for (const E& e : Table<E>()) {
    bool used = true;
    if constexpr (std::is_same_v<E, Entry>) used = e.used != 0;
    if (before != ~uint64_t{0} && used && e.Last() >= E::Stamp(before)) continue;
    if (used && e.slot != kNoSlot && PinnedKey(KeyOf(e))) pinned.push_back(&e);
  }
  std::stable_sort(pinned.begin(), pinned.end(), [](const E* a, const E* b) { return a->Last() < b->Last(); });
  for (const E* e : pinned) PushCandidate(*e);
}

template <class E>
uint32_t RowCache::TakeSlot(RowStepPlan& out) {
  if (!free_slots_.empty()) {
    const uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  if (fits_) return kNoSlot;
  // Oracle: rows used within the window are set aside (in the window's buckets, same rank); if
  // nothing else is evictable (the window holds more rows than the cache), the best of them goes.
  uint32_t slot = kNoSlot;
  const uint32_t all = options_.kind == PlannerKind::kOracle ? kOracleBuckets : main_buckets_;
  for (;;) {
    EvictionCandidate c;
    bool fallback = false;
    if (!queue_->Pop(0, main_buckets_, c)) {
      if (main_buckets_ == all || !queue_->Pop(main_buckets_, all, c)) break;
      fallback = true;
    }
    const uint32_t from = fallback ? main_buckets_ : 0, to = fallback ? all : main_buckets_;
    if (const EvictionCandidate* ahead = queue_->Peek(from, to, kPrefetchAhead)) {
      Prefetch<E>(RowKey{ahead->id, ahead->table});
    }
    E* e = Find<E>(RowKey{c.id, c.table});
    if (e == nullptr || e->slot == kNoSlot || e->Last() != c.last_step) continue;  // stale
    if (options_.kind == PlannerKind::kOracle && PendingOf(*e) > 0) {
      if (!fallback) {
        if (queue_->Full()) CompactCandidates();  // (c is out of the queue: it stays live)
        queue_->Push(kRankBuckets + Rank(UsesOf(*e), Kept(RowKey{c.id, c.table})), c);
        continue;
      }
      ++stats_.window_evictions;
    }
    slot = e->slot;
    ++stats_.evictions;
    if (e->Dirty()) {
      out.write_keys.push_back(RowKey{c.id, c.table});
      out.write_slots.push_back(slot);
      ++stats_.write_backs;
    }
    e->slot = kNoSlot;
    e->SetDirty(false);
    --resident_;
    MaybeErase(e);
    break;
  }
  return slot;
}

Status RowCache::FullError(uint64_t step, size_t step_rows, bool drained, uint32_t kept) const {
  const std::string head = "row cache of " + std::to_string(options_.capacity_rows) + " rows is full at step " +
                           std::to_string(step);
  if (drained) {
    const std::string beside = kept > 0 ? " beside the previous step's rows (compute may read a step ahead)"
                                        : " with no other step in flight";
    return FailedPrecondition(head + ": the step's own " + std::to_string(step_rows) + " rows do not fit" + beside +
                              "; raise storage.budget or storage.cache_rows");
  }
  return FailedPrecondition(head + ": every resident row is used within the window of " +
                            std::to_string(options_.window_steps) + " steps or by the " +
                            std::to_string(options_.protect_steps) +
                            " steps in flight; raise storage.budget or lower storage.window");
}

Status RowCache::Plan(std::span<const RowKey> rows, bool writes, RowStepPlan& out) {
  return slim_index_ ? PlanIn<Slim>(rows, writes, out) : PlanIn<Entry>(rows, writes, out);
}

template <class E>
Status RowCache::PlanIn(std::span<const RowKey> rows, bool writes, RowStepPlan& out) {
  out.Clear();
  SLUICE_CHECK(!step_unplaced(), "row cache: step %llu planned while step %llu is half placed",
               static_cast<unsigned long long>(step_), static_cast<unsigned long long>(step_ - 1));
  const bool oracle = options_.kind == PlannerKind::kOracle;
  if (oracle) {
    if (window_.empty() || window_.front().size() != rows.size()) {
      return FailedPrecondition("row cache: step " + std::to_string(step_) + " was not appended before planning");
    }
  }
  // Steps before t - d have computed: their rows may be evicted now.
  ReleaseProtectedDownTo(options_.protect_steps);
  const uint64_t t = step_;
  out.slots.resize(rows.size());
  // Pass 1: every row of the step is marked used now, so pass 2 never evicts one of them.
  std::vector<uint32_t>& missing = missing_;
  missing.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kPrefetchAhead < rows.size()) Prefetch<E>(rows[i + kPrefetchAhead]);
    E& e = FindOrInsert<E>(rows[i]);
    if (oracle) CountUse(e);
    e.SetLast(t);
    if (writes) e.SetDirty(true);
    if (e.slot != kNoSlot) {
      out.slots[i] = e.slot;
      ++stats_.hits;
    } else {
      missing.push_back(static_cast<uint32_t>(i));
    }
  }
  // The step ends whether or not its rows all find slots, so the window and protection stay in
  // step (PlaceAfterDrain places the rest).
  stats_.accesses += rows.size();
  ++stats_.steps;
  if (oracle) window_.pop_front();
  if (!fits_) protected_.emplace_back(rows.begin(), rows.end());  // (fits: nothing to release)
  const bool placed = PlaceMissing<E>(rows, 0, out);
  ++step_;
  return placed ? Status::Ok() : FullError(t, rows.size(), false);
}

template <class E>
bool RowCache::PlaceMissing(std::span<const RowKey> rows, size_t first, RowStepPlan& out) {
  const std::vector<uint32_t>& missing = missing_;
  const size_t loads_before = out.load_keys.size();
  unplaced_from_ = kNoneUnplaced;
  for (size_t j = first; j < missing.size(); ++j) {
    const uint32_t i = missing[j];
    if (j + kPrefetchAhead < missing.size()) Prefetch<E>(rows[missing[j + kPrefetchAhead]]);
    const uint32_t slot = TakeSlot<E>(out);
    if (slot == kNoSlot) {
      unplaced_from_ = j;
      break;
    }
    E* e = Find<E>(rows[i]);  // TakeSlot may have moved entries
    e->slot = slot;
    ++resident_;
    out.slots[i] = slot;
    out.load_keys.push_back(rows[i]);
    out.load_slots.push_back(slot);
  }
  stats_.loads += out.load_keys.size() - loads_before;
  return unplaced_from_ == kNoneUnplaced;
}

Status RowCache::PlaceAfterDrain(std::span<const RowKey> rows, uint32_t keep_steps, RowStepPlan& out) {
  SLUICE_CHECK(step_unplaced() && !protected_.empty() && protected_.back().size() == rows.size(),
               "row cache: PlaceAfterDrain without a half-placed step (%zu rows)", rows.size());
  // The steps before the half-placed one (protected_'s last) but the last keep_steps have
  // computed: their rows go.
  ReleaseProtectedDownTo(size_t{1} + keep_steps);
  ++stats_.drained_steps;
  out.load_keys.clear(), out.load_slots.clear(), out.write_keys.clear(), out.write_slots.clear();
  auto place = [&] {
    const size_t first = unplaced_from_;
    return slim_index_ ? PlaceMissing<Slim>(rows, first, out) : PlaceMissing<Entry>(rows, first, out);
  };
  if (place()) return Status::Ok();
  // static: the pinned rows no kept step uses yield their slots (pinned again once loaded).
  if (options_.kind == PlannerKind::kStatic && pinning_ && options_.pinned != nullptr) {
    pinning_ = false;  // (PushCandidate skips pinned rows while pinning)
    slim_index_ ? PushPinned<Slim>(protected_first_) : PushPinned<Entry>(protected_first_);
    pinning_ = true;
    if (place()) return Status::Ok();
  }
  unplaced_from_ = kNoneUnplaced;  // for good
  return FullError(step_ - 1, rows.size(), true, static_cast<uint32_t>(protected_.size() - 1));
}

bool RowCache::DirtyRows(size_t& cursor, size_t max_rows, std::vector<RowKey>& keys,
                         std::vector<uint32_t>& slots) const {
  keys.clear();
  slots.clear();
  if (slim_index_) {
    for (; cursor < slim_.size() && keys.size() < max_rows; ++cursor) {
      const Slim& e = slim_[cursor];
      if (e.slot != kNoSlot && e.Dirty()) {
        keys.push_back(RowKey{cursor, 0});
        slots.push_back(e.slot);
      }
    }
    return !keys.empty();
  }
  for (; cursor < table_.size() && keys.size() < max_rows; ++cursor) {
    const Entry& e = table_[cursor];
    if (e.used && e.slot != kNoSlot && e.dirty) {
      keys.push_back(e.key());
      slots.push_back(e.slot);
    }
  }
  return !keys.empty();
}

void RowCache::MarkAllClean() {
  for (Slim& e : slim_) e.SetDirty(false);
  for (Entry& e : table_) {
    if (e.used) e.dirty = 0;
  }
}

}  // namespace sluice
