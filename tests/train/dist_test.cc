#include "train/dist.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "train/data_parallel.h"
#include "train/fingerprint.h"
#include "train/model_step.h"
#include "train/sharded_rows.h"

namespace sluice {
namespace {

EnvReader Env(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(DistPlaceTest, FlagsWinOverTheEnvironmentWhichWinsOverOneProcess) {
  auto one = ResolveDistPlace(0, -1, "", Env({}));
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->distributed());
  auto env = ResolveDistPlace(0, -1, "", Env({{"WORLD_SIZE", "3"}, {"RANK", "2"}, {"MASTER_ADDR", "10.1.2.3"},
                                               {"MASTER_PORT", "4000"}}));
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->world_size, 3);
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->master(), "10.1.2.3:4000");
  auto flags = ResolveDistPlace(4, 1, "host:5000", Env({{"WORLD_SIZE", "3"}, {"RANK", "2"}}));
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->world_size, 4);
  EXPECT_EQ(flags->rank, 1);
  EXPECT_EQ(flags->master(), "host:5000");
  auto default_port = ResolveDistPlace(2, 0, "host", Env({}));
  ASSERT_TRUE(default_port.ok());
  EXPECT_EQ(default_port->master(), "host:29500");
}

TEST(DistPlaceTest, AnImpossiblePlaceSaysWhichValueCameFromWhere) {
  auto outside = ResolveDistPlace(2, 2, "", Env({}));
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("rank 2 (--rank) is outside a world of 2 (--world-size)"),
            std::string::npos) << outside.status().message();
  auto no_rank = ResolveDistPlace(3, -1, "", Env({}));
  ASSERT_FALSE(no_rank.ok());
  EXPECT_NE(no_rank.status().message().find("no rank"), std::string::npos);
  auto bad_env = ResolveDistPlace(0, -1, "", Env({{"WORLD_SIZE", "two"}, {"RANK", "0"}}));
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.status().message().find("WORLD_SIZE is 'two'"), std::string::npos);
  auto bad_port = ResolveDistPlace(2, 0, "", Env({{"MASTER_PORT", "70000"}}));
  ASSERT_FALSE(bad_port.ok());
  EXPECT_NE(bad_port.status().message().find("port 70000"), std::string::npos) << bad_port.status().message();
}

TEST(DistPlaceTest, AWorldOfOneWithARankIsAProcessGroupOfOne) {
  auto alone = ResolveDistPlace(0, -1, "", Env({{"WORLD_SIZE", "1"}}));
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_FALSE(alone->distributed());
  auto flags = ResolveDistPlace(1, 0, "127.0.0.1:4000", Env({}));
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  EXPECT_TRUE(flags->distributed());
  EXPECT_EQ(flags->world_size, 1);
  auto torchrun = ResolveDistPlace(0, -1, "", Env({{"WORLD_SIZE", "1"}, {"RANK", "0"}}));
  ASSERT_TRUE(torchrun.ok()) << torchrun.status().ToString();
  EXPECT_TRUE(torchrun->distributed());
  auto two = ResolveDistPlace(2, 1, "", Env({}));
  ASSERT_TRUE(two.ok());
  EXPECT_TRUE(two->distributed());
}

TEST(DistBackendTest, AutoTakesGlooThenNcclAndAMissingOneIsNamed) {
  Result<DistBackend> autod = ResolveDistBackend(DistBackend::kAuto, 2);
  if (HaveGloo()) {
    ASSERT_TRUE(autod.ok());
    EXPECT_EQ(*autod, DistBackend::kGloo);
  } else if (HaveNccl()) {
    ASSERT_TRUE(autod.ok());
    EXPECT_EQ(*autod, DistBackend::kNccl);
  } else {
    ASSERT_FALSE(autod.ok());
    EXPECT_NE(autod.status().message().find("world size 2: this sluice was built without Gloo process groups"),
              std::string::npos) << autod.status().message();
  }
  Result<DistBackend> nccl = ResolveDistBackend(DistBackend::kNccl, 2);
  EXPECT_EQ(nccl.ok(), HaveNccl());
  if (!nccl.ok()) {
    EXPECT_EQ(nccl.status().message(), "dist.backend nccl: this sluice was built without NCCL process groups "
                                       "(build with -DSLUICE_CUDA=ON against a CUDA PyTorch: docs/gpu.md)");
  }
  EXPECT_EQ(ResolveDistBackend(DistBackend::kGloo, 2).ok(), HaveGloo());
}

