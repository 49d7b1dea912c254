#include "train/checkpoint_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "storage/dirty_pages.h"
#include "storage/file.h"
#include "tests/storage/test_util.h"
#include "train/row_checkpoint.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = fs::path(tmp_.path()) / "run";
    fs::create_directories(run_ / "checkpoints");
    fs::create_directories(run_ / "src");
    std::ofstream(run_ / "src/table.bin", std::ios::binary) << std::string(100000, 'x');
  }
  void TearDown() override { fs::remove_all(run_); }

  CheckpointState State(uint64_t epoch, uint64_t step) {
    CheckpointState s;
    s.task = "link_prediction";
    s.epoch = epoch, s.step = step, s.seed = 7;
    s.config_fingerprint = "0badcafe", s.dataset_fingerprint = "12345678";
    s.conditions["threads"] = "total 2";
    s.best_score = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  // A checkpoint with a copied table and a written file.
  Status Write(CheckpointStore& store, uint64_t epoch, bool best = false) {
    return store.Write(CheckpointName(epoch, 0), State(epoch, 0), [&](CheckpointWriter& w) {
      SLUICE_RETURN_IF_ERROR(w.CopyIn((run_ / "src/table.bin").string(), "nodes.bin"));
      return w.WriteString("dense.pt", "dense state of epoch " + std::to_string(epoch));
    }, best);
  }
  void Corrupt(const fs::path& path, uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(offset));
    c = static_cast<char>(c ^ 0x01);
    f.write(&c, 1);
  }

  // std::filesystem::temp_directory_path() crashed every test that called it when this binary
  // was linked against PyTorch 2.11's pip libtorch (on the GPU machine); mkdtemp does not.
  testing::TempDir tmp_;
  fs::path run_;
};

TEST_F(CheckpointStoreTest, RecordsEveryFilesSizeAndCrcAndReadsTheStateBack) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  auto r = store.Open("epoch-1-step-0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const CheckpointState& s = r->state();
  EXPECT_EQ(s.format, kCheckpointFormat);
  EXPECT_EQ(s.task, "link_prediction");
  EXPECT_EQ(s.epoch, 1u);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.config_fingerprint, "0badcafe");
  EXPECT_EQ(s.conditions.at("threads"), "total 2");
  EXPECT_TRUE(std::isnan(s.best_score));
  ASSERT_EQ(s.files.size(), 2u);
  EXPECT_EQ(s.files[0].path, "nodes.bin");
  EXPECT_EQ(s.files[0].bytes, 100000u);
  auto digest = DigestFile((run_ / "src/table.bin").string());
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(s.files[0].crc32, digest->crc32);
  EXPECT_TRUE(r->Has("dense.pt"));
  EXPECT_FALSE(r->Has("kv"));
  EXPECT_FALSE(r->PathOf("kv").ok());
  EXPECT_EQ(store.Latest().value(), "epoch-1-step-0");
}

TEST_F(CheckpointStoreTest, DataFilesAreSyncedBeforeTheStateFileAndTheRename) {
  CheckpointStore store(run_.string());
  RecordSyncsForTesting(true);
  ASSERT_TRUE(Write(store, 2).ok());
  std::vector<std::string> synced = SyncedPathsForTesting();
  RecordSyncsForTesting(false);
  auto at = [&](const std::string& suffix) -> ptrdiff_t {
    for (size_t i = 0; i < synced.size(); ++i) {
      if (synced[i].size() >= suffix.size() &&
          synced[i].compare(synced[i].size() - suffix.size(), suffix.size(), suffix) == 0) {
        return static_cast<ptrdiff_t>(i);
      }
    }
    return -1;
  };
  const ptrdiff_t table = at("epoch-2-step-0.tmp/nodes.bin");
  const ptrdiff_t dense = at("epoch-2-step-0.tmp/dense.pt");
  const ptrdiff_t state = at("epoch-2-step-0.tmp/state.json");
  const ptrdiff_t dir = at("epoch-2-step-0.tmp");
  const ptrdiff_t parent = at("/checkpoints");
  ASSERT_GE(table, 0);
  ASSERT_GE(dense, 0);
  ASSERT_GE(state, 0);
  EXPECT_LT(table, state);
  EXPECT_LT(dense, state);
  EXPECT_LT(state, dir);
  EXPECT_LT(dir, parent);  // the rename is made durable after the checkpoint's contents
}

