#include "storage/kv_table.h"

#include <cstring>
#include <random>
#include <vector>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

TEST(KvTableTest, WritesAndMultiGetsRowsByKey) {
  TempDir dir;
  auto kv = KvTable::Open(dir.File("kv"), 24, KvTableOptions{});
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  std::mt19937_64 rng(1);
  std::vector<uint64_t> keys(1000);
  for (auto& k : keys) k = rng();  // sparse 64-bit ids
  std::vector<std::byte> rows(keys.size() * 24);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::byte>(rng());
  ASSERT_TRUE((*kv)->Write(keys, rows.data()).ok());

  std::vector<uint64_t> lookup = {keys[5], 12345, keys[999], keys[5]};
  std::vector<std::byte> out(lookup.size() * 24, std::byte{0x7f});
  std::vector<bool> found;
  ASSERT_TRUE((*kv)->MultiGet(lookup, out.data(), found).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(std::memcmp(&out[0], &rows[5 * 24], 24), 0);
  EXPECT_EQ(out[24], std::byte{0x7f}) << "absent rows are left untouched";
  EXPECT_EQ(std::memcmp(&out[48], &rows[999 * 24], 24), 0);
  EXPECT_EQ(std::memcmp(&out[72], &rows[5 * 24], 24), 0);
  EXPECT_GT((*kv)->MemoryBytes(), 0u);
}

TEST(KvTableTest, FlushedRowsSurviveReopen) {
  TempDir dir;
  std::vector<uint64_t> keys = {1, 1ull << 40, ~0ull};
  std::vector<std::byte> rows(3 * 8);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::byte>(i);
  {
    auto kv = KvTable::Open(dir.File("kv"), 8, KvTableOptions{});
    ASSERT_TRUE((*kv)->Write(keys, rows.data()).ok());
    ASSERT_TRUE((*kv)->Flush().ok());
  }
  auto kv = KvTable::Open(dir.File("kv"), 8, KvTableOptions{});
  ASSERT_TRUE(kv.ok());
  std::vector<std::byte> out(rows.size());
  std::vector<bool> found;
  ASSERT_TRUE((*kv)->MultiGet(keys, out.data(), found).ok());
  EXPECT_EQ(found, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(out, rows);
}

TEST(KvTableTest, ReopeningWithAnotherRowWidthIsRefused) {
  TempDir dir;
  { ASSERT_TRUE(KvTable::Open(dir.File("kv"), 8, KvTableOptions{}).ok()); }
  auto kv = KvTable::Open(dir.File("kv"), 16, KvTableOptions{});
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().message(), "kv table " + dir.File("kv") +
                                       " holds rows of 8 bytes, not the 16 asked for");
}

TEST(KvTableTest, BudgetCountsCacheAndMemtables) {
  KvTableOptions options;
  options.block_cache_bytes = 10 << 20;
  options.memtable_bytes = 4 << 20;
  EXPECT_EQ(KvTable::BudgetBytes(options), (10u << 20) + 2 * (4u << 20));
}

}  // namespace
}  // namespace sluice
