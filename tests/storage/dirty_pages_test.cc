#include "storage/dirty_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "storage/file.h"
#include "storage/row_file.h"
#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::Session;
using testing::TempDir;

std::set<uint64_t> Pages(const std::vector<uint64_t>& bits) {
  std::set<uint64_t> out;
  for (uint64_t w = 0; w < bits.size(); ++w) {
    for (uint64_t b = 0; b < 64; ++b) {
      if (bits[w] >> b & 1) out.insert(w * 64 + b);
    }
  }
  return out;
}

std::vector<std::byte> ReadAll(const std::string& path) {
  auto f = File::Open(path, OpenMode::kRead, false);
  EXPECT_TRUE(f.ok());
  const uint64_t n = f->SizeBytes().value();
  std::vector<std::byte> out(n);
  EXPECT_TRUE(PreadFull(*f, out.data(), n, 0).ok());
  return out;
}

void WriteAll(const std::string& path, const std::vector<std::byte>& bytes) {
  ASSERT_TRUE(WriteFileDurable(path, bytes).ok());
}

// Pages whose bytes differ between two images of a file.
std::set<uint64_t> Changed(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  std::set<uint64_t> out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) out.insert(i / kDirtyPageBytes);
  }
  return out;
}

TEST(DirtyPagesTest, MarksEveryPageARangeTouchesClippedToTheFileAndTakeClears) {
  DirtyPages d(200 * kDirtyPageBytes + 100);  // 201 pages, 4 words
  EXPECT_EQ(d.Take().size(), 4u);
  d.Mark(10, 1);                                 // page 0
  d.Mark(kDirtyPageBytes * 63 + 4095, 2);        // pages 63 and 64 (a word boundary)
  d.Mark(kDirtyPageBytes * 70, kDirtyPageBytes * 70);  // pages 70..139, across words
  d.Mark(kDirtyPageBytes * 200, 1 << 20);        // page 200, clipped
  d.Mark(kDirtyPageBytes * 300, 10);             // past the end: nothing
  d.Mark(kDirtyPageBytes * 5, 0);                // empty: nothing
  std::set<uint64_t> want = {0, 63, 64, 200};
  for (uint64_t p = 70; p < 140; ++p) want.insert(p);
  EXPECT_EQ(Pages(d.Take()), want);
  EXPECT_TRUE(Pages(d.Take()).empty());
  DirtyPages other(4096);
  EXPECT_NE(other.id(), d.id());
}

TEST(DirtyPagesTest, DirtyBytesClipsTheLastPageToTheFile) {
  const uint64_t size = 3 * kDirtyPageBytes + 10;
  DirtyPages d(size);
  d.Mark(0, size);
  EXPECT_EQ(DirtyBytes(d.Take(), size), size);
  d.Mark(kDirtyPageBytes, 1);
  EXPECT_EQ(DirtyBytes(d.Take(), size), kDirtyPageBytes);
}

class PatchFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(5);
    data_.resize(3 * kCrcChunkBytes + 5 * kDirtyPageBytes + 123);  // a short last page and chunk
    for (auto& b : data_) b = static_cast<std::byte>(rng());
    WriteAll(dir_.File("live"), data_);
  }
  void Change(uint64_t page) {
    const uint64_t at = std::min<uint64_t>(page * kDirtyPageBytes + 7, data_.size() - 1);
    data_[at] = static_cast<std::byte>(static_cast<uint8_t>(data_[at]) ^ 0x5a);
    WriteAll(dir_.File("live"), data_);
  }
  TempDir dir_;
  std::vector<std::byte> data_;
};