TEST(DistBackendTest, RanksWhoseBackendDiffersFromRankZerosAreNamed) {
  const std::vector<std::string> same{"gloo", "gloo", "gloo"};
  EXPECT_TRUE(SameBackends(same).ok());
  const std::vector<std::string> one{"gloo", "nccl", "gloo"};
  EXPECT_EQ(SameBackends(one).message(), "rank 1 differs from rank 0 in dist.backend: nccl on rank 1, gloo on rank 0");
  const std::vector<std::string> two{"nccl", "gloo", "gloo"};
  EXPECT_EQ(SameBackends(two).message(),
            "ranks 1, 2 differ from rank 0 in dist.backend: gloo on rank 1, nccl on rank 0");
}

TEST(DistAgreementTest, TheFirstDifferingKeyIsNamedWithBothValues) {
  EXPECT_EQ(FirstDifference("task: a\ntrain.lr: 0.05\n", "rank 1", "task: a\ntrain.lr: 0.1\n", "rank 0"),
            "train.lr is 0.05 on rank 1, 0.1 on rank 0");
  EXPECT_EQ(FirstDifference("x\n", "rank 2", "y\n", "rank 0"), "'x' on rank 2, 'y' on rank 0");
  EXPECT_EQ(FirstDifference("a: 1\n", "rank 1", "a: 1\nb: 2\n", "rank 0"), "'(end)' on rank 1, 'b: 2' on rank 0");
}

TEST(DistAgreementTest, FingerprintLinesHoldTheFingerprintedKeysOnly) {
  const std::string lines = FingerprintLines(
      "task: recommendation\ndataset: d\nrun_dir: r\nmodel:\n  dim: 16\n  bottom: [512, 256]\n"
      "train:\n  epochs: 3\n  lr: 0.05\nstorage:\n  budget: 1GiB\n");
  EXPECT_EQ(lines, "task: recommendation\nmodel.dim: 16\nmodel.bottom: [512, 256]\ntrain.lr: 0.05\n");
}

// Shards cover a batch without gaps or overlaps, in order, for any batch (also one smaller
// than the shard count); row ranges cover the tables the same way.
TEST(DataParallelTest, ShardsAndRowRangesCoverEverythingOnceInOrder) {
  for (const uint64_t n : {0ull, 1ull, 5ull, 200ull, 2049ull}) {
    uint64_t next = 0;
    for (int v = 0; v < 12; ++v) {
      const auto [lo, hi] = DataParallel::ShardSamples(v, 12, n);
      EXPECT_EQ(lo, next);
      EXPECT_LE(hi - lo, n / 12 + 1);
      next = hi;
    }
    EXPECT_EQ(next, n);
  }
  for (const int world : {1, 2, 3, 7}) {
    uint64_t next = 0;
    for (int r = 0; r < world; ++r) {
      const auto [lo, hi] = DataParallel::RowRange(r, world, 24577);
      EXPECT_EQ(lo, next);
      next = hi;
    }
    EXPECT_EQ(next, 24577u);
  }
}

// One process runs every shard: the exchange folds its own payloads in shard order (or none, when
// the caller added them as it computed them) and takes its stop wish.
TEST(DataParallelTest, OneProcessFoldsItsOwnShardsAndCarriesItsStopWish) {
  DataParallel dp(nullptr, 3);
  EXPECT_EQ(dp.first_shard(), 0);
  EXPECT_EQ(dp.end_shard(), 3);
  EXPECT_EQ(dp.ExchangeBufferBytes(1000), 0u);
  const std::vector<float> mine = {1, 2, 3, 4, 5, 6};
  std::vector<std::vector<float>> folded;
  const auto fold = [&](int v, uint64_t first, uint64_t n, const float* from) {
    folded.push_back({static_cast<float>(v), static_cast<float>(first), static_cast<float>(n), from[0], from[1]});
  };
  bool stop = false;
  dp.set_stop_probe([&stop] { return stop; });
  ASSERT_TRUE(dp.ExchangeShards(mine, 2, fold).ok());
  EXPECT_EQ(folded, (std::vector<std::vector<float>>{{0, 0, 2, 1, 2}, {1, 0, 2, 3, 4}, {2, 0, 2, 5, 6}}));
  EXPECT_FALSE(dp.any_stop());
  stop = true;
  folded.clear();
  ASSERT_TRUE(dp.ExchangeShards({}, 2, fold).ok());
  EXPECT_TRUE(folded.empty());
  EXPECT_TRUE(dp.any_stop());
  EXPECT_EQ(dp.exchanges(), 2u);
  // A payload that does not match the shards' width is a bug, said as one.
  const std::vector<float> short_payload = {1, 2};
  const Status bad = dp.ExchangeShards(short_payload, 2, fold);
  EXPECT_NE(bad.message().find("sends 2 floats where its 3 shards hold 6"), std::string::npos) << bad.ToString();
}

