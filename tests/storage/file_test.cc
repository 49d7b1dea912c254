#include "storage/file.h"

#include <cstring>
#include <filesystem>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

TEST(FileTest, WriteFileAtomicReplacesAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.File("a.txt");
  ASSERT_TRUE(WriteFileAtomic(path, std::string("first")).ok());
  ASSERT_TRUE(WriteFileAtomic(path, std::string("second")).ok());
  EXPECT_EQ(ReadFileToString(path).value(), "second");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(FileTest, WriteFileAtomicIntoMissingDirectoryFailsCleanly) {
  TempDir dir;
  Status s = WriteFileAtomic(dir.File("missing/a.txt"), std::string("x"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("missing/a.txt.tmp-"), std::string::npos);
}

TEST(FileTest, OpenMissingFileNamesThePath) {
  auto f = File::Open("/nonexistent/sluice/x", OpenMode::kRead, true);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "open /nonexistent/sluice/x: No such file or directory");
}

// tmpfs refused O_DIRECT before Linux 6.6 and accepts it since: either way the probe and the
// file actually opened must agree, and opening must succeed.
TEST(FileTest, MappedFileSeesTheBytesAndNamesAMissingPath) {
  TempDir dir;
  std::string text(10000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(WriteFileAtomic(dir.File("m"), text).ok());
  for (MapAdvice advice : {MapAdvice::kNormal, MapAdvice::kRandom}) {
    auto m = MappedFile::Open(dir.File("m"), advice);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_EQ(m->size_bytes(), text.size());
    EXPECT_EQ(std::memcmp(m->data(), text.data(), text.size()), 0);
    MappedFile moved = std::move(*m);
    EXPECT_EQ(static_cast<char>(moved.data()[27]), 'b');
  }
  auto missing = MappedFile::Open(dir.File("nope"), MapAdvice::kNormal);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

TEST(FileTest, DirectIoProbeAgreesWithOpen) {
  TempDir dir;
  for (const std::string& where : {dir.path(), std::string("/dev/shm")}) {
    if (!std::filesystem::exists(where)) continue;
    auto probe = ProbeDirectIo(where);
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    const std::string path = where + "/sluice-probe-test-" + std::to_string(::getpid());
    auto f = File::Open(path, OpenMode::kCreate, /*want_direct=*/true);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->direct(), probe.value()) << where;
    std::filesystem::remove(path);
  }
}

TEST(FileTest, PreadFullReportsTruncation) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir.File("short"), std::string(100, 'x')).ok());
  auto f = File::Open(dir.File("short"), OpenMode::kRead, false);
  ASSERT_TRUE(f.ok());
  std::byte buffer[200];
  Status s = PreadFull(f.value(), buffer, 200, 0);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("file ends after 100 bytes"), std::string::npos);
}

}  // namespace
}  // namespace sluice
