#include "storage/dataset.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "storage/file.h"
#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

// A 10-node, 2-partition graph with 6 train edges in bucket order.
Status WriteTinyGraph(const std::string& dir) {
  Manifest m;
  m.task = TaskKind::kLinkPrediction;
  m.name = "tiny";
  m.num_nodes = 10;
  m.num_relations = 1;
  m.edges["train"] = 6;
  m.partition_bounds = {0, 5, 10};
  SLUICE_ASSIGN_OR_RETURN(DatasetWriter writer, DatasetWriter::Begin(dir, m));
  // buckets (0,0) (0,1) (1,0) (1,1), each sorted by (src, dst)
  std::vector<int32_t> src = {0, 1, 2, 4, 6, 9};
  std::vector<int32_t> dst = {1, 3, 7, 8, 2, 9};
  std::vector<int64_t> buckets = {0, 2, 4, 5, 6};
  SLUICE_RETURN_IF_ERROR(writer.AddArray<int32_t>("edges.train.src", "edges/train_src.bin",
                                                  DType::kInt32, {6}, src));
  SLUICE_RETURN_IF_ERROR(writer.AddArray<int32_t>("edges.train.dst", "edges/train_dst.bin",
                                                  DType::kInt32, {6}, dst));
  SLUICE_RETURN_IF_ERROR(writer.AddArray<int64_t>("edges.train.buckets",
                                                  "edges/train_buckets.bin", DType::kInt64, {5},
                                                  buckets));
  return writer.Commit();
}

std::string Slurp(const std::string& path) { return ReadFileToString(path).value(); }
void Spit(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(DatasetTest, WrittenDatasetOpensVerifiesAndSummarises) {
  TempDir dir;
  const std::string ds_dir = dir.File("tiny");
  ASSERT_TRUE(WriteTinyGraph(ds_dir).ok());
  auto ds = Dataset::Open(ds_dir);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->manifest().num_partitions(), 2u);
  EXPECT_EQ(ds->manifest().edges.at("train"), 6u);
  EXPECT_EQ(ds->ReadInt64("edges.train.buckets").value(), (std::vector<int64_t>{0, 2, 4, 5, 6}));
  EXPECT_TRUE(ds->Verify().ok());
  EXPECT_NE(ds->Summary().find("edges.train: 6"), std::string::npos);
  // int32 arrays are widened.
  EXPECT_EQ(ds->ReadInt64("edges.train.src").value(), (std::vector<int64_t>{0, 1, 2, 4, 6, 9}));
  // No temporary directory is left beside it.
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename(), "tiny");
  }
}