// One process owning every row: the step's rows are its own (copied where the uses read them),
// and each row's use gradients come back summed in use order: row 5's uses 1e8, 1, -1e8 sum to
// (1e8 + 1) - 1e8 = 0 in float, where another order, (1e8 - 1e8) + 1, would give 1.
TEST(ShardedRowsTest, OneProcessFetchesItsRowsAndSumsEachRowsUsesInUseOrder) {
  DataParallel dp(nullptr, 3);
  ShardedRows sharded(&dp, {0, 10}, 2);
  std::vector<float> row5 = {5, 50}, row7 = {7, 70}, row2 = {2, 20};
  const std::vector<float*> own = {row5.data(), row7.data(), row2.data()};
  const std::vector<uint64_t> rows = {5, 7, 2};
  const std::vector<int64_t> uses = {0, 1, 0, 2, 0};  // row 5 three times
  const std::vector<uint64_t> use_begin = {0, 5};
  ASSERT_TRUE(sharded.Fetch(1, rows, uses, use_begin, own, rows, RowsTo::kTrainingUses).ok());
  ASSERT_EQ(sharded.ptrs().size(), 3u);
  EXPECT_EQ(sharded.ptrs()[1][1], 70.0f);
  EXPECT_EQ(sharded.rows_needed(), 3u);
  const float big = 1e8f, small = 1.0f;
  sharded.use_grads() = {big, 1, 3, 3, small, 2, 4, 4, -big, 3};
  Result<torch::Tensor> sums = sharded.SumOwnGrads();
  ASSERT_TRUE(sums.ok()) << sums.status().ToString();
  ASSERT_EQ(sums->sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ((*sums)[0][0].item<float>(), 0.0f);
  EXPECT_EQ((*sums)[0][1].item<float>(), 6.0f);
  EXPECT_EQ((*sums)[1][0].item<float>(), 3.0f);
  EXPECT_EQ((*sums)[2][1].item<float>(), 4.0f);
  // Loaded rows that do not match the step's own rows are a bug, said as one.
  Status bad = sharded.Fetch(2, rows, uses, use_begin, {own.data(), 2}, {rows.data(), 2}, RowsTo::kTrainingUses);
  EXPECT_NE(bad.message().find("3 rows of this rank but 2 were loaded"), std::string::npos) << bad.ToString();
  const std::vector<uint64_t> swapped = {7, 5, 2};
  bad = sharded.Fetch(3, rows, uses, use_begin, own, swapped, RowsTo::kTrainingUses);
  EXPECT_NE(bad.message().find("not the same rows in the same order"), std::string::npos) << bad.ToString();
}

// A TCP port nobody listens on now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Runs `body` on two ranks (threads of this process, on loopback), each then waiting at a
// barrier; returns each rank's error ("" when none).
std::array<std::string, 2> OnTwoRanks(const std::function<Status(int, DistGroup&)>& body) {
  const int port = FreePort();
  DistConfig config;
  config.interface = "lo", config.rendezvous_timeout = 30, config.op_timeout = 30;
  std::array<std::string, 2> error;
  auto rank = [&](int r) {
    DistPlace place{2, r, "127.0.0.1", port};
    Result<std::unique_ptr<DistGroup>> group = DistGroup::Join(place, config);
    Status s = group.ok() ? body(r, **group) : group.status();
    if (s.ok()) s = (*group)->Barrier();
    if (!s.ok()) error[static_cast<size_t>(r)] = s.ToString();
  };
  std::thread one(rank, 1);
  rank(0);
  one.join();
  return error;
}

// Two ranks (threads of this process, on loopback) own rows 0-3 and 4-7 of a table one float
// wide, row i starting at 100 + i. Step 0 uses rows 1 and 5; step 1 rows 5, 6 and 2. While step 0
// computes, step 1's rows 6 and 2 (step 0 does not use them) travel ahead: their values when the
// prefetch started arrive (each owner writes 9999 into them afterwards, which no step would do, to
// show when they left), while row 5, which step 0 uses and updates (+1000), travels at step 1
// with its update.
TEST(ShardedRowsTest, TheNextStepsRowsThatThisStepDoesNotUseTravelAhead) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no Gloo process groups";
  std::vector<float> got[2];
  uint64_t remote[2] = {0, 0}, ahead[2] = {0, 0};
  const std::array<std::string, 2> error = OnTwoRanks([&](int r, DistGroup& group) -> Status {
    if (group.machines() != 1) return FailedPrecondition("two ranks on one host counted as other machines");
    DataParallel dp(&group, 2);
    // dist.prefetch_rows: auto sends nothing ahead on one machine; on does.
    if (SendsRowsAhead(&dp, RowPrefetch::kAuto) || !SendsRowsAhead(&dp, RowPrefetch::kOn)) {
      return FailedPrecondition("dist.prefetch_rows resolved wrongly on one machine");
    }
    ShardedRows sharded(&dp, {0, 4, 8}, 1);
    std::vector<float> table = {100.0f + 4 * r, 101.0f + 4 * r, 102.0f + 4 * r, 103.0f + 4 * r};
    auto at = [&](uint64_t row) { return &table[row - 4 * static_cast<uint64_t>(r)]; };
    // Step 0: rows {1, 5}; shard 0 uses both, shard 1 row 5.
    const std::vector<uint64_t> rows0 = {1, 5}, begin0 = {0, 2, 3};
    const std::vector<int64_t> uses0 = {0, 1, 1};
    const std::vector<uint64_t> own0 = {r == 0 ? uint64_t{1} : uint64_t{5}};
    const std::vector<float*> ptr0 = {at(own0[0])};
    SLUICE_RETURN_IF_ERROR(sharded.Fetch(0, rows0, uses0, begin0, ptr0, own0, RowsTo::kTrainingUses));
    // Step 1: rows {5, 6, 2}; shard 0 uses rows 5 and 6, shard 1 rows 2 and 5.
    const std::vector<uint64_t> rows1 = {5, 6, 2}, begin1 = {0, 2, 4};
    const std::vector<int64_t> uses1 = {0, 1, 2, 0};
    const std::vector<uint64_t> own1 = r == 0 ? std::vector<uint64_t>{2} : std::vector<uint64_t>{5, 6};
    std::vector<float*> ptr1;
    for (uint64_t row : own1) ptr1.push_back(at(row));
    SLUICE_RETURN_IF_ERROR(sharded.Prefetch(1, rows1, uses1, begin1, ptr1, own1));
    *at(own0[0]) += 1000;                     // step 0's update of its rows
    *at(r == 0 ? 2 : 6) = 9999;               // after the prefetch left
    SLUICE_RETURN_IF_ERROR(sharded.Fetch(1, rows1, uses1, begin1, ptr1, own1, RowsTo::kTrainingUses));
    for (float* p : sharded.ptrs()) got[r].push_back(p != nullptr ? *p : -1.0f);
    // A prefetch the pass stops before: dropped on both ranks.
    SLUICE_RETURN_IF_ERROR(sharded.Prefetch(2, rows0, uses0, begin0, ptr0, own0));
    SLUICE_RETURN_IF_ERROR(sharded.DropPrefetch());
    remote[r] = dp.remote_rows(), ahead[r] = dp.rows_ahead();
    return Status::Ok();
  });
  ASSERT_EQ(error[0], "");
  ASSERT_EQ(error[1], "");
  EXPECT_EQ(got[0], (std::vector<float>{1105, 106, -1}));  // rank 0's shard: rows 5 and 6
  EXPECT_EQ(got[1], (std::vector<float>{1105, -1, 102}));  // rank 1's: rows 2 and 5
  EXPECT_EQ(remote[0], 3u);  // row 5 at steps 0 and 1, row 6 ahead
  EXPECT_EQ(ahead[0], 1u);
  EXPECT_EQ(remote[1], 1u);  // row 2, ahead
  EXPECT_EQ(ahead[1], 1u);
}

