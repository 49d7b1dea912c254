#pragma once
// The DLRM network, the default recommendation model behind the model seam (train/model.h): a
// bottom MLP over the dense features (a learned vector when a dataset has none), pairwise dot
// products of its output and every table's embedding, and a top MLP to one logit; with the
// linear term, each row's extra weight is summed into the logit.
//
// Its input: table 0's uses are every sample's row of every table, sample-major ([B * C,
// width]: the tables share one row layout), `dense` [B, D] and `labels` [B]; the loss is the
// mean binary cross-entropy of the logits.

#include <torch/torch.h>

#include <vector>

#include "train/model.h"

namespace sluice {

struct DlrmNetImpl : Model {
  // batch: samples per step (for the working-set estimate).
  DlrmNetImpl(int dense, int tables, int dim, bool linear_term, const std::vector<int>& bottom_layers,
              const std::vector<int>& top_layers, int64_t batch);

  // dense [B, D], rows [B, C, dim (+1 with the linear term)] -> logits [B]
  torch::Tensor forward(const torch::Tensor& dense, const torch::Tensor& rows);
  // The logits of a step's input [B].
  torch::Tensor Predict(const ModelInput& input) override;
  torch::Tensor Loss(const ModelInput& input) override;
  // Activations and their gradients: gathered rows and their sums, the embedding batch and its
  // gradient, interactions, MLP layers (kept for backward), each a few times.
  uint64_t StepBytes() const override;

  bool has_dense;
  bool linear;
  int64_t dim_;
  int64_t features = 0;
  int64_t batch = 0;
  uint64_t layer_widths = 0;  // dim plus the MLPs' hidden widths
  torch::nn::Sequential bottom, top;
  torch::Tensor x0, pairs;
};
TORCH_MODULE(DlrmNet);

}  // namespace sluice
