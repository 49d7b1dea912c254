#include "train/nc/node_logits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "storage/file.h"

namespace sluice {
namespace {

// A sink that records every row it is given, [nodes, classes].
class Recorder final : public LogitSink {
 public:
  Recorder(uint64_t nodes, int64_t classes) : logits_(torch::empty({static_cast<int64_t>(nodes), classes})) {}
  void Take(uint64_t i, const float* row) override {
    std::memcpy(logits_[static_cast<int64_t>(i)].data_ptr<float>(), row, static_cast<size_t>(logits_.size(1)) * 4);
  }
  uint64_t item_floats() const override { return static_cast<uint64_t>(logits_.size(1)); }
  void Pack(uint64_t, float*) const override {}
  void Unpack(uint64_t, const float*) override {}
  torch::Tensor& logits() { return logits_; }

 private:
  torch::Tensor logits_;
};

// A pass over nodes 0..9 in steps of 3 (the last of 1), each node's row {10 v, 10 v + 1}: every
// wanted node gets its own row at its place, in any order and as often as it is wanted.
TEST(NodeLogitsTest, EachWantedNodeGetsItsRowAtItsPlace) {
  const std::vector<int64_t> wanted = {7, 2, 9, 2, 0, 5};
  Recorder rows_of(wanted.size(), 2);
  const NodeLogits kept(wanted, &rows_of);
  for (int64_t first = 0; first < 10; first += 3) {
    const int64_t n = std::min<int64_t>(3, 10 - first);
    std::vector<float> rows;
    for (int64_t v = first; v < first + n; ++v) rows.insert(rows.end(), {10.0f * v, 10.0f * v + 1});
    kept.Keep(first, static_cast<size_t>(n), 2, rows.data());
  }
  const torch::Tensor& got = rows_of.logits();
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{6, 2}));
  for (size_t i = 0; i < wanted.size(); ++i) {
    EXPECT_EQ(got[static_cast<int64_t>(i)][0].item<float>(), 10.0f * wanted[i]) << i;
    EXPECT_EQ(got[static_cast<int64_t>(i)][1].item<float>(), 10.0f * wanted[i] + 1) << i;
  }
}

// A step none of whose nodes is wanted writes nothing.
TEST(NodeLogitsTest, AStepWithoutWantedNodesWritesNothing) {
  const std::vector<int64_t> wanted = {4};
  Recorder rows_of(1, 1);
  const NodeLogits kept(wanted, &rows_of);
  rows_of.logits().fill_(-1.0f);
  const std::vector<float> rows = {1, 2, 3};
  kept.Keep(0, 3, 1, rows.data());
  kept.Keep(5, 3, 1, rows.data());
  EXPECT_EQ(rows_of.logits()[0][0].item<float>(), -1.0f);
  kept.Keep(3, 3, 1, rows.data());
  EXPECT_EQ(rows_of.logits()[0][0].item<float>(), 2.0f);
}

// A node's scores are its cross-entropy and torch's argmax (the first largest; a NaN counts as
// the largest); the metrics are the classes' accuracy and macro-F1 and the mean loss, as the
// logits themselves would give them.
TEST(NodeScoresTest, KeepTheLossAndTheClassTheLogitsWouldGive) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> rows = {{1, 3, 3}, {0.5f, -2, 0}, {2, nan, 9}, {-1, 0, 4}};
  const std::vector<int64_t> labels = {1, 2, 1, 2};
  NodeScores scores(labels, 3);
  torch::Tensor logits = torch::empty({4, 3});
  for (uint64_t i = 0; i < rows.size(); ++i) {
    scores.Take(i, rows[i].data());
    for (int64_t c = 0; c < 3; ++c) logits[static_cast<int64_t>(i)][c] = rows[i][static_cast<size_t>(c)];
  }
  const torch::Tensor argmax = logits.argmax(1);
  const std::vector<int64_t> predicted = {1, 0, 1, 2};
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(argmax[i].item<int64_t>(), predicted[static_cast<size_t>(i)]) << i;
  const ClassMetrics m = scores.Metrics();
  const ClassMetrics want = ClassificationMetrics(predicted, labels, 3);
  EXPECT_EQ(m.nodes, 4u);
  EXPECT_EQ(m.accuracy, 0.75);  // nodes 0 (the first of two largest), 2 (the NaN) and 3
  EXPECT_EQ(m.accuracy, want.accuracy);
  EXPECT_EQ(m.macro_f1, want.macro_f1);
  EXPECT_TRUE(std::isnan(m.loss));  // node 2's NaN
  // Without the NaN the loss is torch's cross-entropy's.
  NodeScores finite(labels, 3);
  logits[2][1] = -5.0f;
  for (int64_t i = 0; i < 4; ++i) finite.Take(static_cast<uint64_t>(i), logits[i].contiguous().data_ptr<float>());
  const double torch_loss = torch::nn::functional::cross_entropy(logits, torch::tensor(labels)).item<double>();
  EXPECT_NEAR(finite.Metrics().loss, torch_loss, 1e-6);
}

