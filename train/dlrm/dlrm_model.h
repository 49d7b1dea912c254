#pragma once
// The DLRM network: a bottom MLP over the dense features (a learned vector when a dataset has
// none), pairwise dot products of its output and every table's embedding, and a top MLP to one
// logit; with the linear term, each row's extra weight is summed into the logit.

#include <torch/torch.h>

#include <vector>

namespace sluice {

struct DlrmNetImpl : torch::nn::Module {
  DlrmNetImpl(int dense, int tables, int dim, bool linear_term, const std::vector<int>& bottom_layers,
              const std::vector<int>& top_layers);

  // dense [B, D], rows [B, C, dim (+1 with the linear term)] -> logits [B]
  torch::Tensor forward(const torch::Tensor& dense, const torch::Tensor& rows);

  bool has_dense;
  bool linear;
  int64_t dim_;
  int64_t features = 0;
  torch::nn::Sequential bottom, top;
  torch::Tensor x0, pairs;
};
TORCH_MODULE(DlrmNet);

}  // namespace sluice