TEST_F(PatchFileTest, ChunkedCopyEqualsTheFileAndItsWholeCrc) {
  auto d = CopyFileChunked(dir_.File("live"), dir_.File("copy"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->bytes, data_.size());
  EXPECT_EQ(d->chunks.size(), 4u);
  EXPECT_EQ(ReadAll(dir_.File("copy")), data_);
  EXPECT_EQ(d->Whole(), DigestFile(dir_.File("copy")).value().crc32);
}

TEST_F(PatchFileTest, RewritesExactlyTheMarkedPagesAndCombinesTheCrc) {
  auto base = CopyFileChunked(dir_.File("live"), dir_.File("copy"));
  ASSERT_TRUE(base.ok());
  DirtyPages dirty(data_.size());
  const uint64_t last = (data_.size() - 1) / kDirtyPageBytes;
  for (uint64_t p : {uint64_t{0}, uint64_t{5}, uint64_t{300}, last}) {
    Change(p);
    dirty.Mark(p * kDirtyPageBytes, 1);
  }
  Change(7);  // changed but never marked: must stay as it was in the copy
  uint64_t written = 0;
  auto d = PatchFile(dir_.File("live"), dir_.File("copy"), *base, dirty.Take(), written);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(written, 3 * kDirtyPageBytes + data_.size() % kDirtyPageBytes);
  const std::vector<std::byte> copy = ReadAll(dir_.File("copy"));
  EXPECT_EQ(Changed(copy, data_), std::set<uint64_t>{7});
  EXPECT_EQ(d->Whole(), DigestFile(dir_.File("copy")).value().crc32);
}

TEST_F(PatchFileTest, RefusesFilesOfAnotherSize) {
  auto base = CopyFileChunked(dir_.File("live"), dir_.File("copy"));
  ASSERT_TRUE(base.ok());
  data_.resize(data_.size() - 1);
  WriteAll(dir_.File("live"), data_);
  uint64_t written = 0;
  DirtyPages dirty(data_.size() + 1);
  auto d = PatchFile(dir_.File("live"), dir_.File("copy"), *base, dirty.Take(), written);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("sizes differ"), std::string::npos) << d.status().ToString();
}

// Every write path of RowFile marks every page it changes, and nothing far from its rows.
TEST(RowFileDirtyTest, EveryChangedPageIsMarked) {
  TempDir dir;
  constexpr uint64_t kRows = 20000;
  constexpr uint32_t kRowBytes = 72;  // rows straddle pages
  auto table = RowFile::Create(dir.File("t"), kRowBytes, kRows, RowFileOptions{64 * 1024, 4096, true});
  ASSERT_TRUE(table.ok());
  RowFile& t = **table;
  auto io = Session(BackendKind::kAuto);
  std::mt19937_64 rng(11);
  t.dirty().Take();
  const uint64_t half_rows = kRows / 2;
  for (int round = 0; round < 12; ++round) {
    const std::vector<std::byte> before = ReadAll(t.path());
    std::vector<uint64_t> ids(1 + rng() % 200);
    for (auto& id : ids) id = rng() % half_rows;  // the second half is never written
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::vector<std::byte> rows(ids.size() * kRowBytes);
    for (auto& b : rows) b = static_cast<std::byte>(rng() | 1);
    if (round % 3 == 0) {
      ASSERT_TRUE(t.WriteRows(*io, ids, rows.data(), 4096).ok());
    } else if (round % 3 == 1) {
      std::vector<uint64_t> reads = {half_rows + 1};
      std::vector<std::byte> out(kRowBytes);
      ASSERT_TRUE(t.UpdateRows(*io, ids, rows.data(), reads, out.data(), 4096).ok());
    } else {
      const uint64_t first = ids[0], count = std::min<uint64_t>(50, half_rows - first);
      rows.resize(count * kRowBytes, std::byte{3});
      ASSERT_TRUE(t.WriteRange(*io, first, count, rows.data()).ok());
    }
    const std::set<uint64_t> marked = Pages(t.dirty().Take());
    const std::set<uint64_t> changed = Changed(before, ReadAll(t.path()));
    ASSERT_FALSE(changed.empty());
    for (uint64_t p : changed) EXPECT_TRUE(marked.count(p)) << "round " << round << ": page " << p;
    // Marks stay within the written half's extents (64 KiB of merging past its last row).
    const uint64_t limit = (half_rows * kRowBytes + 64 * 1024) / kDirtyPageBytes;
    EXPECT_LE(*marked.rbegin(), limit) << "round " << round;
  }
}

}  // namespace
}  // namespace sluice
