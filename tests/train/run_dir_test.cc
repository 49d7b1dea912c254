#include "train/run_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TEST(RunDirLockTest, ASecondTrainerIsRefusedUntilTheFirstIsDone) {
  const testing::TempDir tmp;
  const fs::path dir = fs::path(tmp.path()) / "lock";
  {
    auto first = RunDirLock::Acquire(dir.string());
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    auto second = RunDirLock::Acquire(dir.string());
    ASSERT_FALSE(second.ok());
    const std::string m = second.status().message();
    EXPECT_NE(m.find(dir.string() + " is in use by another sluice train"), std::string::npos) << m;
    EXPECT_NE(m.find("pid " + std::to_string(::getpid())), std::string::npos) << m;
  }
  auto again = RunDirLock::Acquire(dir.string());
  EXPECT_TRUE(again.ok());
  fs::remove_all(dir);
}

TEST(FormatTest, CountsAndSeconds) {
  EXPECT_EQ(FormatCount(1234567), "1.23M");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatSeconds(12.3456), "12.35");
}

}  // namespace
}  // namespace sluice