// Evaluation across processes: AllGatherV's pieces in rank order, a rank's piece possibly empty,
// and an evaluation step's rows (RowsTo::kEvaluationUses) reach only the rank whose uses read them,
// outside training's row counts.
TEST(ShardedRowsTest, EvaluationGathersPiecesInRankOrderAndSendsRowsToTheirUsers) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no Gloo process groups";
  std::vector<float> gathered[2], empty_first[2], got[2];
  uint64_t remote[2] = {9, 9};
  const std::array<std::string, 2> error = OnTwoRanks([&](int r, DistGroup& group) -> Status {
    DataParallel dp(&group, 2);
    const std::vector<float> mine = r == 0 ? std::vector<float>{1, 2, 3} : std::vector<float>{4};
    Result<std::vector<float>> all = dp.AllGatherV(mine, std::vector<uint64_t>{3, 1}, "test");
    SLUICE_RETURN_IF_ERROR(all.status());
    gathered[r] = *all;
    const std::vector<float> none = r == 0 ? std::vector<float>{} : std::vector<float>{5, 6};
    all = dp.AllGatherV(none, std::vector<uint64_t>{0, 2}, "test");
    SLUICE_RETURN_IF_ERROR(all.status());
    empty_first[r] = *all;
    // Rows 0-1 are rank 0's, 2-3 rank 1's; the step's rows {3, 0}: rank 1's uses read both,
    // rank 0's none.
    ShardedRows sharded(&dp, {0, 2, 4}, 1);
    std::vector<float> table = {10.0f + 2 * r, 11.0f + 2 * r};
    const std::vector<uint64_t> rows = {3, 0}, begin = {0, 0, 2};
    const std::vector<int64_t> uses = {0, 1};
    const std::vector<uint64_t> own = {r == 0 ? uint64_t{0} : uint64_t{3}};
    const std::vector<float*> ptr = {&table[r == 0 ? 0 : 1]};
    SLUICE_RETURN_IF_ERROR(sharded.Fetch(0, rows, uses, begin, ptr, own, RowsTo::kEvaluationUses));
    for (float* p : sharded.ptrs()) got[r].push_back(p != nullptr ? *p : -1.0f);
    remote[r] = dp.remote_rows();
    return Status::Ok();
  });
  ASSERT_EQ(error[0], "");
  ASSERT_EQ(error[1], "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<float>{1, 2, 3, 4})) << r;
    EXPECT_EQ(empty_first[r], (std::vector<float>{5, 6})) << r;
    EXPECT_EQ(remote[r], 0u) << r;
  }
  EXPECT_EQ(got[0], (std::vector<float>{-1, -1}));
  EXPECT_EQ(got[1], (std::vector<float>{13, 10}));
}

