// The memory plans are pure functions of a budget and shapes: table-driven cases from a
// budget too small for one step, through exactly enough, to one larger than everything.

#include "prefetch/memory_plan.h"

#include <gtest/gtest.h>

#include "common/units.h"
#include "storage/file.h"

namespace sluice {
namespace {

// Link prediction shapes: 16 partitions of 64 MiB, 300 MiB of runtime and step.
PartitionPlanInput Partitions() {
  PartitionPlanInput in;
  in.runtime_bytes = 250ull << 20;
  in.step_bytes = 40ull << 20;
  in.ring_bytes = 2ull << 20;
  in.block_bytes = 64ull << 20;
  in.table_bytes = 16 * in.block_bytes;
  in.partitions = 16;
  in.largest_state_edges = 1'000'000;
  return in;
}

uint64_t Fixed(const PartitionPlanInput& in) {
  return in.runtime_bytes + in.step_bytes + in.ring_bytes + kPartitionSlackBytes;
}

TEST(PartitionMemoryPlanTest, TableDriven) {
  const PartitionPlanInput base = Partitions();
  const uint64_t edges = 2 * base.largest_state_edges * 40;
  const uint64_t slot = base.block_bytes;  // already 4 KiB aligned
  struct Case {
    const char* name;
    uint64_t budget;
    bool ok;
    uint32_t slots, resident;
  };
  const Case cases[] = {
      {"too small for two slots", Fixed(base) + slot, false, 0, 0},
      {"two slots exactly (the edges take the third)", Fixed(base) + edges + 2 * slot, true, 2, 2},
      {"five slots", Fixed(base) + edges + 5 * slot, true, 5, 5},
      {"huge: every partition", 1ull << 40, true, 16, 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PartitionPlanInput in = base;
    in.budget_bytes = c.budget;
    auto p = PlanPartitionMemory(in);
    ASSERT_EQ(p.ok(), c.ok) << (p.ok() ? "" : p.status().ToString());
    if (!c.ok) {
      EXPECT_NE(p.status().message().find("one step needs 2"), std::string::npos) << p.status().message();
      continue;
    }
    EXPECT_EQ(p->slots, c.slots);
    EXPECT_EQ(p->resident, c.resident);
    EXPECT_LE(p->predicted_bytes, c.budget);
    EXPECT_EQ(p->predicted_bytes, p->reserved_bytes + uint64_t{p->slots} * p->slot_bytes);
  }
}

TEST(PartitionMemoryPlanTest, OverridesAreCheckedAgainstTheBudget) {
  PartitionPlanInput in = Partitions();
  in.budget_bytes = Fixed(in) + 2 * in.largest_state_edges * 40 + 5 * in.block_bytes;
  in.slots = 9;
  auto p = PlanPartitionMemory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("storage.slots = 9"), std::string::npos);
  in.slots = 0;
  in.resident = 7;
  p = PlanPartitionMemory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("storage.resident = 7"), std::string::npos);
  in.resident = 0;
  in.shuffle = true;  // needs every partition at once
  p = PlanPartitionMemory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("shuffle needs all 16"), std::string::npos);
}

TEST(PartitionMemoryPlanTest, InMemoryPredictsTheWholeTable) {
  PartitionPlanInput in = Partitions();
  in.in_memory = true;
  auto p = PlanPartitionMemory(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->slots, 16u);
  EXPECT_EQ(p->predicted_bytes, Fixed(in) + 2 * in.largest_state_edges * 40 + in.table_bytes);
}

// The planted-log shapes: 26 tables, dim 16 with the linear term, batch 2048, 1 GiB.
RowPlanInput Planted() {
  RowPlanInput in;
  in.budget_bytes = 1ull << 30;
  in.model_bytes = 500'000ull * 16;
  in.step_bytes = 2048ull * (26 * 17 * 4 * 6 + 27 * 27 * 4 * 3 + 1552 * 4 * 4);
  in.keys_per_step = 2048ull * 26;
  in.step_record_bytes = 2048ull * 264;
  in.row_bytes = 72;
  in.total_rows = 26'000'000;
  in.io_merge_max_bytes = 64 << 10;
  in.sampled_rows_per_step = 30'000;
  return in;
}

