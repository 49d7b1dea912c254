#include "common/units.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(UnitsTest, ParsesByteSizes) {
  EXPECT_EQ(ParseBytes("512").value(), 512u);
  EXPECT_EQ(ParseBytes("64KiB").value(), 64u * 1024);
  EXPECT_EQ(ParseBytes("2.5GiB").value(), 2684354560u);
  EXPECT_EQ(ParseBytes("1 GB").value(), 1000000000u);
  EXPECT_EQ(ParseBytes("3m").value(), 3u * kMiB);
  EXPECT_EQ(ParseBytes("0").value(), 0u);
}

TEST(UnitsTest, RejectsMalformedSizes) {
  for (const char* bad : {"", "GiB", "-1KiB", "12 parsecs", "1e30", "nan"}) {
    Result<uint64_t> r = ParseBytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("is not a byte size"), std::string::npos) << bad;
  }
}

TEST(UnitsTest, FormatsAndAligns) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3 * kGiB / 2), "1.50 GiB");
  EXPECT_EQ(AlignUp(4097, 4096), 8192u);
  EXPECT_EQ(AlignDown(4097, 4096), 4096u);
  EXPECT_TRUE(IsPowerOfTwo(4096));
  EXPECT_FALSE(IsPowerOfTwo(4095));
}

}  // namespace
}  // namespace sluice
