#include "train/dlrm/dlrm_model.h"

namespace sluice {

DlrmNetImpl::DlrmNetImpl(int dense, int tables, int dim, bool linear_term,
                         const std::vector<int>& bottom_layers, const std::vector<int>& top_layers,
                         int64_t batch_samples)
    : has_dense(dense > 0), linear(linear_term), dim_(dim), batch(batch_samples) {
  layer_widths = static_cast<uint64_t>(dim);
  for (int w : bottom_layers) layer_widths += static_cast<uint64_t>(w);
  for (int w : top_layers) layer_widths += static_cast<uint64_t>(w);
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

uint64_t DlrmNetImpl::StepBytes() const {
  const auto f = static_cast<uint64_t>(features);
  const uint64_t width = static_cast<uint64_t>(dim_) + (linear ? 1 : 0);
  return static_cast<uint64_t>(batch) * ((f - 1) * width * 4 * 6 + f * f * 4 * 3 + layer_widths * 4 * 4);
}

}  // namespace sluice