// What travels between ranks (Pack) restores a node's scores exactly (Unpack).
// predict's sink: torch's argmax (ties to the first) and the softmax's largest value; packed
// and unpacked bit for bit.
TEST(TopClassesTest, KeepTorchsArgmaxAndItsProbability) {
  const std::vector<std::vector<float>> rows = {{1, 3, 3}, {0.5f, -2, 0}, {-1, 0, 4}, {30, -40, 29.5f}};
  TopClasses top(rows.size(), 3), copy(rows.size(), 3);
  torch::Tensor logits = torch::empty({4, 3});
  for (uint64_t i = 0; i < rows.size(); ++i) {
    top.Take(i, rows[i].data());
    for (int64_t c = 0; c < 3; ++c) logits[static_cast<int64_t>(i)][c] = rows[i][static_cast<size_t>(c)];
  }
  const auto [p, c] = torch::softmax(logits, 1).max(1);
  for (uint64_t i = 0; i < rows.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    EXPECT_EQ(top.predicted(i), c[k].item<int64_t>()) << i;
    EXPECT_NEAR(top.probability(i), p[k].item<float>(), 1e-6) << i;
    float item[2];
    top.Pack(i, item);
    copy.Unpack(i, item);
    EXPECT_EQ(copy.predicted(i), top.predicted(i));
    EXPECT_EQ(copy.probability(i), top.probability(i));
  }
  EXPECT_EQ(top.predicted(0), 1);  // the tie goes to the first
}

TEST(NodeScoresTest, PackedScoresUnpackBitForBit) {
  const std::vector<int64_t> labels = {0, 1};
  NodeScores from(labels, 2), to(labels, 2);
  const std::vector<float> a = {0.1f, 0.7f}, b = {3, -1};
  from.Take(0, a.data());
  from.Take(1, b.data());
  ASSERT_EQ(from.item_floats(), 3u);
  for (uint64_t i = 0; i < 2; ++i) {
    float packed[3];
    from.Pack(i, packed);
    to.Unpack(i, packed);
  }
  const ClassMetrics x = from.Metrics(), y = to.Metrics();
  EXPECT_EQ(x.loss, y.loss);
  EXPECT_EQ(x.accuracy, y.accuracy);
  EXPECT_EQ(x.macro_f1, y.macro_f1);
}

// Export's probabilities: rows written out of order (and in order, gathered) through the row
// writer make the same file, byte for byte, as the whole array written at once; each row is the
// softmax of its logits.
TEST(ProbabilityRowsTest, WriteTheFileTheWholeArrayWould) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("sluice-probs-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<std::vector<float>> logits = {{0, 1, 2}, {5, 5, 5}, {-3, 0, 30}, {1, 0, 0}};
  Result<NpyRowWriter> out = NpyRowWriter::Create((dir / "rows.npy").string(), "<f4", 4, 3, 4);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ProbabilityRows rows(&*out, 3);
  for (const uint64_t i : {2, 0, 1, 3}) rows.Take(i, logits[i].data());
  ASSERT_TRUE(rows.status().ok()) << rows.status().ToString();
  ASSERT_TRUE(out->Close().ok());
  std::vector<float> whole;
  for (const std::vector<float>& row : logits) {
    const torch::Tensor p = torch::softmax(torch::tensor(row), 0);
    for (int64_t k = 0; k < 3; ++k) whole.push_back(p[k].item<float>());
  }
  ASSERT_TRUE(WriteNpy((dir / "whole.npy").string(), "<f4", {4, 3}, whole.data(), whole.size() * 4).ok());
  Result<std::string> a = ReadFileToString((dir / "rows.npy").string());
  Result<std::string> b = ReadFileToString((dir / "whole.npy").string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  const size_t data = a->size() - whole.size() * 4;
  EXPECT_EQ(a->substr(0, data), b->substr(0, data));  // the header
  const auto* got = reinterpret_cast<const float*>(a->data() + data);
  for (size_t k = 0; k < whole.size(); ++k) EXPECT_NEAR(got[k], whole[k], 1e-7) << k;
  // A row read back is the row written.
  float back[3];
  rows.Pack(2, back);
  EXPECT_EQ(std::vector<float>(back, back + 3), std::vector<float>(got + 6, got + 9));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