TEST_F(CheckpointStoreTest, ATruncatedFileIsOneLineNamingIt) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  fs::resize_file(run_ / "checkpoints/epoch-1-step-0/nodes.bin", 1000);
  auto r = store.Open("epoch-1-step-0");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("epoch-1-step-0/nodes.bin"), std::string::npos) << m;
  EXPECT_NE(m.find("100000 bytes"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST_F(CheckpointStoreTest, AFlippedBitIsFoundByItsCrc) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  Corrupt(run_ / "checkpoints/epoch-1-step-0/nodes.bin", 77777);
  auto r = store.Open("epoch-1-step-0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nodes.bin: checksum mismatch"), std::string::npos)
      << r.status().message();
}

TEST_F(CheckpointStoreTest, AMissingFileIsNamed) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  fs::remove(run_ / "checkpoints/epoch-1-step-0/dense.pt");
  auto r = store.Open("epoch-1-step-0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dense.pt: missing"), std::string::npos);
}

TEST_F(CheckpointStoreTest, AnOlderFormatIsRefusedInOneLine) {
  fs::create_directories(run_ / "checkpoints/epoch-1-step-0");
  std::ofstream(run_ / "checkpoints/epoch-1-step-0/state.json")
      << "{\"epoch\": 1, \"step\": 0, \"seed\": 1, \"config\": \"x\", \"dataset\": \"y\"}\n";
  CheckpointStore store(run_.string());
  auto r = store.Open("epoch-1-step-0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("older format"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("state.json"), std::string::npos);
  std::ofstream(run_ / "checkpoints/epoch-1-step-0/state.json") << "{\"format\": 2, \"epo";
  r = store.Open("epoch-1-step-0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unreadable checkpoint state"), std::string::npos);
}

TEST_F(CheckpointStoreTest, KeepsTheTwoNewestAndTheBest) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  ASSERT_TRUE(Write(store, 2, /*best=*/true).ok());
  ASSERT_TRUE(Write(store, 3).ok());
  ASSERT_TRUE(Write(store, 4).ok());
  EXPECT_EQ(store.List(), (std::vector<std::string>{"epoch-2-step-0", "epoch-3-step-0",
                                                     "epoch-4-step-0"}));
  ASSERT_TRUE(Write(store, 5, /*best=*/true).ok());
  EXPECT_EQ(store.List(), (std::vector<std::string>{"epoch-4-step-0", "epoch-5-step-0"}));
  EXPECT_EQ(store.Best().value(), "epoch-5-step-0");
}

TEST_F(CheckpointStoreTest, ResolvesDefaultBestLatestAndNames) {
  CheckpointStore store(run_.string());
  EXPECT_FALSE(store.Resolve("default").ok());
  ASSERT_TRUE(Write(store, 1).ok());
  EXPECT_EQ(store.Resolve("default").value(), "epoch-1-step-0");  // no best: latest
  EXPECT_FALSE(store.Resolve("best").ok());
  ASSERT_TRUE(Write(store, 2, /*best=*/true).ok());
  ASSERT_TRUE(Write(store, 3).ok());
  EXPECT_EQ(store.Resolve("default").value(), "epoch-2-step-0");
  EXPECT_EQ(store.Resolve("best").value(), "epoch-2-step-0");
  EXPECT_EQ(store.Resolve("latest").value(), "epoch-3-step-0");
  EXPECT_EQ(store.Resolve("epoch-3-step-0").value(), "epoch-3-step-0");
  auto gone = store.Resolve("epoch-9-step-0");
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("it has: "), std::string::npos);
  EXPECT_NE(gone.status().message().find("epoch-3-step-0"), std::string::npos);
}

TEST_F(CheckpointStoreTest, LatestFallsBackToTheNewestWhenItsPointerIsStale) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  ASSERT_TRUE(Write(store, 2).ok());
  fs::remove_all(run_ / "checkpoints/epoch-2-step-0");  // a crash between remove and rename
  EXPECT_EQ(store.Latest().value(), "epoch-1-step-0");
}

