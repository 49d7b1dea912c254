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
  // The most tensor bytes a step holds at once: a training step of `step_samples` (its
  // input: the gathered rows, dense features, labels; what autograd keeps for backward; the
  // most the backward pass holds beside it, through the top MLP, the interaction or the bottom
  // MLP; or after it the rows' gradient sums), or an evaluation step of `batch`.
  uint64_t StepBytes() const override;
  uint64_t TrainingStepBytes(int64_t samples) const;
  uint64_t EvaluationStepBytes(int64_t samples) const;

  bool has_dense;
  bool linear;
  int64_t dim_;
  int64_t features = 0;
  int64_t batch = 0;         // samples of a step (evaluation computes them at once)
  int64_t step_samples = 0;  // samples a training step computes at once: the batch, or a shard's
  int dense_ = 0;
  std::vector<int> bottom_widths, top_widths;
  torch::nn::Sequential bottom, top;
  torch::Tensor x0, pairs;

 private:
  uint64_t InputFloats() const;  // per sample
};
TORCH_MODULE(DlrmNet);

}  // namespace sluice