// Items gathered in rounds: rank 0's 7 items and rank 1's 2 in rounds of 3 (three rounds, rank 1
// sending none in the last two), each rank unpacking only the other's, in order.
TEST(DataParallelTest, AllGatherItemsTravelInBoundedRounds) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no Gloo process groups";
  const std::vector<uint64_t> counts = {7, 2};
  std::vector<std::vector<float>> got[2];
  const std::array<std::string, 2> error = OnTwoRanks([&](int r, DistGroup& group) -> Status {
    DataParallel dp(&group, 2);
    return dp.AllGatherItems(
        counts, 2, 3,
        [&](uint64_t k, uint64_t n, float* out) {
          EXPECT_LE(n, 3u);  // a round's items at most
          for (uint64_t j = 0; j < n; ++j) {
            out[2 * j] = static_cast<float>(100 * r + k + j), out[2 * j + 1] = -1.0f * static_cast<float>(k + j);
          }
          return Status::Ok();
        },
        [&](int q, uint64_t k, uint64_t n, const float* from) {
          for (uint64_t j = 0; j < n; ++j) {
            got[r].push_back({static_cast<float>(q), static_cast<float>(k + j), from[2 * j], from[2 * j + 1]});
          }
          return Status::Ok();
        },
        "test");
  });
  ASSERT_EQ(error[0], "");
  ASSERT_EQ(error[1], "");
  const std::vector<std::vector<float>> from1 = {{1, 0, 100, 0}, {1, 1, 101, -1}};
  EXPECT_EQ(got[0], from1);
  std::vector<std::vector<float>> from0;
  for (int k = 0; k < 7; ++k) from0.push_back({0, static_cast<float>(k), static_cast<float>(k), -1.0f * k});
  EXPECT_EQ(got[1], from0);
  // One process: nothing travels, nothing is unpacked.
  DataParallel one(nullptr, 2);
  bool called = false;
  ASSERT_TRUE(one.AllGatherItems(
                     std::vector<uint64_t>{3}, 1, 1,
                     [&](uint64_t, uint64_t, float*) { return called = true, Status::Ok(); },
                     [&](int, uint64_t, uint64_t, const float*) { return called = true, Status::Ok(); }, "test")
                  .ok());
  EXPECT_FALSE(called);
}

