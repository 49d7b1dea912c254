#pragma once
// The node-classification models: GraphSage (mean or max-pool), GCN and GAT layers over the
// sampled blocks of a step (train/model.h's BlockInput), behind the model seam.
//
// Input: table 0's uses are the rows of every node of the sample, in the sampler's layer order
// (layer 0, the seeds, first); blocks[0] is the outermost block (its sources are every node),
// blocks.back() has the seeds as destinations. Layer l maps blocks[l]'s sources to its
// destinations, which are a prefix of them (the sampler's layers are prefixes of each other),
// so a destination's own row is row i of the layer's input. The output is [seeds, classes].
//
// GCN weights edge (j -> i) by 1 / sqrt((deg(i) + 1)(deg(j) + 1)) and the self-loop by
// 1 / (deg(i) + 1), with deg the full graph's in-degree: with every neighbour sampled this is
// full-graph GCN, D^-1/2 (A + I) D^-1/2. GAT adds a self-loop to every destination, scores
// LeakyReLU(0.2) of a_src . Wh_j + a_dst . Wh_i per head, softmax over a destination's edges,
// concatenates the heads of hidden layers and averages those of the output layer.
//
// Every random draw (dropout on each layer's input, GAT's attention dropout) comes from the
// counter-based generator keyed on (seed, epoch, step, layer, site), never libtorch's global
// generator: out-of-core, in-memory and resumed runs draw the same masks.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "train/model.h"
#include "train/nc/nc_config.h"

namespace sluice {

struct GnnShape {
  int64_t in_dim = 0, classes = 0;
  int64_t max_seeds = 0, max_nodes = 0, max_edges = 0;  // per step (StepBytes)
  // Per layer, input first: the most source nodes, destination nodes and edges a step's block
  // for that layer holds, in training and in evaluation (StepBytes; empty: max_nodes and
  // max_edges at every layer).
  struct Layers {
    std::vector<int64_t> src, dst, edges;
  };
  Layers train, eval;
};

class GnnModelImpl : public Model {
 public:
  // `in_degree` [nodes] int64: the full graph's in-degrees (GCN's normalisation).
  GnnModelImpl(const NcModelConfig& config, GnnShape shape, torch::Tensor in_degree);

  // [seeds, classes] logits of the step's seeds.
  torch::Tensor Logits(const ModelInput& input);
  torch::Tensor Predict(const ModelInput& input) override { return Logits(input); }
  // One layer's output for every destination of `block` from its sources' rows `h`; `nodes`
  // are the global ids of the sources (GCN's degrees). Exposed for layer-wise inference.
  torch::Tensor Layer(int l, const torch::Tensor& h, const BlockInput& block,
                      const torch::Tensor& nodes, const ModelInput& input);
  // Layer l and, before the output layer, its normalisation and activation: what layer l + 1
  // reads (layer-wise inference keeps it per node).
  torch::Tensor Apply(int l, const torch::Tensor& h, const BlockInput& block, const torch::Tensor& nodes,
                      const ModelInput& input);
  // The width of Apply(l, ...)'s rows.
  int64_t OutputWidth(int l) const;
  // Mean cross-entropy of the seeds' logits against input.labels.
  torch::Tensor Loss(const ModelInput& input) override;
  uint64_t StepBytes() const override;
  int layers() const { return static_cast<int>(self_.size()); }

 private:
  torch::Tensor Sage(int l, const torch::Tensor& h, const BlockInput& b, const torch::Tensor& dst_index);
  torch::Tensor Gcn(int l, const torch::Tensor& h, const BlockInput& b, const torch::Tensor& dst_index,
                    const torch::Tensor& nodes);
  torch::Tensor Gat(int l, const torch::Tensor& h, const BlockInput& b, const torch::Tensor& dst_index,
                    const ModelInput& input);
  torch::Tensor Hidden(int l, torch::Tensor h, const ModelInput& input);

  NcModelConfig cfg_;
  GnnShape shape_;
  torch::Tensor in_degree_;
  // Per layer; unused ones stay empty modules.
  std::vector<torch::nn::Linear> self_, neigh_, pool_;
  std::vector<torch::Tensor> att_src_, att_dst_, bias_;
  std::vector<torch::nn::BatchNorm1d> batch_norm_;
  std::vector<torch::nn::LayerNorm> layer_norm_;
};
TORCH_MODULE(GnnModel);

// Accuracy and macro-F1 of predictions against labels (classes counted from 0).
struct ClassMetrics {
  uint64_t nodes = 0;
  double accuracy = 0, macro_f1 = 0, loss = 0;
};
ClassMetrics ClassificationMetrics(const std::vector<int64_t>& predicted,
                                   const std::vector<int64_t>& labels, int64_t classes);

}  // namespace sluice