TEST(RowMemoryPlanTest, TableDriven) {
  struct Case {
    const char* name;
    uint64_t budget;
    bool ok;
    const char* error;
  };
  const Case cases[] = {
      {"too small for one step", 20ull << 20, false, "cannot hold one step's working set"},
      {"small: the window shrinks", 400ull << 20, true, ""},
      {"the default", 1ull << 30, true, ""},
      {"huge: every row cached", 1ull << 40, true, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RowPlanInput in = Planted();
    in.budget_bytes = c.budget;
    auto p = PlanRowMemory(in);
    ASSERT_EQ(p.ok(), c.ok) << (p.ok() ? "" : p.status().ToString());
    if (!c.ok) {
      EXPECT_NE(p.status().message().find(c.error), std::string::npos) << p.status().message();
      continue;
    }
    EXPECT_LE(p->predicted_bytes, c.budget);
    EXPECT_GE(p->cache_rows, p->min_rows);
    EXPECT_LE(p->cache_rows, in.total_rows);
    if (c.budget == (1ull << 40)) {
      EXPECT_EQ(p->cache_rows, in.total_rows);
    }
    if (c.budget == (1ull << 30)) {
      EXPECT_GT(p->predicted_bytes, c.budget * 9 / 10);  // the rest of the budget holds rows
      EXPECT_GT(p->staging_rows, 0u);
      EXPECT_EQ(p->window, 16u);
    }
  }
}

TEST(RowMemoryPlanTest, ExactlyEnoughForTheStepsInFlight) {
  // The smallest budget that plans: found by bisection, then one byte less fails.
  RowPlanInput in = Planted();
  in.window = 0;
  uint64_t lo = 1 << 20, hi = 1ull << 32;
  while (lo + 1 < hi) {
    in.budget_bytes = lo + (hi - lo) / 2;
    (PlanRowMemory(in).ok() ? hi : lo) = in.budget_bytes;
  }
  in.budget_bytes = hi;
  auto p = PlanRowMemory(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->cache_rows, p->min_rows);
  EXPECT_LE(p->predicted_bytes, hi);
  in.budget_bytes = hi - 1;
  EXPECT_FALSE(PlanRowMemory(in).ok());
}

TEST(RowMemoryPlanTest, AnyWindowPlansWhereNoWindowDoes) {
  // A budget that holds the steps in flight without a window holds them with any window asked
  // for: the window shrinks to what fits, never the cache below the steps in flight. (A window
  // of 16 at 400 MiB once failed at start-up: the window's fit counted the cache's index for
  // one step fewer than the cache then sized it for, and read-ahead took its share regardless.)
  for (const double preload : {0.0, 0.25}) {
    for (const uint64_t step_rows : {30'000ull, 53'248ull}) {
      RowPlanInput in = Planted();
      in.preload_share = preload;
      in.sampled_rows_per_step = step_rows;
      in.window = 0;
      uint64_t lo = 1 << 20, hi = 1ull << 34;
      while (lo + 1 < hi) {
        in.budget_bytes = lo + (hi - lo) / 2;
        (PlanRowMemory(in).ok() ? hi : lo) = in.budget_bytes;
      }
      for (uint64_t budget = hi; budget < 8 * hi; budget += budget / 37) {
        for (const uint32_t window : {1u, 4u, 16u, 64u}) {
          SCOPED_TRACE("preload " + std::to_string(preload) + ", step rows " + std::to_string(step_rows) +
                       ", budget " + std::to_string(budget) + ", window " + std::to_string(window));
          in.budget_bytes = budget;
          in.window = window;
          auto p = PlanRowMemory(in);
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          EXPECT_LE(p->window, window);
          EXPECT_GE(p->cache_rows, p->min_rows);
          EXPECT_LE(p->predicted_bytes, budget);
        }
      }
      in.budget_bytes = 8 * hi;
      in.window = 16;
      EXPECT_EQ(PlanRowMemory(in)->window, 16u);  // room enough: the window asked for
    }
  }
}

TEST(RowMemoryPlanTest, RawIdsInRocksDbPlanNoRowFileParts) {
  // model.ids: raw has no dense tables (total_rows 0). The old inline plan read the last row
  // offset of an empty vector here (found by UBSan); the plan must not touch it.
  RowPlanInput in = Planted();
  in.total_rows = 0;
  in.raw_ids = true;
  in.rocksdb = true;
  in.kv_bytes = 48ull << 20;
  in.preload_share = 0.25;  // asked for, but a row file feature
  auto p = PlanRowMemory(in);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->preload_rows, 0u);
  EXPECT_EQ(p->staging_rows, 0u);
  EXPECT_EQ(p->kv_bytes, 48ull << 20);
  EXPECT_LE(p->predicted_bytes, in.budget_bytes);
}

TEST(RowMemoryPlanTest, ReadAheadTakesItsShare) {
  RowPlanInput in = Planted();
  in.preload_share = 0.25;
  auto p = PlanRowMemory(in);
  ASSERT_TRUE(p.ok());
  EXPECT_GT(p->preload_rows, 0u);
  EXPECT_LE(p->predicted_bytes, in.budget_bytes);
}

// storage.cache_rows below the steps in flight runs (steps wait for the ones in flight), below a
// step's rows it is refused.
TEST(RowMemoryPlanTest, ACacheSmallerThanAStepIsRefused) {
  RowPlanInput in = Planted();
  in.cache_rows = 10;
  auto p = PlanRowMemory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("storage.cache_rows 10 cannot hold two steps'"), std::string::npos)
      << p.status().message();
  in.sampled_rows_per_step = in.keys_per_step / 4;
  const uint64_t step = in.sampled_rows_per_step;
  for (const uint32_t run_ahead : {0u, 2u}) {
    in.run_ahead = run_ahead;
    in.cache_rows = run_ahead > 0 ? 2 * step : step;
    p = PlanRowMemory(in);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_LT(p->cache_rows, p->min_rows);
    --in.cache_rows;
    EXPECT_FALSE(PlanRowMemory(in).ok());
  }
}

}  // namespace
}  // namespace sluice
