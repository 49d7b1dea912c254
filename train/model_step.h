#pragma once
// The engine's side of the model seam (train/model.h) for one step: gather a table's uses into
// a tensor, run the model (fused or autograd), and sum each distinct row's use gradients in a
// fixed order before the row optimizer applies them.
//
// A table's uses are given as parts, lists of local row indices laid end to end (link
// prediction: heads, tails, tail negatives, head negatives; DLRM: one list, sample-major).

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "common/status.h"
#include "sampler/random.h"
#include "sluice/model_factory.h"
#include "train/data_parallel.h"
#include "train/model.h"
#include "train/row_optimizers.h"

namespace sluice {

using UseParts = std::vector<std::span<const int64_t>>;

// Sets the learning rate of every parameter group of `optimizer` (train.lr_decay).
void SetOptimizerLr(torch::optim::Optimizer& optimizer, double lr);

// Data-parallel steps (train/data_parallel.h), for every task that trains in virtual shards: a
// shard's payload is its loss x its samples, then each parameter's gradient x the shard's share
// of the batch (samples / batch; zeros where a parameter got none), DenseFloats(params) floats
// after the loss.
uint64_t DenseFloats(const std::vector<torch::Tensor>& params);

// One step's shards' payloads added up in shard order into the parameters' gradients: after
// each of this rank's shards' backward pass (in shard order) Add, or AddEmpty for a shard of no
// samples; then Finish exchanges them (DataParallel::ExchangeShards), sets every parameter's
// gradient to the sum (replacing it) and returns the shards' losses x samples summed. The same
// float operations in the same order whatever the world size. One process adds each shard into
// one sum as it is computed; across processes the rank keeps its shards' payloads until the
// exchange adds them with the others' in bounded rounds (Bytes: what a step holds for it).
class ShardGradients {
 public:
  ShardGradients(DataParallel& dp, std::vector<torch::Tensor> params);
  void Add(double loss, uint64_t samples, uint64_t batch);
  void AddEmpty();
  Result<double> Finish();
  static uint64_t Bytes(const DataParallel& dp, uint64_t dense_floats);

 private:
  void Fold(uint64_t first, uint64_t n, const float* from);

  DataParallel& dp_;
  std::vector<torch::Tensor> params_;
  uint64_t width_ = 0;  // 1 + the dense floats
  bool local_ = false;  // one process: each shard folded as it is computed
  double loss_ = 0;
  std::vector<float> sum_, mine_;
};

// The memory line's ", shard gradients N MiB" (Bytes); "" when `dp` is null (whole steps).
std::string ShardGradientsNote(const DataParallel* dp);

// The uses' rows: row parts[p][i] (rows[k] is distinct row k's first float, d floats) copied
// in order into uses [m, d] (parallel, no arithmetic: the bits do not depend on threads).
TableInput GatherUses(std::span<float* const> rows, const UseParts& parts, int64_t d,
                      bool requires_grad);

// Sums the uses' gradients (pieces covering the uses in order, as FusedOutput gives them) into
// [rows, d]: each row's uses added in use order. Threads own ranges of rows and scan every use,
// so the bits do not depend on the thread count.
torch::Tensor SumRowGrads(const UseParts& parts, const std::vector<torch::Tensor>& grads,
                          int64_t rows, int64_t d);

struct StepGrads {
  double loss = 0;
  // With defer_loss: the loss as a detached scalar tensor (on the model's device), not read
  // yet (reading it waits for the device), and `loss` is 0.
  torch::Tensor loss_value;
  std::vector<std::vector<torch::Tensor>> use_grads;  // per table, pieces over the uses
};

// Runs the model on a step: FusedLoss when the model has it and allow_fused, else Loss and
// backward (the uses of each table must require grad then). An exception thrown by the model
// is an error naming the step. The caller zeroes and steps its dense optimizer around it.
// defer_loss (autograd only) leaves the loss on the device, so a GPU step's kernels are queued
// without waiting for them.
Result<StepGrads> RunModel(Model& model, ModelInput& input, bool allow_fused, bool defer_loss = false);

// The device of the model's parameters (the CPU when it has none).
torch::Device ModelDevice(const Model& model);
// The input's tensors moved to `device` (a no-op on the device they are on).
ModelInput InputOn(const ModelInput& input, const torch::Device& device);

// A user's model from its factory (Run::SetModel): the factory's exception or a null model is an
// error naming the model.
Result<std::shared_ptr<Model>> CallModelFactory(const std::string& name, const ModelFactory& factory,
                                                const ModelSpec& spec);

// A user's encoder (Run::SetEncoder) and a task's model as one model: Encode runs the encoder,
// then the model's own Encode; Loss, FusedLoss and Predict are the model's (RunModel takes the
// gradients through the encoder). Checkpoints hold both ("encoder.*", "head.*").
class EncodedModel final : public Model {
 public:
  EncodedModel(std::shared_ptr<Encoder> encoder, std::shared_ptr<Model> head)
      : encoder_(register_module("encoder", std::move(encoder))), head_(register_module("head", std::move(head))) {}
  ModelInput Encode(ModelInput input) override { return head_->Encode(encoder_->Encode(std::move(input))); }
  torch::Tensor Loss(const ModelInput& input) override { return head_->Loss(input); }
  torch::Tensor Predict(const ModelInput& input) override { return head_->Predict(input); }
  bool FusedLoss(const ModelInput& input, FusedOutput& out) override { return head_->FusedLoss(input, out); }
  uint64_t StepBytes() const override { return head_->StepBytes() + encoder_->StepBytes(); }
  Model& head() { return *head_; }

 private:
  std::shared_ptr<Encoder> encoder_;
  std::shared_ptr<Model> head_;
};

// `model` behind the user's encoder when the task was given one (name non-empty), else `model`.
Result<std::shared_ptr<Model>> WithEncoder(std::shared_ptr<Model> model, const std::string& name,
                                           const EncoderFactory& factory, const ModelSpec& spec);

// The model's outputs for evaluation: Predict of the encoded input, on the model's device (the
// input moved there and the outputs back to the CPU). An exception is an error naming the step.
Result<torch::Tensor> PredictStep(Model& model, const ModelInput& input);

// Dropout keyed on a step (ModelInput::key), never a global generator: element i is kept with
// probability 1 - p (scaled by 1 / (1 - p)) by bit stream index i of `key`'s counter-based
// generator at `site`, so a mask is a pure function of (seed, epoch, step, site).
// KeyedDropoutMask: the mask itself ([sizes], float, on `device`; 0 or 1 / (1 - p)); on a CUDA
// device it is drawn there (the same draws), not built on the host and copied.
torch::Tensor KeyedDropoutMask(at::IntArrayRef sizes, double p, const SampleKey& key, uint64_t site,
                               const torch::Device& device = torch::kCPU);
// The generator behind a mask: element i is kept when DropoutKey(key, site).Unit(i) >= p.
Key DropoutKey(const SampleKey& key, uint64_t site);
// x times its mask (x itself when p is 0).
torch::Tensor KeyedDropout(const torch::Tensor& x, double p, const SampleKey& key, uint64_t site);

// Applies `opt` to distinct rows [0, rows): rows[k] gets sums row k (parallel over rows).
void ApplyRowOptimizer(RowOptimizer opt, std::span<float* const> rows, const torch::Tensor& sums,
                       int64_t d, float lr);

}  // namespace sluice
