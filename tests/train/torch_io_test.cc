#include "train/torch_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

TEST(TorchIoTest, SavedTensorsLoadBackAndDamagedOnesAreOneLineNamingTheFile) {
  const testing::TempDir tmp;
  const fs::path run = fs::path(tmp.path()) / "torchio";
  CheckpointStore store(run.string());
  fs::create_directories(store.dir());
  torch::Tensor t = torch::arange(12, torch::kFloat32).reshape({3, 4});
  CheckpointState st;
  st.task = "x";
  st.epoch = 1;
  ASSERT_TRUE(store.Write("epoch-1-step-0", st, [&](CheckpointWriter& w) {
    return SaveTorch(w, "t.pt", t);
  }, false).ok());
  auto r = store.Open("epoch-1-step-0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  torch::Tensor back;
  ASSERT_TRUE(LoadTorch(*r, "t.pt", back).ok());
  EXPECT_TRUE(torch::equal(back, t));
  // Past the checksums (a file rewritten with garbage of the same size would be caught there):
  // what libtorch itself says of a damaged file is one line naming it.
  const std::string path = r->dir() + "/t.pt";
  const auto size = fs::file_size(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(size, 'z');
  Status s = LoadTorch(*r, "t.pt", back);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ": cannot be loaded ("), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_FALSE(LoadTorch(*r, "missing.pt", back).ok());
  fs::remove_all(run);
}

}  // namespace
}  // namespace sluice

TEST(TorchIoTest, FirstLineOfAnErrorSaysWhatFailed) {
  EXPECT_EQ(sluice::FirstLine("index out of range\nException raised from ... (frame 1)\nframe 2"), "index out of range");
  // The TorchScript interpreter's preamble says nothing; its cause comes last.
  EXPECT_EQ(sluice::FirstLine("The following operation failed in the TorchScript interpreter.\n"
                      "Traceback of TorchScript (most recent call last):\n  File \"<x>\", line 3\n"
                      "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x13 and 5x1)\n"),
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x13 and 5x1)");
  EXPECT_EQ(sluice::FirstLine(std::string(400, 'x')).size(), 303u);
}
