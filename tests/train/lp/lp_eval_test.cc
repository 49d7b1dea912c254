// Link-prediction ranking: the filtered exact ranking against a brute force, the ranking
// against sampled nodes from only the rows it reads equal to the one from every row, and the
// memory the plan reserves for evaluation.

#include "train/lp/lp_eval.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "storage/dataset.h"
#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

constexpr int64_t kNodes = 300, kRelations = 3, kDim = 6;

// A graph of `nodes` nodes: 2000 training edges, 400 valid, 300 test; some (h, r) pairs with
// several true tails so the filter has work.
Status WriteGraph(const std::string& dir, int64_t nodes) {
  std::mt19937_64 rng(7);
  Manifest m;
  m.task = TaskKind::kLinkPrediction;
  m.num_nodes = static_cast<uint64_t>(nodes);
  m.num_relations = kRelations;
  m.partition_bounds = {0, static_cast<uint64_t>(nodes)};
  SLUICE_ASSIGN_OR_RETURN(DatasetWriter w, DatasetWriter::Begin(dir, m));
  for (const auto& [split, count] : {std::pair<const char*, int>{"train", 2000}, {"valid", 400}, {"test", 300}}) {
    std::vector<int64_t> src, rel, dst;
    for (int i = 0; i < count; ++i) {
      // Heads from a small set: their (h, r) keys repeat across edges and splits.
      src.push_back(static_cast<int64_t>(rng() % 40));
      rel.push_back(static_cast<int64_t>(rng() % kRelations));
      dst.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(nodes)));
    }
    const std::string s = split;
    const std::vector<uint64_t> shape = {static_cast<uint64_t>(count)};
    SLUICE_RETURN_IF_ERROR(w.AddArray<int64_t>("edges." + s + ".src", s + ".src.bin", DType::kInt64, shape, src));
    SLUICE_RETURN_IF_ERROR(w.AddArray<int64_t>("edges." + s + ".rel", s + ".rel.bin", DType::kInt64, shape, rel));
    SLUICE_RETURN_IF_ERROR(w.AddArray<int64_t>("edges." + s + ".dst", s + ".dst.bin", DType::kInt64, shape, dst));
    w.manifest().edges[s] = static_cast<uint64_t>(count);
    if (s == "train") {
      const std::vector<int64_t> buckets = {0, count};
      SLUICE_RETURN_IF_ERROR(w.AddArray<int64_t>("edges.train.buckets", "buckets.bin", DType::kInt64, {2}, buckets));
    }
  }
  return w.Commit();
}

class LpEvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status written = WriteGraph(dir_.File("g"), Nodes());
    ASSERT_TRUE(written.ok()) << written.ToString();
    auto ds = Dataset::Open(dir_.File("g"));
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    dataset_ = std::make_unique<Dataset>(std::move(ds).value());
    torch::manual_seed(5);
    nodes_ = torch::randn({Nodes(), Dim()});
    relations_ = torch::randn({kRelations, Dim()});
    cfg_.model.decoder = Decoder::kDistMult;
    cfg_.model.dim = static_cast<int>(Dim());
  }
  virtual int64_t Nodes() const { return kNodes; }
  virtual int64_t Dim() const { return kDim; }
  Result<LpMetrics> Rank(const std::string& split, const LpNodes& nodes) {
    LpRanker ranker(*dataset_, cfg_, kRelations);
    DecoderScorer scorer(decoder_, relations_);
    return ranker.Rank(split, scorer, nodes);
  }
  static LpNodes Every(const torch::Tensor& rows, std::vector<int64_t> ids, uint64_t num_nodes) {
    LpNodes n;
    n.rows = rows, n.ids = std::move(ids), n.num_nodes = num_nodes;
    return n;
  }

  TempDir dir_;
  std::unique_ptr<Dataset> dataset_;
  LpConfig cfg_;
  LpDecoder decoder_{Decoder::kDistMult};
  torch::Tensor nodes_, relations_;
};

// Every split's true tails of (h, r), read back as the test's own reference.
std::set<std::tuple<int64_t, int64_t, int64_t>> AllEdges(const Dataset& d) {
  std::set<std::tuple<int64_t, int64_t, int64_t>> all;
  for (const char* split : {"train", "valid", "test"}) {
    const std::string s = split;
    auto src = d.ReadInt64("edges." + s + ".src"), rel = d.ReadInt64("edges." + s + ".rel"),
         dst = d.ReadInt64("edges." + s + ".dst");
    for (size_t i = 0; i < src->size(); ++i) all.emplace((*src)[i], (*rel)[i], (*dst)[i]);
  }
  return all;
}