// A rank whose piece is not the size every rank was told is a bug, named before any exchange.
TEST(DataParallelTest, AllGatherVRefusesAPieceOfTheWrongSize) {
  DataParallel dp(nullptr, 2);
  const std::vector<float> mine = {1, 2};
  Result<std::vector<float>> all = dp.AllGatherV(mine, std::vector<uint64_t>{3}, "the test's pieces");
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().ToString().find("the test's pieces: rank 0 sends 2 floats where 3 were expected"),
            std::string::npos)
      << all.status().ToString();
  all = dp.AllGatherV(mine, std::vector<uint64_t>{2}, "the test's pieces");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, mine);
}

// Two ranks, three shards (rank 0 computes shard 0, rank 1 shards 1 and 2), payloads wider than
// a round holds: the columns travel in three rounds, and in each round every rank folds every
// shard's columns of it in shard order; the columns of a shard come once each, in order; rank
// 1's stop wish reaches both; the bytes sent are the rounds' parts (two shards' columns and the
// stop wish, rank 0's padded to rank 1's two shards).
TEST(DataParallelTest, ShardsTravelInRoundsOfColumnsAndFoldInShardOrder) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no Gloo process groups";
  constexpr uint64_t kWidth = 2'500'000;
  const auto value = [](int v, uint64_t c) { return static_cast<float>(1000 * v + static_cast<int>(c % 997)); };
  struct Seen {
    std::vector<std::array<uint64_t, 3>> calls;  // v, first, n
    uint64_t wrong = 0;
    bool stop = false;
    uint64_t sent = 0, received = 0, columns = 0, buffer = 0;
  } seen[2];
  const std::array<std::string, 2> error = OnTwoRanks([&](int r, DistGroup& group) -> Status {
    DataParallel dp(&group, 3);
    dp.set_stop_probe([r] { return r == 1; });
    std::vector<float> mine;
    for (int v = dp.first_shard(); v < dp.end_shard(); ++v) {
      for (uint64_t c = 0; c < kWidth; ++c) mine.push_back(value(v, c));
    }
    Seen& me = seen[r];
    SLUICE_RETURN_IF_ERROR(dp.ExchangeShards(mine, kWidth, [&](int v, uint64_t first, uint64_t n, const float* from) {
      me.calls.push_back({static_cast<uint64_t>(v), first, n});
      for (uint64_t i = 0; i < n; ++i) me.wrong += from[i] != value(v, first + i);
    }));
    me.stop = dp.any_stop(), me.sent = dp.bytes_sent(), me.received = dp.bytes_received();
    me.columns = dp.ExchangeRoundColumns(kWidth), me.buffer = dp.ExchangeBufferBytes(kWidth);
    return Status::Ok();
  });
  ASSERT_EQ(error[0], "");
  ASSERT_EQ(error[1], "");
  const uint64_t columns = (DataParallel::kExchangeRoundFloats / 2 - 1) / 2;  // two shards a part
  for (const Seen& me : seen) {
    EXPECT_EQ(me.columns, columns);
    EXPECT_EQ(me.buffer, 4 * (2 * columns + 1) * 3);
    EXPECT_EQ(me.wrong, 0u);
    EXPECT_TRUE(me.stop);
    ASSERT_EQ(me.calls.size(), 9u);  // three rounds of three shards
    for (size_t k = 0; k < me.calls.size(); ++k) {
      const uint64_t round = k / 3, first = round * columns;
      EXPECT_EQ(me.calls[k][0], k % 3);
      EXPECT_EQ(me.calls[k][1], first);
      EXPECT_EQ(me.calls[k][2], std::min(columns, kWidth - first));
    }
    EXPECT_EQ(me.sent, 4 * (2 * kWidth + 3));
    EXPECT_EQ(me.received, 4 * (2 * kWidth + 3));  // the other rank's parts, padded alike
  }
}

