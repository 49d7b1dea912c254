#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace sluice {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Status UseHalf(int x, int& out) {
  SLUICE_ASSIGN_OR_RETURN(out, Half(x));
  return Status::Ok();
}

TEST(StatusTest, ResultCarriesValueOrError) {
  EXPECT_EQ(Half(8).value(), 4);
  Result<int> odd = Half(3);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.status().ToString(), "InvalidArgument: 3 is odd");
}

TEST(StatusTest, AssignOrReturnPropagatesErrors) {
  int out = -1;
  EXPECT_TRUE(UseHalf(10, out).ok());
  EXPECT_EQ(out, 5);
  Status s = UseHalf(7, out);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(out, 5);
}

TEST(StatusTest, ErrnoStatusNamesTheCause) {
  Status missing = ErrnoStatus("open /x", ENOENT);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "open /x: No such file or directory");
  EXPECT_EQ(ErrnoStatus("write /y", ENOSPC).code(), StatusCode::kIoError);
  EXPECT_EQ(missing.WithContext("loading table").message(),
            "loading table: open /x: No such file or directory");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  EXPECT_DEATH((void)Half(3).value(), "3 is odd");
}

}  // namespace
}  // namespace sluice