TEST_F(CheckpointStoreTest, LeftoversOfInterruptedWritesAreRemoved) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  fs::create_directories(run_ / "checkpoints/epoch-2-step-0.tmp");
  std::ofstream(run_ / "checkpoints/latest.tmp-123") << "x";
  EXPECT_EQ(store.List(), std::vector<std::string>{"epoch-1-step-0"});
  ASSERT_TRUE(store.RemoveTemporaries().ok());
  EXPECT_FALSE(fs::exists(run_ / "checkpoints/epoch-2-step-0.tmp"));
  EXPECT_FALSE(fs::exists(run_ / "checkpoints/latest.tmp-123"));
  EXPECT_TRUE(fs::exists(run_ / "checkpoints/epoch-1-step-0/state.json"));
}

TEST_F(CheckpointStoreTest, RecordsADirectoryTreeFileByFile) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(store.Write("epoch-1-step-0", State(1, 0), [](CheckpointWriter& w) {
    fs::create_directories(w.PathOf("kv/sub"));
    std::ofstream(w.PathOf("kv/CURRENT")) << "MANIFEST-1\n";
    std::ofstream(w.PathOf("kv/sub/000001.sst")) << std::string(5000, 's');
    return w.Record("kv");
  }, false).ok());
  auto r = store.Open("epoch-1-step-0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->Has("kv"));
  EXPECT_EQ(r->state().files.size(), 2u);
  Corrupt(run_ / "checkpoints/epoch-1-step-0/kv/sub/000001.sst", 10);
  auto bad = store.Open("epoch-1-step-0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kv/sub/000001.sst"), std::string::npos);
}

TEST_F(CheckpointStoreTest, AFailingWriterLeavesNoCheckpoint) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(Write(store, 1).ok());
  Status s = store.Write("epoch-2-step-0", State(2, 0), [](CheckpointWriter&) {
    return IoError("disk full");
  }, false);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(store.List(), std::vector<std::string>{"epoch-1-step-0"});
  EXPECT_EQ(store.Latest().value(), "epoch-1-step-0");
}

// Incremental table copies: a live table file whose pages change between checkpoints.
class IncrementalCopyTest : public CheckpointStoreTest {
 protected:
  static constexpr uint64_t kBytes = 3 * kCrcChunkBytes + 4096 * 3 + 100;
  void SetUp() override {
    CheckpointStoreTest::SetUp();
    live_ = (run_ / "src/live.bin").string();
    table_.assign(kBytes, std::byte{1});
    ASSERT_TRUE(WriteFileDurable(live_, table_).ok());
  }
  // Changes page p of the live table; marked in `dirty` unless told not to.
  void Change(uint64_t page, bool mark = true) {
    const uint64_t at = std::min<uint64_t>(page * kDirtyPageBytes + 3, kBytes - 1);
    table_[at] = static_cast<std::byte>(static_cast<uint8_t>(table_[at]) + 1);
    ASSERT_TRUE(WriteFileDurable(live_, table_).ok());
    if (mark) dirty_->Mark(at, 1);
  }
  Status WriteAt(CheckpointStore& store, uint64_t epoch, bool best = false, bool fail_after = false) {
    return store.Write(CheckpointName(epoch, 0), State(epoch, 0), [&](CheckpointWriter& w) {
      SLUICE_RETURN_IF_ERROR(w.CopyIn(live_, "nodes.bin", dirty_.get()));
      if (fail_after) return IoError("disk full");
      return w.WriteString("dense.pt", "dense " + std::to_string(epoch));
    }, best);
  }
  // Whether the checkpoint opens (every CRC verified) and its table equals the live one.
  bool SameTable(CheckpointStore& store, uint64_t epoch) {
    auto r = store.Open(CheckpointName(epoch, 0));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return false;
    std::ifstream in(r->dir() + "/nodes.bin", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return bytes.size() == kBytes && std::memcmp(bytes.data(), table_.data(), kBytes) == 0;
  }
  void ExpectTable(CheckpointStore& store, uint64_t epoch) { EXPECT_TRUE(SameTable(store, epoch)) << epoch; }
  std::string live_;
  std::vector<std::byte> table_;
  std::unique_ptr<DirtyPages> dirty_ = std::make_unique<DirtyPages>(kBytes);
};

TEST_F(IncrementalCopyTest, TheCheckpointRetentionDropsIsBroughtUpToDate) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(WriteAt(store, 1).ok());
  Change(3);
  ASSERT_TRUE(WriteAt(store, 2).ok());
  Change(10), Change(3 * 256 + 3);  // the last page: 100 bytes, in the last, short chunk
  ASSERT_TRUE(WriteAt(store, 3).ok());  // epoch 1's copy, with pages 3, 10 and 771 rewritten
  EXPECT_EQ(store.List(), (std::vector<std::string>{"epoch-2-step-0", "epoch-3-step-0"}));
  EXPECT_FALSE(fs::exists(run_ / "checkpoints/epoch-1-step-0.retired.tmp"));
  const CheckpointCopyStats& c = store.copy_stats();
  EXPECT_EQ(c.full, 2u);
  EXPECT_EQ(c.incremental, 1u);
  EXPECT_EQ(c.table_bytes, 3 * kBytes);
  EXPECT_EQ(c.bytes_written, 2 * kBytes + 2 * kDirtyPageBytes + 100);
  ExpectTable(store, 3);
  Change(0);
  ASSERT_TRUE(WriteAt(store, 4).ok());  // epoch 2's copy: pages 10, 771 and 0
  EXPECT_EQ(store.copy_stats().incremental, 2u);
  ExpectTable(store, 4);
}

