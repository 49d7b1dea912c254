// RowPrefetcher, as RowPipeline runs it (a sampler stage reading and deduplicating, the
// prefetcher planning and loading): Zipf-skewed steps run ahead while this thread computes: every row it gets holds exactly what a plain in-RAM model says, it updates them,
// and after a flush the backing store equals the model. Oracle and LRU, run-ahead 0/1/4, a
// slow backing store (so io really runs ahead), and the in-memory mode. A failing source ends
// the pipeline with its error. Runs under TSan (torch-free).

#include "prefetch/row_pipeline.h"

#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace sluice {
namespace {

constexpr uint32_t kRowBytes = 16;  // uint64 value, uint64 check word
constexpr uint32_t kTables = 3;
constexpr uint32_t kPerSample = kTables;

void InitRow(const RowKey& k, std::byte* row) {
  const uint64_t v[2] = {k.id * 31 + k.table, ~k.id};
  std::memcpy(row, v, sizeof v);
}

// A backing store in a map; sleeps a little per call so io overlaps compute.
class MapBacking : public RowBacking {
 public:
  Status Read(IoSession&, std::span<const RowKey> keys, std::byte* out) override {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = rows_.find({keys[i].table, keys[i].id});
      if (it == rows_.end()) {
        InitRow(keys[i], out + i * kRowBytes);
      } else {
        std::memcpy(out + i * kRowBytes, it->second.data(), kRowBytes);
      }
    }
    return Status::Ok();
  }
  Status Write(IoSession&, std::span<const RowKey> keys, const std::byte* rows) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto& r = rows_[{keys[i].table, keys[i].id}];
      std::memcpy(r.data(), rows + i * kRowBytes, kRowBytes);
    }
    return Status::Ok();
  }
  uint64_t rows_read() const override { return 0; }
  std::map<std::pair<uint32_t, uint64_t>, std::array<std::byte, kRowBytes>> rows_;
  std::mutex mu_;
};

// Step t: `samples` samples of kTables Zipf-ish ids each.
RowPipeline<RowBatch>::Fill ZipfSource(uint64_t steps, uint32_t samples, int fail_at = -1) {
  return [=](uint64_t t, RowBatch& b) -> Result<bool> {
    if (static_cast<int>(t) == fail_at) return IoError("sample file: read failed at step " + std::to_string(t));
    if (t >= steps) return false;
    std::mt19937_64 rng(t * 7 + 1);
    b.samples = samples;
    for (uint32_t i = 0; i < samples; ++i) {
      for (uint32_t f = 0; f < kTables; ++f) {
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        b.keys.push_back(RowKey{static_cast<uint64_t>(std::pow(2000.0, u * u)), f});
      }
    }
    return true;
  };
}

// A pass whose cache pressure comes at its end: its first `head` steps use rows no other step
// uses, the middle steps a few hot rows, and its last `head` steps fresh rows again (which
// evict the first steps' rows unless the window says the next pass needs them). Steps past
// `steps` are the next pass's first `tail` steps, lookahead-only.
RowPipeline<RowBatch>::Fill PhasedSource(uint64_t steps, uint32_t samples, uint64_t head, uint64_t tail) {
  return [=](uint64_t t, RowBatch& b) -> Result<bool> {
    if (t >= steps + tail) return false;
    b.lookahead_only = t >= steps;
    const uint64_t s = t % steps;
    b.samples = samples;
    for (uint32_t i = 0; i < samples * kTables; ++i) {
      uint64_t id = i % 40;                                                         // hot
      if (s < head) id = 10000 + s * samples * kTables + i;                         // the first steps'
      if (s + head >= steps) id = 20000 + (s + head - steps) * samples * kTables + i;  // the last steps'
      b.keys.push_back(RowKey{id, i % kTables});
    }
    return true;
  };
}

struct Model {
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> value;
  uint64_t Get(const RowKey& k) {
    auto it = value.find({k.table, k.id});
    return it == value.end() ? k.id * 31 + k.table : it->second;
  }
};

