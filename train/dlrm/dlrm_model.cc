#include "train/dlrm/dlrm_model.h"

#include <algorithm>

namespace sluice {

DlrmNetImpl::DlrmNetImpl(int dense, int tables, int dim, bool linear_term,
                         const std::vector<int>& bottom_layers, const std::vector<int>& top_layers,
                         int64_t batch_samples)
    : has_dense(dense > 0),
      linear(linear_term),
      dim_(dim),
      batch(batch_samples),
      step_samples(batch_samples),
      dense_(dense),
      bottom_widths(bottom_layers),
      top_widths(top_layers) {
  if (has_dense) {
    int in = dense;
    for (int h : bottom_layers) {
      bottom->push_back(torch::nn::Linear(in, h));
      bottom->push_back(torch::nn::ReLU());
      in = h;
    }
    bottom->push_back(torch::nn::Linear(in, dim));
    bottom->push_back(torch::nn::ReLU());
    register_module("bottom", bottom);
  } else {
    x0 = register_parameter("x0", torch::rand({dim}) - 0.5);
  }
  const int f = tables + 1;
  std::vector<int64_t> tri;
  for (int i = 0; i < f; ++i) {
    for (int j = 0; j < i; ++j) tri.push_back(i * f + j);
  }
  pairs = torch::tensor(tri, torch::kInt64);
  features = f;
  int in = dim + static_cast<int>(tri.size());
  for (int h : top_layers) {
    top->push_back(torch::nn::Linear(in, h));
    top->push_back(torch::nn::ReLU());
    in = h;
  }
  top->push_back(torch::nn::Linear(in, 1));
  register_module("top", top);
}

torch::Tensor DlrmNetImpl::forward(const torch::Tensor& dense, const torch::Tensor& rows) {
  const int64_t b = rows.size(0);
  const torch::Tensor emb = linear ? rows.narrow(2, 0, dim_) : rows;
  torch::Tensor x = has_dense ? bottom->forward(dense) : x0.unsqueeze(0).expand({b, dim_});
  torch::Tensor t = torch::cat({x.unsqueeze(1), emb}, 1);
  torch::Tensor z = torch::bmm(t, t.transpose(1, 2)).reshape({b, features * features});
  if (pairs.device() != z.device()) pairs = pairs.to(z.device());  // not a buffer: follows the input
  z = z.index_select(1, pairs);
  torch::Tensor logit = top->forward(torch::cat({x, z}, 1)).reshape({b});
  if (linear) logit = logit + rows.select(2, dim_).sum(1);  // each row's first-order weight
  return logit;
}

torch::Tensor DlrmNetImpl::Predict(const ModelInput& in) {
  const torch::Tensor& uses = in.tables.at(0).uses;
  const int64_t b = in.dense.size(0);
  return forward(in.dense, uses.view({b, features - 1, uses.size(1)}));
}

torch::Tensor DlrmNetImpl::Loss(const ModelInput& in) {
  return torch::binary_cross_entropy_with_logits(Predict(in), in.labels);
}

namespace {

// The most floats per sample an MLP's backward pass holds at once: a layer's output gradient
// beside its input gradient, or a ReLU's (its output's width twice); `relu_out`: the output
// layer has a ReLU too.
uint64_t WidestPair(uint64_t in, const std::vector<int>& hidden, uint64_t out, bool relu_out) {
  uint64_t most = 0;
  for (int h : hidden) {
    const auto width = static_cast<uint64_t>(h);
    most = std::max({most, in + width, 2 * width});
    in = width;
  }
  return std::max({most, in + out, relu_out ? 2 * out : 0});
}

uint64_t Sum(const std::vector<int>& v) {
  uint64_t s = 0;
  for (int x : v) s += static_cast<uint64_t>(x);
  return s;
}

}  // namespace

uint64_t DlrmNetImpl::InputFloats() const {
  // The gathered uses, their row indices (int64), the dense features, the label.
  const auto c = static_cast<uint64_t>(features - 1);
  return c * (static_cast<uint64_t>(dim_) + (linear ? 1 : 0) + 2) + static_cast<uint64_t>(dense_) + 1;
}

uint64_t DlrmNetImpl::TrainingStepBytes(int64_t samples) const {
  // Floats per sample, phase by phase, as tests/train/dlrm/dlrm_model_test.cc measures them.
  const auto f = static_cast<uint64_t>(features), c = f - 1, dim = static_cast<uint64_t>(dim_);
  const uint64_t w = dim + (linear ? 1 : 0), pairs_n = f * c / 2;
  // Kept for backward: the bottom MLP's activations and its output, the interaction's rows,
  // the top MLP's input (the output beside the pairs) and activations, the logit and the loss.
  const uint64_t bottom_kept = has_dense ? Sum(bottom_widths) + dim : 0;
  const uint64_t kept = bottom_kept + f * dim + dim + pairs_n + Sum(top_widths) + 2;
  // Backward: through the top MLP (all kept); through the interaction (the top MLP's kept
  // freed: the products' gradient, f x f, and two gradients of the rows); through the bottom
  // MLP (the uses' gradient and the output's beside its kept). The linear term's gradient of
  // the uses lives through all of it.
  const uint64_t through_top = kept + WidestPair(dim + pairs_n, top_widths, 1, false);
  const uint64_t interaction = kept - Sum(top_widths) + f * f + 2 * f * dim;
  const uint64_t through_bottom = bottom_kept + c * w + dim +
                                  (has_dense ? WidestPair(static_cast<uint64_t>(dense_), bottom_widths, dim, true) : 0);
  const uint64_t backward = std::max({through_top, interaction, through_bottom}) + (linear ? c * w : 0);
  // After it: the uses' gradient and the rows' sums (at most a row per use).
  const uint64_t sums = 2 * c * w;
  // Beside it, a layer's weight gradient before it is added into the parameter's.
  uint64_t weight = 0;
  for (const torch::Tensor& p : parameters()) weight = std::max(weight, static_cast<uint64_t>(p.numel()) * 4);
  return static_cast<uint64_t>(samples) * 4 * (InputFloats() + std::max(backward, sums)) + weight;
}

uint64_t DlrmNetImpl::EvaluationStepBytes(int64_t samples) const {
  // Without gradients, one phase at a time beside the input: the bottom MLP; the interaction
  // (the bottom's output, the rows with it, their products, the pairs); the top MLP beside the
  // output, the rows and the pairs; then the logits and their probabilities.
  const auto f = static_cast<uint64_t>(features), dim = static_cast<uint64_t>(dim_);
  const uint64_t pairs_n = f * (f - 1) / 2;
  const uint64_t in_bottom = has_dense ? WidestPair(static_cast<uint64_t>(dense_), bottom_widths, dim, true) : 0;
  const uint64_t interaction = dim + f * dim + f * f + pairs_n;
  const uint64_t in_top = dim + f * dim + pairs_n + WidestPair(dim + pairs_n, top_widths, 1, false);
  return static_cast<uint64_t>(samples) * 4 * (InputFloats() + std::max({in_bottom, interaction, in_top}) + 2);
}

uint64_t DlrmNetImpl::StepBytes() const {
  return std::max(TrainingStepBytes(step_samples), EvaluationStepBytes(batch));
}

}  // namespace sluice