TEST_F(IncrementalCopyTest, AnUnmarkedChangeIsMissedWhichIsWhyEveryWriterMarks) {
  // The test's own check: a change the map never saw stays out of the copy.
  CheckpointStore store(run_.string());
  ASSERT_TRUE(WriteAt(store, 1).ok());
  ASSERT_TRUE(WriteAt(store, 2).ok());
  Change(5, /*mark=*/false);
  ASSERT_TRUE(WriteAt(store, 3).ok());
  EXPECT_FALSE(SameTable(store, 3));  // it opens (consistent with its own CRC), but is stale
}

TEST_F(IncrementalCopyTest, BestIsNeverTakenAndOffMeansWholeCopies) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(WriteAt(store, 1, /*best=*/true).ok());
  Change(1);
  ASSERT_TRUE(WriteAt(store, 2).ok());
  Change(2);
  ASSERT_TRUE(WriteAt(store, 3).ok());  // retention keeps 1 (best): nothing to take
  EXPECT_EQ(store.copy_stats().incremental, 0u);
  EXPECT_EQ(store.List().size(), 3u);
  ExpectTable(store, 3);
  CheckpointStore off(run_.string());
  off.set_incremental(false);
  Change(4);
  ASSERT_TRUE(WriteAt(off, 4).ok());
  Change(5);
  ASSERT_TRUE(WriteAt(off, 5).ok());
  EXPECT_EQ(off.copy_stats().full, 2u);
  EXPECT_EQ(off.copy_stats().incremental, 0u);
  ExpectTable(off, 5);
}

TEST_F(IncrementalCopyTest, ATableOpenedAgainIsCopiedWhole) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(WriteAt(store, 1).ok());
  ASSERT_TRUE(WriteAt(store, 2).ok());
  dirty_ = std::make_unique<DirtyPages>(kBytes);  // e.g. restored from a checkpoint
  Change(7);
  ASSERT_TRUE(WriteAt(store, 3).ok());
  EXPECT_EQ(store.copy_stats().incremental, 0u);
  ExpectTable(store, 3);
}