// Runs `steps` steps; compute checks and updates every row; returns the model. read_ahead: as
// the data-parallel and device loops do when the pipeline allows it, compute waits for step
// t + 1 to be ready before it marks step t computed.
void Drive(RowPipeline<RowBatch>& p, uint64_t steps, Model& model, bool read_ahead = false) {
  p.Start();
  for (uint64_t t = 0; t < steps; ++t) {
    Status s;
    RowBatch* b = p.WaitReady(t, s);
    ASSERT_NE(b, nullptr) << s.ToString();
    ASSERT_EQ(b->inverse.size(), b->samples * kPerSample);
    // First-occurrence order: unique[j] first appears before unique[j + 1].
    uint32_t next = 0;
    for (uint32_t i = 0; i < b->inverse.size(); ++i) {
      ASSERT_LE(b->inverse[i], next);
      if (b->inverse[i] == next) ++next;
      ASSERT_EQ(b->unique[b->inverse[i]], b->keys[i]);
    }
    ASSERT_EQ(next, b->unique.size());
    for (size_t j = 0; j < b->unique.size(); ++j) {
      uint64_t v[2];
      std::memcpy(v, b->rows[j], sizeof v);
      ASSERT_EQ(v[0], model.Get(b->unique[j])) << "step " << t << " row " << b->unique[j].id;
      ASSERT_EQ(v[1], ~b->unique[j].id);
      v[0] += t + 1;
      std::memcpy(b->rows[j], v, sizeof v);
      model.value[{b->unique[j].table, b->unique[j].id}] = v[0];
    }
    // Compute is sometimes slower than io, so io really runs ahead.
    if (t % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(600));
    if (read_ahead && p.NextReadyEarly() && t + 1 < steps) {
      ASSERT_NE(p.WaitReady(t + 1, s), nullptr) << s.ToString();
    }
    p.Computed(t);
  }
  Status s;
  EXPECT_EQ(p.WaitReady(steps, s), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  EXPECT_TRUE(p.Stop().ok());
}

// Writes the cache's dirty rows back and checks every row the model knows holds its value.
void ExpectBackingMatchesModel(RowCache& cache, AlignedBuffer& arena, MapBacking& backing,
                               const Model& model, const RowPrefetcherOptions& po) {
  auto io = IoSession::Create(po.io);
  ASSERT_TRUE(io.ok());
  ASSERT_TRUE(FlushRowCache(cache, arena.data(), kRowBytes, backing, **io).ok());
  for (const auto& [k, v] : model.value) {
    auto it = backing.rows_.find(k);
    ASSERT_NE(it, backing.rows_.end());
    uint64_t stored;
    std::memcpy(&stored, it->second.data(), 8);
    EXPECT_EQ(stored, v);
  }
}

// A cache of co's rows with its arena over a map backing, and a pipeline through it reading with
// pread, `run_ahead` steps of io ahead of compute.
struct Rig {
  Rig(const RowCacheOptions& co, uint32_t run_ahead, RowPipeline<RowBatch>::Fill fill)
      : cache(co), arena(co.capacity_rows * kRowBytes, 64), options(Options(run_ahead)),
        pipeline(&cache, arena.data(), kRowBytes, &backing, options, std::move(fill), &RowPipeline<RowBatch>::Identity) {}
  static RowPrefetcherOptions Options(uint32_t run_ahead) {
    RowPrefetcherOptions po;
    po.run_ahead = run_ahead;
    po.io.backend = BackendKind::kPread;
    return po;
  }
  RowCache cache;
  AlignedBuffer arena;
  MapBacking backing;
  RowPrefetcherOptions options;
  RowPipeline<RowBatch> pipeline;
};

// `capacity` 0: room for every row of the window and the steps in flight (plus 10).
RowCacheStats RunOutOfCore(PlannerKind kind, uint32_t window, uint32_t run_ahead, uint32_t group = 1,
                           uint64_t capacity = 0, bool read_ahead = false) {
  const uint64_t steps = 120;
  const uint32_t samples = 40;
  RowCacheOptions co;
  co.kind = kind;
  co.window_steps = window;
  co.protect_steps = run_ahead;
  co.capacity_rows = capacity > 0 ? capacity : MinCapacityRows(window, run_ahead, samples * kPerSample) + 10;
  std::vector<uint64_t> pinned(2001 / 64 + 1, 0);
  for (uint64_t id = 0; id < 40; ++id) pinned[id / 64] |= uint64_t{1} << (id % 64);
  if (kind == PlannerKind::kStatic) {
    co.pinned = &pinned;
    co.capacity_rows += 40;
  }
  RowCache cache(co);
  AlignedBuffer arena(co.capacity_rows * kRowBytes, 64);
  MapBacking backing;
  Model model;
  RowPrefetcherOptions po;
  po.run_ahead = run_ahead;
  po.group_steps = group;
  po.group_gap_bytes = 4096;
  po.io.backend = BackendKind::kPread;
  // Two passes over the same cache (two epochs), the second continuing from the first's rows.
  for (int pass = 0; pass < 2; ++pass) {
    RowPipeline<RowBatch> p(&cache, arena.data(), kRowBytes, &backing, po, ZipfSource(steps, samples),
                            &RowPipeline<RowBatch>::Identity);
    Drive(p, steps, model, read_ahead);
    if (::testing::Test::HasFatalFailure()) return cache.stats();
  }
  ExpectBackingMatchesModel(cache, arena, backing, model, po);
  EXPECT_GT(cache.stats().loads, 0u);
  EXPECT_GT(cache.stats().evictions, 0u);
  return cache.stats();
}

TEST(RowPrefetcher, OracleMatchesModel) {
  for (uint32_t d : {0u, 1u, 4u}) RunOutOfCore(PlannerKind::kOracle, 6, d);
}

// The oracle's window reaches across a pass's end into the next pass's first steps: compute
// still sees exactly the pass's steps, every row holds what the model says, and the next pass
// loads fewer rows than when the window ends with the pass (the rows its first steps use were
// kept).
TEST(RowPrefetcher, WindowAcrossPassesKeepsTheNextPassRows) {
  const uint64_t steps = 60;
  const uint32_t samples = 40, window = 8, run_ahead = 2;
  uint64_t second_pass_loads[2] = {0, 0};
  for (const uint64_t tail : {uint64_t{0}, uint64_t{window}}) {
    RowCacheOptions co;
    co.kind = PlannerKind::kOracle;
    co.window_steps = window;
    co.protect_steps = run_ahead;
    co.capacity_rows = MinCapacityRows(window, run_ahead, samples * kPerSample) + 10;
    RowCache cache(co);
    AlignedBuffer arena(co.capacity_rows * kRowBytes, 64);
    MapBacking backing;
    Model model;
    RowPrefetcherOptions po;
    po.run_ahead = run_ahead;
    po.io.backend = BackendKind::kPread;
    for (int pass = 0; pass < 2; ++pass) {
      const uint64_t before = cache.stats().loads;
      RowPipeline<RowBatch> p(&cache, arena.data(), kRowBytes, &backing, po,
                              PhasedSource(steps, samples, window, pass == 0 ? tail : 0),
                              &RowPipeline<RowBatch>::Identity);
      Drive(p, steps, model);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(cache.appended_unplanned(), 0u) << "the lookahead-only steps stayed in the window";
      if (pass == 1) second_pass_loads[tail > 0] = cache.stats().loads - before;
    }
    ExpectBackingMatchesModel(cache, arena, backing, model, po);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_LT(second_pass_loads[1], second_pass_loads[0]);
}

TEST(RowPrefetcher, LruMatchesModel) {
  for (uint32_t d : {0u, 3u}) RunOutOfCore(PlannerKind::kLru, 0, d);
}

// Groups of steps planned back to back and loaded in one pass (their write-backs first): rows
// still hold what the model says, for every planner, with run-ahead enough for the group's io to
// overlap the previous group's compute and with less.
TEST(RowPrefetcher, GroupedIoMatchesModel) {
  for (uint32_t g : {2u, 4u}) {
    RunOutOfCore(PlannerKind::kOracle, 6, 2 * g - 1, g);
    RunOutOfCore(PlannerKind::kOracle, 2, g, g);
    RunOutOfCore(PlannerKind::kLru, 0, 2 * g - 1, g);
    RunOutOfCore(PlannerKind::kStatic, 0, 2 * g - 1, g);
  }
}

TEST(RowPrefetcher, StaticKeepsPinnedRowsAndMatchesModel) {
  RunOutOfCore(PlannerKind::kStatic, 0, 2);
}

// A cache with room for about two steps, far less than the steps in flight: a step that does
// not fit beside them waits until compute has finished them (all but the previous step, which
// compute may hold while it reads this one: it does here) and takes their slots. Every row still
// holds what the model says, with every planner, run-ahead and grouping; such steps happened.
// With a run-ahead below the group compute never reads ahead, and one step's room is enough.
TEST(RowPrefetcher, StepsLargerThanPlannedDrainThePipelineAndMatchModel) {
  const uint64_t step = 40 * kPerSample;
  struct Case {
    uint32_t run_ahead, group;
    uint64_t capacity;
  };
  for (PlannerKind kind : {PlannerKind::kOracle, PlannerKind::kLru, PlannerKind::kStatic}) {
    for (const Case c : {Case{4, 1, 2 * step + 10}, Case{4, 3, 2 * step + 10}, Case{2, 3, step + 10}}) {
      SCOPED_TRACE("planner " + std::to_string(static_cast<int>(kind)) + ", run-ahead " + std::to_string(c.run_ahead) +
                   ", group " + std::to_string(c.group));
      const uint32_t window = kind == PlannerKind::kOracle ? 6 : 0;
      // static: 40 hot rows pinned, which are about 70% of a step's uses: a third of the room.
      const uint64_t capacity = kind == PlannerKind::kStatic ? 40 + c.capacity / 3 : c.capacity;
      const RowCacheStats st = RunOutOfCore(kind, window, c.run_ahead, c.group, capacity, /*read_ahead=*/true);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_GT(st.drained_steps, 0u);
      EXPECT_LT(st.drained_steps, st.steps);
    }
  }
  // With room for the steps in flight no step drains.
  EXPECT_EQ(RunOutOfCore(PlannerKind::kOracle, 6, 4, 1, 0, true).drained_steps, 0u);
}

// A step that does not fit the cache by itself still fails the pass, with the numbers.
TEST(RowPrefetcher, StepLargerThanTheCacheFails) {
  RowCacheOptions co;
  co.kind = PlannerKind::kLru;
  co.protect_steps = 2;
  co.capacity_rows = 20;
  Rig rig(co, 2, ZipfSource(10, 40));
  RowPipeline<RowBatch>& p = rig.pipeline;
  p.Start();
  Status s;
  EXPECT_EQ(p.WaitReady(0, s), nullptr);
  EXPECT_NE(s.message().find("row cache of 20 rows is full at step 0: the step's own"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(p.Stop().ok());
}

TEST(RowPrefetcher, InMemoryMatchesModel) {
  for (bool dense : {true, false}) {
    std::vector<uint64_t> offsets;
    if (dense) offsets = {0, 2001, 4002, 6003};
    MemoryRows rows(kRowBytes, offsets, InitRow);
    Model model;
    RowPrefetcherOptions po;
    RowPipeline<RowBatch> p(&rows, po, ZipfSource(60, 30),
                            &RowPipeline<RowBatch>::Identity);
    Drive(p, 60, model);
  }
}

TEST(RowPrefetcher, SourceErrorEndsThePipeline) {
  RowCacheOptions co;
  co.window_steps = 2;
  co.protect_steps = 1;
  co.capacity_rows = MinCapacityRows(2, 1, 30 * kPerSample);
  RowCache cache(co);
  AlignedBuffer arena(co.capacity_rows * kRowBytes, 64);
  MapBacking backing;
  RowPrefetcherOptions po;
  po.run_ahead = 1;
  po.io.backend = BackendKind::kPread;
  RowPipeline<RowBatch> p(&cache, arena.data(), kRowBytes, &backing, po, ZipfSource(100, 30, 5),
                            &RowPipeline<RowBatch>::Identity);
  p.Start();
  Status s;
  uint64_t t = 0;
  for (; t < 100; ++t) {
    if (p.WaitReady(t, s) == nullptr) break;
    p.Computed(t);
  }
  EXPECT_LE(t, 5u);
  EXPECT_NE(s.message().find("read failed at step 5"), std::string::npos) << s.ToString();
  EXPECT_FALSE(p.Stop().ok());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Ctrl-C: compute stops after some step while io has planned steps beyond it; after Stop and a
// flush, the store must hold every update (a planned step's write-backs are never skipped), also
// when steps drain (a cache of two steps' rows: a half-placed step's evictions are written back).
TEST(RowPrefetcher, StopMidwayLosesNoUpdate) {
  const uint64_t in_flight = MinCapacityRows(0, 4, 40 * kPerSample);
  for (int run = 0; run < 6; ++run) {
    const uint64_t capacity = run < 3 ? in_flight + 10 : uint64_t{2} * 40 * kPerSample + 10;
    const int stop_after = std::array<int, 3>{7, 23, 41}[run % 3];
    RowCacheOptions co;
    co.window_steps = 3;
    co.protect_steps = 4;
    co.capacity_rows = capacity;  // the window overflows
    Rig rig(co, 4, ZipfSource(100, 40));
    RowPipeline<RowBatch>& p = rig.pipeline;
    Model model;
    p.Start();
    for (int t = 0; t < stop_after; ++t) {
      Status s;
      RowBatch* b = p.WaitReady(t, s);
      ASSERT_NE(b, nullptr) << s.ToString();
      for (size_t j = 0; j < b->unique.size(); ++j) {
        uint64_t v;
        std::memcpy(&v, b->rows[j], 8);
        ASSERT_EQ(v, model.Get(b->unique[j]));
        v += t + 1;
        std::memcpy(b->rows[j], &v, 8);
        model.value[{b->unique[j].table, b->unique[j].id}] = v;
      }
      p.Computed(t);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let io run ahead
    ASSERT_TRUE(p.Stop().ok());
    if (capacity < in_flight) {
      EXPECT_GT(rig.cache.stats().drained_steps, 0u);
    }
    auto io = IoSession::Create(rig.options.io);
    ASSERT_TRUE(io.ok());
    ASSERT_TRUE(FlushRowCache(rig.cache, rig.arena.data(), kRowBytes, rig.backing, **io).ok());
    for (const auto& [k, v] : model.value) {
      auto it = rig.backing.rows_.find(k);
      ASSERT_NE(it, rig.backing.rows_.end()) << "stop after " << stop_after;
      uint64_t stored;
      std::memcpy(&stored, it->second.data(), 8);
      EXPECT_EQ(stored, v) << "stop after " << stop_after;
    }
  }
}

}  // namespace
}  // namespace sluice