// The filtered ranking against every node, both sides, against a brute force over the
// dataset's edges: each query's rank among the nodes that are not another true answer (more
// than 256 queries: the score block is reused across query blocks).
TEST_F(LpEvalTest, TheFilteredExactRankingIsTheBruteForceOne) {
  auto m = Rank("valid", Every(nodes_, {}, kNodes));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->exact && m->filtered);
  ASSERT_EQ(m->edges, 400u);
  const auto all = AllEdges(*dataset_);
  auto src = dataset_->ReadInt64("edges.valid.src"), rel = dataset_->ReadInt64("edges.valid.rel"),
       dst = dataset_->ReadInt64("edges.valid.dst");
  const torch::Tensor score_h = (nodes_.unsqueeze(1) * relations_.unsqueeze(0)).matmul(nodes_.t());  // [h, r, x]
  double tails_rr = 0, heads_rr = 0;
  int filtered_out = 0;
  for (size_t i = 0; i < src->size(); ++i) {
    const int64_t h = (*src)[i], r = (*rel)[i], t = (*dst)[i];
    const float truth = score_h[h][r][t].item<float>();
    int64_t above_t = 0, above_h = 0;
    for (int64_t x = 0; x < kNodes; ++x) {
      if (x != t && all.count({h, r, x})) {
        ++filtered_out;
      } else if (x != t && score_h[h][r][x].item<float>() > truth) {
        ++above_t;
      }
      if (x != h && !all.count({x, r, t}) && score_h[x][r][t].item<float>() > truth) ++above_h;
    }
    tails_rr += 1.0 / static_cast<double>(1 + above_t);
    heads_rr += 1.0 / static_cast<double>(1 + above_h);
  }
  ASSERT_GT(filtered_out, 100) << "the graph should give the filter answers to remove";
  EXPECT_NEAR(m->tails.mrr, tails_rr / 400, 1e-6);
  EXPECT_NEAR(m->heads.mrr, heads_rr / 400, 1e-6);
}

// Against sampled nodes a ranking reads the ranked edges' ends and the sampled candidates: from
// those rows alone it ranks exactly as from every row, with fewer rows than the graph's.
TEST_F(LpEvalTest, ASampledRankingFromTheRowsItReadsEqualsTheOneFromEveryRow) {
  cfg_.eval.exact_max_nodes = 100;
  cfg_.eval.sampled_negatives = 40;
  for (const uint64_t max_edges : {uint64_t{0}, uint64_t{30}}) {
    cfg_.eval.max_edges = max_edges;
    LpRanker ranker(*dataset_, cfg_, kRelations);
    auto ids = ranker.NodesRead("test", kNodes);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    ASSERT_TRUE(std::is_sorted(ids->begin(), ids->end()));
    ASSERT_EQ(std::adjacent_find(ids->begin(), ids->end()), ids->end());
    if (max_edges > 0) {
      EXPECT_LE(ids->size(), 2 * max_edges + 40);
    }
    const torch::Tensor rows = nodes_.index_select(0, torch::tensor(*ids));
    auto from_all = Rank("test", Every(nodes_, {}, kNodes));
    auto from_read = Rank("test", Every(rows, *ids, kNodes));
    ASSERT_TRUE(from_all.ok() && from_read.ok()) << from_read.status().ToString();
    EXPECT_FALSE(from_read->exact || from_read->filtered);
    EXPECT_EQ(from_read->edges, max_edges > 0 ? max_edges : 300u);
    EXPECT_EQ(from_read->tails.mrr, from_all->tails.mrr);
    EXPECT_EQ(from_read->heads.mrr, from_all->heads.mrr);
    EXPECT_EQ(from_read->hits10, from_all->hits10);
    EXPECT_GT(from_read->mrr, 0);
    // A row it needs that was not read is an error, not a wrong rank.
    std::vector<int64_t> fewer(ids->begin() + 1, ids->end());
    auto missing = Rank("test", Every(rows.narrow(0, 1, rows.size(0) - 1), fewer, kNodes));
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.status().message().find("was not read for the ranking"), std::string::npos);
  }
}

