#include "train/dlrm/dlrm_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "tests/train/tensor_peak.h"
#include "train/model_step.h"

namespace sluice {
namespace {

struct NetShape {
  int dense, tables, dim;
  bool linear;
  std::vector<int> bottom, top;
  int64_t batch;
};

// A table of 5,000 rows and a step's uses of them, `batch` samples of every table (made before
// any measure starts: the task's rows live in its cache, not in the step's tensors).
struct StepRows {
  StepRows(const NetShape& s, int64_t batch)
      : width(s.dim + (s.linear ? 1 : 0)), table(torch::rand({kRows, width})), ids(static_cast<size_t>(batch * s.tables)) {
    for (int64_t r = 0; r < kRows; ++r) ptrs.push_back(table.data_ptr<float>() + r * width);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % kRows);
  }
  static constexpr int64_t kRows = 5000;
  int64_t width;
  torch::Tensor table;
  std::vector<float*> ptrs;
  std::vector<int64_t> ids;
};

// The most tensor bytes alive at once over one training step of `batch` samples as the task
// runs it: the dense features and labels, the gathered uses, the loss and its backward pass,
// and the rows' gradient sums.
int64_t MeasuredStepBytes(DlrmNetImpl& net, const NetShape& s, int64_t batch) {
  torch::manual_seed(1);
  const StepRows t(s, batch);
  const UseParts parts{t.ids};
  auto step = [&] {
    ModelInput in;
    in.dense = torch::rand({batch, s.dense});
    in.labels = (torch::rand({batch}) > 0.5).to(torch::kFloat);
    in.tables.push_back(GatherUses(t.ptrs, parts, t.width, true));
    in.training = true;
    for (torch::Tensor& p : net.parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    Result<StepGrads> g = RunModel(net, in, false);
    EXPECT_TRUE(g.ok());
    const torch::Tensor sums = SumRowGrads(parts, g->use_grads[0], StepRows::kRows, t.width);
  };
  step();  // the parameters' gradients (the model's state) exist from here
  TensorPeak peak;
  const int64_t before = TensorPeak::live();
  step();
  return TensorPeak::peak() - before;
}

// The same for an evaluation step: the gathered uses and the logits, without gradients.
int64_t MeasuredEvalBytes(DlrmNetImpl& net, const NetShape& s, int64_t batch) {
  const StepRows t(s, batch);
  torch::NoGradGuard no_grad;
  TensorPeak peak;
  const int64_t before = TensorPeak::live();
  {
    ModelInput in;
    in.dense = torch::rand({batch, s.dense});
    in.labels = (torch::rand({batch}) > 0.5).to(torch::kFloat);
    in.tables.push_back(GatherUses(t.ptrs, {t.ids}, t.width, false));
    const torch::Tensor prob = torch::sigmoid(net.Predict(in));
  }
  return TensorPeak::peak() - before;
}

// Within 3% under (libtorch's versions may differ a little) and 10% over: the formula before
// this one was 2-3x over on every shape here.
void ExpectNear(int64_t planned, int64_t measured, const char* what, const NetShape& s) {
  EXPECT_GE(static_cast<double>(planned), 0.97 * static_cast<double>(measured)) << what << " under-planned";
  EXPECT_LE(static_cast<double>(planned), 1.10 * static_cast<double>(measured)) << what << " over-planned";
  std::printf("%-10s tables %2d dim %2d linear %d dense %2d bottom %zu layers (first %4d) top %zu layers batch %4ld: "
              "measured %6.2f MiB, planned %6.2f MiB (%.3fx)\n",
              what, s.tables, s.dim, s.linear ? 1 : 0, s.dense, s.bottom.size(), s.bottom.empty() ? 0 : s.bottom[0],
              s.top.size(), static_cast<long>(s.batch), static_cast<double>(measured) / 1048576.0,
              static_cast<double>(planned) / 1048576.0, static_cast<double>(planned) / static_cast<double>(measured));
}

TEST(DlrmNetTest, StepBytesIsTheMostTensorBytesAStepHolds) {
  const std::vector<NetShape> shapes = {
      {13, 26, 16, false, {512, 256}, {256, 128}, 2048},    // the defaults, Criteo's shape
      {13, 26, 16, true, {512, 256}, {256, 128}, 2048},     // the linear term
      {13, 26, 16, false, {64, 64}, {64, 64}, 2048},        // the interaction dominates
      {13, 26, 16, false, {1024, 1024}, {1024, 1024}, 2048},  // the top MLP dominates
      {13, 8, 32, false, {256}, {256}, 1024},
      {0, 26, 16, false, {512, 256}, {256, 128}, 2048},     // no dense features
      {4, 40, 64, true, {128}, {64}, 512},                  // many wide rows
      {13, 3, 8, false, {2048}, {16}, 256},                 // the bottom MLP dominates
      {13, 26, 16, false, {64}, {}, 4096},                  // no top hidden layer
  };
  for (const NetShape& s : shapes) {
    DlrmNet net(s.dense, s.tables, s.dim, s.linear, s.bottom, s.top, s.batch);
    const int64_t train = MeasuredStepBytes(*net, s, s.batch), eval = MeasuredEvalBytes(*net, s, s.batch);
    ExpectNear(static_cast<int64_t>(net->TrainingStepBytes(s.batch)), train, "training", s);
    ExpectNear(static_cast<int64_t>(net->EvaluationStepBytes(s.batch)), eval, "evaluation", s);
    EXPECT_EQ(net->StepBytes(), std::max(net->TrainingStepBytes(s.batch), net->EvaluationStepBytes(s.batch)));
  }
}

TEST(DlrmNetTest, AShardsTrainingStepBesideTheWholeBatchsEvaluation) {
  const NetShape s{13, 26, 16, false, {1024, 1024}, {1024, 1024}, 2048};
  DlrmNet net(s.dense, s.tables, s.dim, s.linear, s.bottom, s.top, s.batch);
  const uint64_t whole = net->StepBytes();
  net->step_samples = 171;  // a twelfth of the batch
  const int64_t shard = MeasuredStepBytes(*net, s, 171);
  ExpectNear(static_cast<int64_t>(net->TrainingStepBytes(171)), shard, "a shard's", s);
  // Evaluation computes the whole batch at once: more than a shard's training step here.
  EXPECT_GT(net->EvaluationStepBytes(s.batch), net->TrainingStepBytes(171));
  EXPECT_EQ(net->StepBytes(), net->EvaluationStepBytes(s.batch));
  EXPECT_LT(net->StepBytes(), whole / 2);
}

}  // namespace
}  // namespace sluice