TEST(DatasetTest, UncommittedWriterLeavesNothing) {
  TempDir dir;
  {
    Manifest m;
    m.num_nodes = 1;
    m.partition_bounds = {0, 1};
    auto writer = DatasetWriter::Begin(dir.File("half"), m);
    std::vector<int32_t> x = {1};
    ASSERT_TRUE(writer->AddArray<int32_t>("a", "a.bin", DType::kInt32, {1}, x).ok());
  }  // interrupted before Commit
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(DatasetTest, ChecksumMismatchIsFoundByVerify) {
  TempDir dir;
  ASSERT_TRUE(WriteTinyGraph(dir.File("d")).ok());
  {
    std::fstream f(dir.File("d/edges/train_dst.bin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put('\x55');
  }
  auto ds = Dataset::Open(dir.File("d"));
  ASSERT_TRUE(ds.ok()) << "sizes still match; only Verify reads the data";
  Status s = ds->Verify().status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("file edges/train_dst.bin: checksum mismatch"), std::string::npos)
      << s.message();
}

TEST(DatasetTest, TruncatedOrMissingFilesAreNamed) {
  TempDir dir;
  ASSERT_TRUE(WriteTinyGraph(dir.File("d")).ok());
  ASSERT_EQ(::truncate(dir.File("d/edges/train_src.bin").c_str(), 10), 0);
  EXPECT_EQ(Dataset::Open(dir.File("d")).status().message(),
            "dataset " + dir.File("d") +
                ": file edges/train_src.bin is 10 bytes, the manifest says 24 (truncated)");
  std::filesystem::remove(dir.File("d/edges/train_src.bin"));
  EXPECT_EQ(Dataset::Open(dir.File("d")).status().message(),
            "dataset " + dir.File("d") +
                ": file edges/train_src.bin (edges.train.src): No such file or directory");
  std::filesystem::remove(dir.File("d/manifest.json"));
  EXPECT_NE(Dataset::Open(dir.File("d")).status().message().find("not a sluice dataset?"),
            std::string::npos);
  EXPECT_EQ(Dataset::Open(dir.File("nowhere")).status().message(),
            "dataset " + dir.File("nowhere") + ": no such directory");
}

// Rewrites the manifest with `from` replaced by `to` and returns Open's error message.
std::string OpenWithEditedManifest(const std::string& ds_dir, const std::string& from,
                                   const std::string& to) {
  const std::string path = ds_dir + "/manifest.json";
  std::string text = Slurp(path);
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  std::string edited = text;
  edited.replace(at, from.size(), to);
  Spit(path, edited);
  std::string message = Dataset::Open(ds_dir).status().message();
  Spit(path, text);
  return message;
}

TEST(DatasetTest, ManifestProblemsGiveOneClearLine) {
  TempDir dir;
  const std::string d = dir.File("d");
  ASSERT_TRUE(WriteTinyGraph(d).ok());
  const std::string m = d + "/manifest.json";
  EXPECT_EQ(OpenWithEditedManifest(d, "\"format_version\": 1", "\"format_version\": 2"),
            m + ": dataset format version 2, but this build of sluice reads version 1 "
                "(re-run the preprocessing)");
  EXPECT_EQ(OpenWithEditedManifest(d, "\"task\"", "\"tusk\""),
            m + ": manifest is missing the field 'task'");
  EXPECT_EQ(OpenWithEditedManifest(d, "\"nodes\": 10", "\"nodes\": \"ten\""),
            m + ": counts: manifest field 'nodes' has the wrong type (line 6)");
  EXPECT_EQ(OpenWithEditedManifest(d, "\"bounds\": [0, 5, 10]", "\"bounds\": [0, 12, 10]"),
            "dataset " + d + ": partitions.bounds decreases at index 2");
  EXPECT_EQ(OpenWithEditedManifest(d, "\"bounds\": [0, 5, 10]", "\"bounds\": [0, 7, 5, 10]"),
            m + ": partitions.count is 2 but partitions.bounds has 4 entries (count + 1 expected)");
  EXPECT_EQ(OpenWithEditedManifest(d, "\"train\": 6", "\"train\": 7"),
            "dataset " + d + ": edges.train.buckets: the last offset is 6 but the split has 7 edges");
  EXPECT_EQ(OpenWithEditedManifest(d, "\"shape\": [6], \"bytes\": 24", "\"shape\": [5], \"bytes\": 24"),
            "dataset " + d + ": files.edges.train.dst says 24 bytes but its shape and dtype "
                             "(int32) make 20");
  EXPECT_NE(OpenWithEditedManifest(d, "{", "[").find("malformed manifest"), std::string::npos);
  EXPECT_TRUE(Dataset::Open(d).ok());
}

TEST(DatasetTest, RecordLayoutIsPaddedToEightBytes) {
  RecordLayout criteo{26, 13};
  EXPECT_EQ(criteo.bytes(), 26u * 8 + 13 * 4 + 4);  // 264: already a multiple of 8
  RecordLayout avazu{22, 0};
  EXPECT_EQ(avazu.bytes(), 22u * 8 + 8);  // label + 4 bytes of padding
  EXPECT_EQ(avazu.label_offset(), 176u);
}

}  // namespace
}  // namespace sluice