// An exact ranking cut into parts at whole tiles, as processes rank it (LpNodes::merge): each
// part scores every query against its nodes alone, the parts' counts are added, and every part
// then holds the ranking of the whole bit for bit: filtered and not (the filter's answers and
// the query's own entity fall in every part), DistMult and TransE, a part with no nodes, a part
// of one node, and parts and a whole of more than one chunk of candidates (65 tiles and a node:
// the last tile is one node wide).
class LpEvalInPartsTest : public LpEvalTest {
 protected:
  int64_t Nodes() const override { return 65 * 1024 + 1; }
  int64_t Dim() const override { return 64; }
};

TEST_F(LpEvalInPartsTest, AnExactRankingInPartsAddsUpToTheWholeRanking) {
  const auto n = static_cast<uint64_t>(Nodes());
  cfg_.eval.max_edges = 48;
  const std::vector<std::vector<uint64_t>> cuts = {{0, 1024, 2048, n}, {0, 0, n - 1, n}, {0, 33 * 1024, n}};
  double own_top = 0;
  for (const Decoder kind : {Decoder::kDistMult, Decoder::kTransE}) {
    decoder_ = LpDecoder(kind);
    for (const bool filtered : {true, false}) {
      cfg_.eval.filtered = filtered;
      auto whole = Rank("valid", Every(nodes_, {}, n));
      ASSERT_TRUE(whole.ok()) << whole.status().ToString();
      ASSERT_TRUE(whole->exact);
      own_top += whole->own_top;
      LpRanker ranker(*dataset_, cfg_, kRelations);
      auto ends = ranker.EndsRead("valid");
      ASSERT_TRUE(ends.ok()) << ends.status().ToString();
      const torch::Tensor rows = nodes_.index_select(0, torch::tensor(*ends));
      for (const std::vector<uint64_t>& cut : cuts) {
        const size_t parts = cut.size() - 1;
        // Two passes: each part's counts of both sides recorded, then each part ranked with the
        // other parts' counts added.
        std::vector<std::vector<std::vector<LpQueryCount>>> recorded(parts);
        for (const int pass : {0, 1}) {
          for (size_t k = 0; k < parts; ++k) {
            LpNodes part = Every(rows, *ends, n);
            part.cand_lo = cut[k], part.cand_hi = cut[k + 1];
            part.read = [&](uint64_t first, uint64_t count, torch::Tensor& out) {
              EXPECT_TRUE(first >= cut[k] && first + count <= cut[k + 1]) << first << " " << count;
              out = nodes_.slice(0, static_cast<int64_t>(first), static_cast<int64_t>(first + count)).clone();
              return Status::Ok();
            };
            size_t side = 0;
            part.merge = [&](std::vector<LpQueryCount>& counts) {
              if (pass == 0) recorded[k].push_back(counts);
              for (size_t j = 0; pass == 1 && j < parts; ++j) {
                if (j != k) AddCounts(counts, recorded[j][side]);
              }
              ++side;
              return Status::Ok();
            };
            auto m = Rank("valid", part);
            ASSERT_TRUE(m.ok()) << m.status().ToString();
            ASSERT_EQ(side, 2u);
            if (pass == 1) {
              EXPECT_EQ(m->ToJson(), whole->ToJson()) << EnumName(kind) << " filtered " << filtered << " part " << k;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(own_top, 0) << "no query's own entity came first: the check of its score proves nothing";
  // In one process, the candidates read a chunk at a time (LpNodes::read): the whole ranking too.
  {
    cfg_.eval.filtered = true;
    auto whole = Rank("valid", Every(nodes_, {}, n));
    LpRanker ranker(*dataset_, cfg_, kRelations);
    auto ends = ranker.EndsRead("valid");
    ASSERT_TRUE(whole.ok() && ends.ok());
    LpNodes read = Every(nodes_.index_select(0, torch::tensor(*ends)), *ends, n);
    uint64_t read_rows = 0;
    read.read = [&](uint64_t first, uint64_t count, torch::Tensor& out) {
      out = nodes_.slice(0, static_cast<int64_t>(first), static_cast<int64_t>(first + count)).clone();
      read_rows += count;
      return Status::Ok();
    };
    auto m = Rank("valid", read);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->ToJson(), whole->ToJson());
    EXPECT_EQ(read_rows, n);  // every node once
  }
  // A part that does not start or end at a tile is a bug, not another ranking.
  LpNodes part = Every(nodes_, {}, n);
  part.cand_lo = 100, part.cand_hi = 200;
  part.read = [](uint64_t, uint64_t, torch::Tensor&) { return Status::Ok(); };
  part.merge = [](std::vector<LpQueryCount>&) { return Status::Ok(); };
  auto m = Rank("valid", part);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("not whole tiles"), std::string::npos) << m.status().ToString();
}

// The plan's share: an exact filtered ranking keeps 32 bytes an edge of every split and holds
// the ends, a chunk of the nodes' rows and a block of scores against it; a sampled one keeps
// nothing; neither grows with the graph, unless an encoder encodes every row.
TEST(LpEvalBytesTest, ExactRankingCountsTheTableAndTheFilterSampledOnlyWhatItReads) {
  LpConfig cfg;
  LpEvalShape shape;
  shape.num_nodes = 1'000'000, shape.dim = 100;
  shape.all_edges = 10'000'000, shape.largest_split = 9'000'000, shape.ranked_edges = 500'000;
  const LpEvalBytes exact = EvalBytesFor(cfg, shape);
  EXPECT_EQ(exact.kept, 32 * shape.all_edges);
  EXPECT_GE(exact.transient, 2 * shape.ranked_edges * 400 + 65536 * 400 + 256 * 65536 * 4 + 24 * shape.largest_split);
  shape.num_nodes *= 10;  // not every node's row
  EXPECT_EQ(EvalBytesFor(cfg, shape).transient, exact.transient);
  shape.num_nodes /= 10;
  cfg.eval.filtered = false;
  EXPECT_EQ(EvalBytesFor(cfg, shape).kept, 0u);
  EXPECT_LT(EvalBytesFor(cfg, shape).transient, exact.transient);
  cfg.eval.exact_max_nodes = 1000;
  cfg.eval.max_edges = 10'000;
  const LpEvalBytes sampled = EvalBytesFor(cfg, shape);
  EXPECT_EQ(sampled.kept, 0u);
  EXPECT_LT(sampled.transient, shape.num_nodes * 400 / 2);
  shape.num_nodes *= 10;
  EXPECT_EQ(EvalBytesFor(cfg, shape).transient, sampled.transient);
  shape.encoder = true;  // an encoder reads every row twice over
  EXPECT_GE(EvalBytesFor(cfg, shape).transient, 2 * shape.num_nodes * 400);
}

// Across processes an exact ranking holds the ends, a tile of borrowed nodes and a chunk of its
// own at a time, and the others' counts; out of core it reads the rows the others receive.
TEST(LpEvalBytesTest, AcrossProcessesAnExactRankingCountsTheOthersCountsAndItsSends) {
  LpConfig cfg;
  LpEvalShape shape;
  shape.num_nodes = 1'000'000, shape.dim = 100;
  shape.all_edges = 10'000'000, shape.largest_split = 9'000'000, shape.ranked_edges = 20'000;
  const uint64_t one = EvalBytesFor(cfg, shape).transient;
  for (const int world : {2, 4}) {
    shape.world = world;
    shape.scored_nodes = shape.num_nodes / static_cast<uint64_t>(world) + 1024;
    const LpEvalBytes e = EvalBytesFor(cfg, shape);
    EXPECT_EQ(e.kept, 32 * shape.all_edges);  // every process filters every query
    // The ends and a tile, a chunk's rows and a block of scores, each side's counts and the others'.
    EXPECT_GE(e.transient, (2 * shape.ranked_edges + 1024) * 400 + 65536 * 400 + 256 * 65536 * 4 +
                               2 * shape.ranked_edges * 28 + 2 * uint64_t(world - 1) * shape.ranked_edges * 24);
    EXPECT_GT(e.transient, one);  // the others' counts
    EXPECT_LT(e.transient, one + shape.num_nodes * 400 / 4);
  }
  // Out of core it reads the rows it sends first: they count while the rows are gathered (which
  // outweighs the ranking when the ends are many).
  shape.ranked_edges = 2'000'000;
  const uint64_t in_memory = EvalBytesFor(cfg, shape).transient;
  shape.own_rows = shape.num_nodes / 4;
  EXPECT_GE(EvalBytesFor(cfg, shape).transient, in_memory + shape.own_rows * 400);
}

}  // namespace
}  // namespace sluice
