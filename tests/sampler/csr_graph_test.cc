#include "sampler/csr_graph.h"

#include <algorithm>

#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

TEST(CsrGraphTest, KeepsNeighboursInInputOrder) {
  std::vector<int64_t> from = {2, 0, 2, 1, 2}, to = {5, 1, 3, 0, 4};
  CsrGraph g = CsrGraph::FromEdges(6, from, to);
  EXPECT_EQ(g.num_nodes(), 6u);
  EXPECT_EQ(g.num_edges(), 5u);
  auto n2 = g.neighbors(2);
  EXPECT_EQ(std::vector<int64_t>(n2.begin(), n2.end()), (std::vector<int64_t>{5, 3, 4}));
  EXPECT_EQ(g.degree(5), 0u);
  EXPECT_TRUE(g.HasEdge(1, 0));
  EXPECT_FALSE(g.HasEdge(0, 2));
}

// 10 nodes in 2 partitions [0,5) [5,10); edges in bucket order with a destination-sorted copy.
Status WriteGraph(const std::string& dir) {
  Manifest m;
  m.num_nodes = 10;
  m.edges["train"] = 6;
  m.partition_bounds = {0, 5, 10};
  SLUICE_ASSIGN_OR_RETURN(DatasetWriter w, DatasetWriter::Begin(dir, m));
  std::vector<int32_t> src = {0, 1, 2, 4, 6, 9}, dst = {1, 3, 7, 8, 2, 9};
  std::vector<int64_t> buckets = {0, 2, 4, 5, 6};
  // by destination: bucket (j, i) = dst partition j, src partition i, sorted by (dst, src)
  std::vector<int32_t> bsrc = {0, 1, 6, 2, 4, 9}, bdst = {1, 3, 2, 7, 8, 9};
  std::vector<int64_t> bbuckets = {0, 2, 3, 5, 6};
  SLUICE_RETURN_IF_ERROR(w.AddArray<int32_t>("edges.train.src", "s.bin", DType::kInt32, {6}, src));
  SLUICE_RETURN_IF_ERROR(w.AddArray<int32_t>("edges.train.dst", "d.bin", DType::kInt32, {6}, dst));
  SLUICE_RETURN_IF_ERROR(
      w.AddArray<int64_t>("edges.train.buckets", "b.bin", DType::kInt64, {5}, buckets));
  SLUICE_RETURN_IF_ERROR(
      w.AddArray<int32_t>("edges.train.by_dst.src", "bs.bin", DType::kInt32, {6}, bsrc));
  SLUICE_RETURN_IF_ERROR(
      w.AddArray<int32_t>("edges.train.by_dst.dst", "bd.bin", DType::kInt32, {6}, bdst));
  SLUICE_RETURN_IF_ERROR(
      w.AddArray<int64_t>("edges.train.by_dst.buckets", "bb.bin", DType::kInt64, {5}, bbuckets));
  return w.Commit();
}

TEST(CsrGraphTest, LoadsAllOrResidentPartitionsOutAndIn) {
  TempDir dir;
  ASSERT_TRUE(WriteGraph(dir.File("g")).ok());
  auto ds = Dataset::Open(dir.File("g"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  auto out = CsrGraph::Load(ds.value(), "train", Direction::kOut);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->num_edges(), 6u);
  EXPECT_TRUE(out->HasEdge(2, 7) && out->HasEdge(6, 2) && out->HasEdge(9, 9));
  auto in = CsrGraph::Load(ds.value(), "train", Direction::kIn);
  ASSERT_TRUE(in.ok());
  EXPECT_TRUE(in->HasEdge(7, 2) && in->HasEdge(2, 6) && in->HasEdge(3, 1));
  std::vector<uint32_t> first = {0};
  auto part0 = CsrGraph::Load(ds.value(), "train", Direction::kOut, first);
  ASSERT_TRUE(part0.ok());
  EXPECT_EQ(part0->num_edges(), 2u);  // only bucket (0, 0)
  EXPECT_FALSE(part0->HasEdge(2, 7));
  EXPECT_EQ(CsrGraph::Load(ds.value(), "valid", Direction::kOut).status().code(),
            StatusCode::kNotFound);
}

// Loading streams the bucket files (degrees, then placement) into int32 neighbours: the same
// graph, neighbour order included, as building from the concatenated bucket edges.
TEST(CsrGraphTest, LoadEqualsFromEdgesInBucketOrderWithInt32Ids) {
  TempDir dir;
  ASSERT_TRUE(WriteGraph(dir.File("g")).ok());
  auto ds = Dataset::Open(dir.File("g"));
  ASSERT_TRUE(ds.ok());
  auto in = CsrGraph::Load(ds.value(), "train", Direction::kIn);
  ASSERT_TRUE(in.ok());
  // by_dst buckets in file order: (dst, src) = (1,0) (3,1) (2,6) (7,2) (8,4) (9,9).
  const std::vector<int64_t> dst = {1, 3, 2, 7, 8, 9}, src = {0, 1, 6, 2, 4, 9};
  const CsrGraph ref = CsrGraph::FromEdges(10, dst, src);
  EXPECT_TRUE(in->narrow());
  ASSERT_EQ(in->num_edges(), ref.num_edges());
  for (int64_t v = 0; v < 10; ++v) EXPECT_EQ(in->neighbors(v), ref.neighbors(v)) << "node " << v;
  EXPECT_EQ(in->MemoryBytes(), CsrGraph::BytesFor(10, 6));
  EXPECT_EQ(CsrGraph::BytesFor(10, 6), 11 * 8 + 6 * 4);
  EXPECT_EQ(CsrGraph::BytesFor(uint64_t{1} << 31, 6), ((uint64_t{1} << 31) + 1) * 8 + 6 * 8);
  in->VisitNeighbors([](auto all) { EXPECT_EQ(sizeof(all[0]), 4u); });
}

TEST(CsrGraphTest, AnEdgeNamingANodeBeyondTheGraphIsCorruption) {
  TempDir dir;
  Manifest m;
  m.num_nodes = 4;
  m.edges["train"] = 2;
  m.partition_bounds = {0, 4};
  auto w = DatasetWriter::Begin(dir.File("bad"), m);
  ASSERT_TRUE(w.ok());
  std::vector<int32_t> src = {0, 7}, dst = {1, 2};
  std::vector<int64_t> buckets = {0, 2};
  ASSERT_TRUE(w->AddArray<int32_t>("edges.train.src", "s.bin", DType::kInt32, {2}, src).ok());
  ASSERT_TRUE(w->AddArray<int32_t>("edges.train.dst", "d.bin", DType::kInt32, {2}, dst).ok());
  ASSERT_TRUE(w->AddArray<int64_t>("edges.train.buckets", "b.bin", DType::kInt64, {2}, buckets).ok());
  ASSERT_TRUE(w->Commit().ok());
  auto ds = Dataset::Open(dir.File("bad"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  auto g = CsrGraph::Load(ds.value(), "train", Direction::kOut);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kCorruption);
  EXPECT_NE(g.status().message().find("names node 7"), std::string::npos) << g.status().ToString();
}

}  // namespace
}  // namespace sluice