TEST_F(IncrementalCopyTest, AFailedCheckpointLosesOnlyTheOneItReplacedAndNoPages) {
  CheckpointStore store(run_.string());
  ASSERT_TRUE(WriteAt(store, 1).ok());
  ASSERT_TRUE(WriteAt(store, 2).ok());
  Change(9);
  Status s = WriteAt(store, 3, false, /*fail_after=*/true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("epoch-1-step-0, which it was replacing, is gone"), std::string::npos) << s.ToString();
  EXPECT_EQ(store.List(), std::vector<std::string>{"epoch-2-step-0"});
  EXPECT_EQ(store.Latest().value(), "epoch-2-step-0");
  for (const auto& e : fs::directory_iterator(run_ / "checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  ASSERT_TRUE(WriteAt(store, 3).ok());
  Change(11);
  ASSERT_TRUE(WriteAt(store, 4).ok());  // epoch 2's copy: page 9 (taken by the failed write) too
  EXPECT_EQ(store.copy_stats().incremental, 2u);  // the failed attempt's copy counts
  ExpectTable(store, 4);
}

// Tables written in shards by the ranks of a run (train/row_checkpoint.h), read back at any
// world size.
class RowShardTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kRowBytes = 12;
  static constexpr uint64_t kRows = 1000;
  static std::byte At(uint64_t row, uint32_t i) { return static_cast<std::byte>((row * 7 + i) % 251); }
  // Rows [bounds[r], bounds[r + 1]) as rank r's shard, then the manifest.
  void WriteShards(const std::vector<uint64_t>& bounds) {
    const int world = static_cast<int>(bounds.size()) - 1;
    std::vector<FileDigest> digests;
    for (int r = 0; r < world; ++r) {
      const std::string path = dir() + "/" + RowShardName("rows.bin", r, world);
      auto d = WriteRowShard(path, bounds[r], bounds[r + 1] - bounds[r], kRowBytes,
                             [](uint64_t at, uint64_t n, std::byte* out) {
                               for (uint64_t g = at; g < at + n; ++g) {
                                 for (uint32_t i = 0; i < kRowBytes; ++i) out[(g - at) * kRowBytes + i] = At(g, i);
                               }
                               return Status::Ok();
                             });
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      auto whole = DigestFile(path);
      ASSERT_TRUE(whole.ok());
      EXPECT_EQ(d->bytes, (bounds[r + 1] - bounds[r]) * kRowBytes);
      EXPECT_EQ(d->crc32, whole->crc32);  // computed while writing
      digests.push_back(*d);
    }
    std::ofstream(dir() + "/" + RowShardManifestName("rows.bin")) << RowShardManifest(kRows, kRowBytes, bounds, digests);
  }
  std::string dir() const { return tmp_.path(); }
  testing::TempDir tmp_;
};

TEST_F(RowShardTest, ThreeShardsReadAcrossTheirBoundsAndBecomeOneRanksRowFile) {
  WriteShards({0, 333, 666, 1000});
  ASSERT_TRUE(CheckpointRows::Sharded(dir(), "rows.bin"));
  auto rows = CheckpointRows::Open(dir(), "rows.bin", kRowBytes, kRows);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(rows->shards(), 3);
  std::vector<std::byte> got(400 * kRowBytes);
  ASSERT_TRUE(rows->Read(300, 400, got.data()).ok());  // spans the three shards
  for (uint64_t g = 300; g < 700; ++g) {
    for (uint32_t i = 0; i < kRowBytes; ++i) ASSERT_EQ(got[(g - 300) * kRowBytes + i], At(g, i)) << g;
  }
  EXPECT_FALSE(rows->Read(990, 20, got.data()).ok());
  // Rank 1 of 2 at the new world size: rows 500-999 in a row file of every row, the others zero.
  const std::string path = dir() + "/restored.bin";
  ASSERT_TRUE(rows->WriteRowFile(path, 500, 500).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 12288u);  // 12,000 rounded up to 512
  for (uint64_t g = 0; g < kRows; ++g) {
    for (uint32_t i = 0; i < kRowBytes; ++i) {
      ASSERT_EQ(static_cast<std::byte>(bytes[g * kRowBytes + i]), g >= 500 ? At(g, i) : std::byte{0}) << g;
    }
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// A reader of every row in one process (eval, export): each row to where it is held, and the
// shards assembled into one row file under $TMPDIR.
TEST_F(RowShardTest, RowsAreReadOneByOneOrAssembledIntoOneFile) {
  WriteShards({0, 400, 1000});
  auto rows = CheckpointRows::Open(dir(), "rows.bin", kRowBytes, kRows);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::vector<std::byte> held(kRows * kRowBytes, std::byte{0xFF});
  ASSERT_TRUE(rows->ReadEach(350, 100, [&](uint64_t g) { return held.data() + (kRows - 1 - g) * kRowBytes; }).ok());
  for (uint64_t g = 0; g < kRows; ++g) {  // rows 350-449 reversed, the others untouched
    const bool read = g >= 350 && g < 450;
    ASSERT_EQ(held[(kRows - 1 - g) * kRowBytes + 5], read ? At(g, 5) : std::byte{0xFF}) << g;
  }
  const std::string temp = dir() + "/tmp";
  fs::create_directories(temp);
  ::setenv("TMPDIR", temp.c_str(), 1);
  auto path = AssembleRowShards(dir(), "rows.bin", kRowBytes, kRows);
  ::unsetenv("TMPDIR");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(fs::path(*path).parent_path(), fs::path(temp));
  std::ifstream in(*path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 12288u);
  for (uint64_t g = 0; g < kRows; ++g) ASSERT_EQ(static_cast<std::byte>(bytes[g * kRowBytes + 11]), At(g, 11)) << g;
  // A shard that is not there: one line saying where it assembled, nothing left behind.
  fs::remove(*path);
  fs::remove(dir() + "/" + RowShardName("rows.bin", 1, 2));
  auto missing = AssembleRowShards(dir(), "rows.bin", kRowBytes, kRows);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("rows.bin.shard-1-of-2"), std::string::npos) << missing.status().message();
  EXPECT_TRUE(fs::is_empty(temp));
}

TEST_F(RowShardTest, AWholeTableIsReadTheSameWay) {
  WriteShards({0, 1000});
  fs::rename(dir() + "/" + RowShardName("rows.bin", 0, 1), dir() + "/rows.bin");
  fs::remove(dir() + "/" + RowShardManifestName("rows.bin"));
  fs::resize_file(dir() + "/rows.bin", 12288);  // the row file's layout
  auto rows = CheckpointRows::Open(dir(), "rows.bin", kRowBytes, kRows);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_FALSE(rows->sharded());
  std::vector<std::byte> got(kRowBytes);
  ASSERT_TRUE(rows->Read(999, 1, got.data()).ok());
  EXPECT_EQ(got[3], At(999, 3));
}

TEST_F(RowShardTest, AnotherShapeOrATruncatedShardIsOneLine) {
  WriteShards({0, 500, 1000});
  auto other = CheckpointRows::Open(dir(), "rows.bin", 16, kRows);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("hold 1000 rows of 12 bytes, this model's 1000 rows of 16"), std::string::npos)
      << other.status().message();
  fs::resize_file(dir() + "/" + RowShardName("rows.bin", 1, 2), 100);
  auto cut = CheckpointRows::Open(dir(), "rows.bin", kRowBytes, kRows);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("rows.bin.shard-1-of-2: 100 bytes, but it should hold 6000"), std::string::npos)
      << cut.status().message();
  std::ofstream(dir() + "/" + RowShardManifestName("rows.bin")) << "{\"rows\": 1000, \"row_bytes\": 12, \"bounds\": [0, 600, 500, 1000]}";
  auto bad = CheckpointRows::Open(dir(), "rows.bin", kRowBytes, kRows);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("do not cut rows 0-1000 into ranges"), std::string::npos) << bad.status().message();
}

TEST_F(CheckpointStoreTest, AnAdoptedFileIsRecordedAsReportedAndMustBeThereAtItsSize) {
  CheckpointStore store(run_.string());
  const Status written = store.Write(CheckpointName(1, 0), State(1, 0), [&](CheckpointWriter& w) {
    std::ofstream(w.PathOf("rows.bin.shard-1-of-2"), std::ios::binary) << std::string(64, 'r');
    EXPECT_FALSE(w.Adopt("rows.bin.shard-1-of-2", 63, 5).ok());
    EXPECT_FALSE(w.Adopt("rows.bin.shard-0-of-2", 64, 5).ok());
    return w.Adopt("rows.bin.shard-1-of-2", 64, Crc32(0, std::string(64, 'r').data(), 64));
  }, false);
  ASSERT_TRUE(written.ok()) << written.ToString();
  auto r = store.Open(CheckpointName(1, 0));  // its CRC-32 verified on reading
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->Has("rows.bin.shard-1-of-2"));
}

}  // namespace
}  // namespace sluice
