// BlockPrefetcher: random steps run through the planner/io thread with run-ahead while this
// thread computes (checks every block it reads against a plain array model, updates some), and
// the table on disk equals the model at the end. Also: a failing source ends the pipeline with
// its error, and Abort unblocks a waiting compute thread. Runs under TSan (torch-free).

#include "prefetch/block_prefetcher.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

struct Steps {
  std::vector<std::vector<BlockId>> blocks;
  std::vector<bool> writes;
};

Steps RandomSteps(uint32_t num_blocks, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Steps s;
  for (int t = 0; t < count; ++t) {
    std::vector<BlockId> set;
    const int n = 1 + static_cast<int>(rng() % 3);
    while (static_cast<int>(set.size()) < n) {
      const BlockId b = static_cast<BlockId>(rng() % num_blocks);
      if (std::find(set.begin(), set.end(), b) == set.end()) set.push_back(b);
    }
    s.blocks.push_back(set);
    s.writes.push_back(rng() % 3 != 0);
  }
  return s;
}

void RunAndCompare(uint32_t run_ahead, PlannerKind kind, uint64_t seed) {
  TempDir dir;
  constexpr uint32_t kRowBytes = 512, kRowsPerBlock = 16, kBlocks = 20;
  constexpr uint64_t kRows = uint64_t{kRowsPerBlock} * kBlocks;
  auto table = RowFile::Create(dir.File("t.rows"), kRowBytes, kRows, RowFileOptions{});
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  std::vector<std::byte> model(kRows * kRowBytes);
  std::mt19937_64 rng(seed);
  for (auto& byte : model) byte = static_cast<std::byte>(rng());
  auto init = testing::Session(BackendKind::kPread);
  ASSERT_TRUE((*table)->WriteRange(*init, 0, kRows, model.data()).ok());

  BlockCacheOptions co;
  co.rows_per_block = kRowsPerBlock;
  co.capacity_blocks = 3 * (run_ahead + 1) + 1;  // any run_ahead + 1 steps fit, plus one
  BlockCache cache(table->get(), co);
  const Steps steps = RandomSteps(kBlocks, 300, seed + 1);
  PrefetcherOptions po;
  po.planner = kind;
  po.run_ahead = run_ahead;
  po.window_steps = 40;
  po.io.backend = BackendKind::kPread;
  RunAheadRing ring(1, 1);
  BlockPrefetcher prefetcher(&cache, po, [&](uint64_t t, std::vector<BlockId>& blocks) {
    if (t >= steps.blocks.size()) return false;
    blocks = steps.blocks[t];
    return true;
  }, &ring, 0);
  prefetcher.Start();
  const uint64_t block_bytes = cache.block_bytes();
  for (uint64_t t = 0; t < steps.blocks.size(); ++t) {
    Status ready = ring.WaitReady(t);
    ASSERT_TRUE(ready.ok()) << ready.ToString();
    for (BlockId b : steps.blocks[t]) {
      std::byte* data = cache.block_data(b);
      ASSERT_EQ(std::memcmp(data, &model[b * block_bytes], block_bytes), 0)
          << "step " << t << " block " << b << " is stale";
      if (!steps.writes[t]) continue;
      for (uint64_t i = 0; i < block_bytes; i += 5) data[i] = static_cast<std::byte>(t * 31 + i);
      std::memcpy(&model[b * block_bytes], data, block_bytes);
      cache.MarkDirty(b);
    }
    ring.Computed(t);
  }
  EXPECT_EQ(ring.WaitReady(steps.blocks.size()).code(), StatusCode::kOutOfRange);
  ring.Stop();
  ASSERT_TRUE(prefetcher.Join().ok());
  ASSERT_TRUE(prefetcher.FlushDirty().ok());
  std::vector<std::byte> disk(model.size());
  ASSERT_TRUE((*table)->ReadRange(*init, 0, kRows, disk.data()).ok());
  EXPECT_TRUE(disk == model) << "the table on disk differs from the model after the flush";
  EXPECT_GT(prefetcher.plan_stats().write_backs, 0u) << "the test never wrote a block back";
}

TEST(BlockPrefetcherTest, RunAheadComputeMatchesAPlainArray) {
  for (uint32_t run_ahead : {0u, 1u, 4u}) {
    for (PlannerKind kind : {PlannerKind::kOracle, PlannerKind::kLru}) {
      SCOPED_TRACE("run_ahead " + std::to_string(run_ahead) + " " + PlannerKindName(kind));
      RunAndCompare(run_ahead, kind, 10 + run_ahead);
    }
  }
}

TEST(BlockPrefetcherTest, AbortUnblocksAWaitingComputeThread) {
  TempDir dir;
  auto table = RowFile::Create(dir.File("t.rows"), 512, 64, RowFileOptions{});
  ASSERT_TRUE(table.ok());
  BlockCacheOptions co;
  co.rows_per_block = 8;
  co.capacity_blocks = 4;
  BlockCache cache(table->get(), co);
  PrefetcherOptions po;
  po.io.backend = BackendKind::kPread;
  po.run_ahead = 0;
  RunAheadRing ring(1, 1);
  BlockPrefetcher prefetcher(&cache, po, [](uint64_t t, std::vector<BlockId>& blocks) {
    blocks = {static_cast<BlockId>(t % 8)};
    return true;  // an endless source
  }, &ring, 0);
  prefetcher.Start();
  ASSERT_TRUE(ring.WaitReady(0).ok());
  // Step 1's io waits for step 0 to compute, which never happens: Abort must end the wait.
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ring.Abort(Aborted("stopped by the test"));
  });
  Status s = ring.WaitReady(5);
  aborter.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_TRUE(prefetcher.Join().ok());
}

}  // namespace
}  // namespace sluice