// The shards' gradients summed across two ranks are the one process's bits: shard v's
// gradients mix magnitudes (1e7 apart) so that another order of the adds would round otherwise;
// the first parameter is wider than a round holds (three rounds, so a column past the first
// round lands in its place), shard 1 leaves the second parameter without a gradient, and
// shard 2 is empty (added as zeros across processes, skipped in one process).
TEST(ShardGradientsTest, TwoRanksSumTheOneProcesssBits) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no Gloo process groups";
  constexpr int64_t kWide = 2'200'000;
  const auto shard = [](int v, const std::vector<torch::Tensor>& params) {
    for (size_t k = 0; k < params.size(); ++k) {
      if (v == 1 && k == 1) {
        params[k].mutable_grad() = torch::Tensor();
        continue;
      }
      torch::Tensor g = torch::arange(params[k].numel(), torch::kFloat32).view_as(params[k]);
      params[k].mutable_grad() = (g.sin() * (v == 1 ? 1e7f : 1.0f)) + static_cast<float>(v * (k + 1));
    }
    return 0.25 * (v + 1);
  };
  const auto make = [] {
    return std::vector<torch::Tensor>{torch::zeros({kWide}, torch::requires_grad()),
                                      torch::zeros({5, 7}, torch::requires_grad())};
  };
  const auto step = [&](DataParallel& dp, const std::vector<torch::Tensor>& params,
                        const std::vector<int>& order) -> Result<double> {
    ShardGradients grads(dp, params);
    for (const int v : order) {
      if (v < dp.first_shard() || v >= dp.end_shard()) continue;
      if (v == 3) {
        grads.AddEmpty();
        continue;
      }
      const double loss = shard(v, params);
      grads.Add(loss, static_cast<uint64_t>(v + 1), 6);
    }
    return grads.Finish();
  };
  const std::vector<int> in_order = {0, 1, 2, 3};
  const std::vector<torch::Tensor> one = make();
  DataParallel alone(nullptr, 4);
  Result<double> want = step(alone, one, in_order);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  std::vector<torch::Tensor> ranks[2] = {make(), make()};
  double loss[2] = {0, 0};
  uint64_t columns = 0;
  const std::array<std::string, 2> error = OnTwoRanks([&](int r, DistGroup& group) -> Status {
    DataParallel dp(&group, 4);
    if (r == 0) columns = dp.ExchangeRoundColumns(1 + DenseFloats(ranks[r]));
    SLUICE_ASSIGN_OR_RETURN(loss[r], step(dp, ranks[r], in_order));
    return Status::Ok();
  });
  ASSERT_EQ(error[0], "");
  ASSERT_EQ(error[1], "");
  EXPECT_EQ((1 + DenseFloats(one) + columns - 1) / columns, 3u);  // rounds
  const auto same = [](const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y, size_t k) {
    return std::memcmp(x[k].grad().data_ptr<float>(), y[k].grad().data_ptr<float>(),
                       static_cast<size_t>(x[k].numel()) * 4) == 0;
  };
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(loss[r], *want);
    for (size_t k = 0; k < one.size(); ++k) EXPECT_TRUE(same(ranks[r], one, k)) << "rank " << r << ", parameter " << k;
  }
  // The sum in another order (shard 2 before shard 1) differs in its bits: the test can tell.
  ASSERT_TRUE(step(alone, one, {0, 2, 1, 3}).ok());
  EXPECT_FALSE(same(ranks[0], one, 0));
  EXPECT_TRUE(same(ranks[0], one, 1));  // shard 1 has none of the second: the same two adds
}

}  // namespace
}  // namespace sluice
