#include "train/model_step.h"

#include <ATen/Parallel.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <exception>

#include "common/units.h"
#include "sampler/random.h"
#ifdef SLUICE_HAVE_TORCH_CUDA
#include "train/accelerator.h"
#endif
#include "train/torch_io.h"

namespace sluice {

void SetOptimizerLr(torch::optim::Optimizer& optimizer, double lr) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) group.options().set_lr(lr);
}

uint64_t DenseFloats(const std::vector<torch::Tensor>& params) {
  uint64_t n = 0;
  for (const torch::Tensor& p : params) n += static_cast<uint64_t>(p.numel());
  return n;
}

ShardGradients::ShardGradients(DataParallel& dp, std::vector<torch::Tensor> params)
    : dp_(dp), params_(std::move(params)), width_(1 + DenseFloats(params_)), local_(dp.world_size() == 1),
      sum_(width_ - 1, 0.0f) {
  if (!local_) mine_.reserve(static_cast<size_t>(dp_.end_shard() - dp_.first_shard()) * width_);
}

uint64_t ShardGradients::Bytes(const DataParallel& dp, uint64_t dense_floats) {
  const uint64_t width = 1 + dense_floats;
  const auto own = static_cast<uint64_t>(dp.end_shard() - dp.first_shard());
  // The sum, and the gradients made from it beside the last shard's; across processes this
  // rank's payloads and a round's buffers.
  return 8 * dense_floats + (dp.world_size() == 1 ? 0 : 4 * own * width + dp.ExchangeBufferBytes(width));
}

std::string ShardGradientsNote(const DataParallel* dp) {
  return dp == nullptr ? "" : ", shard gradients " + FormatBytes(ShardGradients::Bytes(*dp, dp->dense_floats()));
}

void ShardGradients::Fold(uint64_t first, uint64_t n, const float* from) {
  if (first == 0 && n > 0) loss_ += static_cast<double>(from[0]), ++first, --n, ++from;
  float* to = sum_.data() + (first - 1);
  for (uint64_t i = 0; i < n; ++i) to[i] += from[i];
}

void ShardGradients::Add(double loss, uint64_t samples, uint64_t batch) {
  const float share = static_cast<float>(samples) / static_cast<float>(batch);
  const float weighed = static_cast<float>(loss * static_cast<double>(samples));
  if (local_) {
    loss_ += static_cast<double>(weighed);
  } else {
    mine_.push_back(weighed);
  }
  uint64_t at = 1;
  for (const torch::Tensor& p : params_) {
    const auto n = static_cast<uint64_t>(p.numel());
    if (!p.grad().defined()) {
      // Locally nothing to add: the sum starts at +0 and never holds -0, so adding +0 keeps it.
      if (!local_) mine_.insert(mine_.end(), n, 0.0f);
    } else {
      const torch::Tensor x = (p.grad() * share).contiguous();
      if (local_) {
        Fold(at, n, x.data_ptr<float>());
      } else {
        mine_.insert(mine_.end(), x.data_ptr<float>(), x.data_ptr<float>() + n);
      }
    }
    at += n;
  }
}

void ShardGradients::AddEmpty() {
  if (!local_) mine_.insert(mine_.end(), width_, 0.0f);
}

Result<double> ShardGradients::Finish() {
  SLUICE_RETURN_IF_ERROR(dp_.ExchangeShards(mine_, width_, [this](int, uint64_t first, uint64_t n, const float* from) {
    Fold(first, n, from);
  }));
  mine_ = {};
  int64_t offset = 0;
  for (const torch::Tensor& p : params_) {
    p.mutable_grad() = torch::from_blob(sum_.data() + offset, p.sizes()).clone();
    offset += p.numel();
  }
  return loss_;
}

TableInput GatherUses(std::span<float* const> rows, const UseParts& parts, int64_t d,
                      bool requires_grad) {
  int64_t m = 0;
  for (const auto& p : parts) m += static_cast<int64_t>(p.size());
  TableInput t;
  t.rows = static_cast<int64_t>(rows.size());
  t.uses = torch::empty({m, d});
  t.inverse = torch::empty({m}, torch::kInt64);
  float* out = t.uses.data_ptr<float>();
  int64_t* inv = t.inverse.data_ptr<int64_t>();
  struct Piece {
    const int64_t* ids;
    int64_t first, begin, end;  // uses [first + begin, first + end)
  };
  std::vector<Piece> pieces;
  int64_t first = 0;
  for (const auto& p : parts) {
    const auto n = static_cast<int64_t>(p.size());
    for (int64_t i = 0; i < n; i += 1024) pieces.push_back({p.data(), first, i, std::min(n, i + 1024)});
    first += n;
  }
  tbb::parallel_for(size_t{0}, pieces.size(), [&](size_t k) {
    const Piece& pc = pieces[k];
    for (int64_t i = pc.begin; i < pc.end; ++i) {
      const int64_t u = pc.first + i;
      inv[u] = pc.ids[i];
      std::memcpy(out + u * d, rows[static_cast<size_t>(pc.ids[i])], static_cast<size_t>(d) * 4);
    }
  });
  if (requires_grad) t.uses.set_requires_grad(true);
  return t;
}

torch::Tensor SumRowGrads(const UseParts& parts, const std::vector<torch::Tensor>& grads,
                          int64_t rows, int64_t d) {
  torch::Tensor sums = torch::zeros({rows, d});
  float* gr = sums.data_ptr<float>();
  // (index list, its gradient rows) pairs over the uses in order: a grad piece may span parts.
  std::vector<std::pair<std::span<const int64_t>, const float*>> runs;
  std::vector<torch::Tensor> flat;
  size_t part = 0, in_part = 0;
  for (const torch::Tensor& g : grads) {
    flat.push_back(g.reshape({-1, d}).contiguous());
    const float* src = flat.back().data_ptr<float>();
    int64_t left = flat.back().size(0);
    while (left > 0) {
      const std::span<const int64_t> p = parts[part];
      const auto take = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(p.size() - in_part)));
      runs.emplace_back(p.subspan(in_part, take), src);
      src += take * static_cast<size_t>(d), left -= static_cast<int64_t>(take), in_part += take;
      if (in_part == p.size()) ++part, in_part = 0;
    }
  }
  const int64_t owners = std::max(1, tbb::this_task_arena::max_concurrency());
  tbb::parallel_for(int64_t{0}, owners, [&](int64_t k) {
    const int64_t lo = rows * k / owners, hi = rows * (k + 1) / owners;
    for (const auto& [ids, src] : runs) {
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < lo || ids[i] >= hi) continue;
        float* __restrict dst = gr + ids[i] * d;
        const float* __restrict x = src + i * static_cast<size_t>(d);
        for (int64_t j = 0; j < d; ++j) dst[j] += x[j];
      }
    }
  });
  return sums;
}

namespace {

// A user's factory (of a model or an encoder): its exception or a null result is an error
// naming what it builds.
template <class Factory>
auto CallFactory(const std::string& what, const std::string& name, const Factory& factory, const ModelSpec& spec)
    -> Result<decltype(factory(spec))> {
  decltype(factory(spec)) built;
  try {
    built = factory(spec);
  } catch (const std::exception& e) {
    return InvalidArgument(what + " " + name + ": its factory failed: " + FirstLine(e.what()));
  }
  if (built == nullptr) return InvalidArgument(what + " " + name + ": its factory returned no " + what);
  return built;
}

// After a fused loss over encoded uses: the use gradients through the encoder, at the rows the
// engine gathered (`leaves`). Tables the encoder left as they were keep the fused pieces.
void BackThroughEncoder(const std::vector<torch::Tensor>& leaves, const ModelInput& encoded,
                        std::vector<std::vector<torch::Tensor>>& use_grads) {
  std::vector<torch::Tensor> outputs, grads;
  std::vector<size_t> changed;
  for (size_t t = 0; t < leaves.size() && t < encoded.tables.size(); ++t) {
    const torch::Tensor& uses = encoded.tables[t].uses;
    if (uses.is_same(leaves[t]) || !uses.requires_grad() || t >= use_grads.size()) continue;
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& piece : use_grads[t]) flat.push_back(piece.reshape({-1}));
    outputs.push_back(uses);
    grads.push_back(torch::cat(flat).view_as(uses));
    changed.push_back(t);
  }
  if (outputs.empty()) return;
  torch::autograd::backward(outputs, grads);
  for (size_t t : changed) use_grads[t] = {leaves[t].grad()};
}

}  // namespace

Result<StepGrads> RunModel(Model& model, ModelInput& input, bool allow_fused, bool defer_loss) {
  StepGrads out;
  try {
    // The rows as gathered: an encoder may replace the uses the model sees.
    std::vector<torch::Tensor> leaves;
    for (const TableInput& t : input.tables) leaves.push_back(t.uses);
    ModelInput in = model.Encode(std::move(input));
    FusedOutput fused;
    if (allow_fused && model.FusedLoss(in, fused)) {
      out.loss = fused.loss;
      BackThroughEncoder(leaves, in, fused.use_grads);
      out.use_grads = std::move(fused.use_grads);
      return out;
    }
    torch::Tensor loss = model.Loss(in);
    loss.backward();
    if (defer_loss) {
      out.loss_value = loss.detach();
    } else {
      out.loss = loss.item<double>();
    }
    for (const torch::Tensor& leaf : leaves) out.use_grads.push_back({leaf.grad()});
  } catch (const std::exception& e) {
    return InvalidArgument("the model failed at epoch " + std::to_string(input.key.epoch + 1) +
                           ", step " + std::to_string(input.key.step) + ": " + FirstLine(e.what()));
  }
  return out;
}

torch::Device ModelDevice(const Model& model) {
  for (const torch::Tensor& p : model.parameters()) return p.device();
  return torch::Device(torch::kCPU);
}

ModelInput InputOn(const ModelInput& input, const torch::Device& device) {
  auto to = [&device](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  ModelInput out = input;
  out.dense = to(input.dense);
  out.labels = to(input.labels);
  for (TableInput& t : out.tables) t.uses = to(t.uses), t.inverse = to(t.inverse);
  for (BlockInput& b : out.blocks) b.offsets = to(b.offsets), b.src_local = to(b.src_local);
  for (auto& [name, ids] : out.ids) ids = to(ids);
  return out;
}

Result<torch::Tensor> PredictStep(Model& model, const ModelInput& input) {
  try {
    const torch::Device device = ModelDevice(model);
    if (!device.is_cpu()) return model.Predict(model.Encode(InputOn(input, device))).to(torch::kCPU);
    return model.Predict(model.Encode(input));
  } catch (const std::exception& e) {
    return InvalidArgument("the model failed in evaluation step " + std::to_string(input.key.step) + ": " +
                           FirstLine(e.what()));
  }
}

Result<std::shared_ptr<Model>> WithEncoder(std::shared_ptr<Model> model, const std::string& name,
                                           const EncoderFactory& factory, const ModelSpec& spec) {
  if (name.empty()) return model;
  SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<Encoder> encoder, CallFactory("encoder", name, factory, spec));
  return std::shared_ptr<Model>(std::make_shared<EncodedModel>(std::move(encoder), std::move(model)));
}

namespace {
constexpr uint64_t kDropoutDomain = 0xD2A9'0E7C'51F3'4B11ull;  // keeps masks apart from samples

// Unit(i) >= p without the conversion: Unit(i) is (Bits(i) >> 11) * 2^-53 and p * 2^53 is exact,
// so the two comparisons keep the same elements.
uint64_t KeepThreshold(double p) { return static_cast<uint64_t>(std::ceil(p * 0x1.0p53)); }

// Element i of [lo, hi): kept (times `scale`) when bit stream index i of `k` clears the
// threshold. Branch-free so it vectorises (the 64-bit multiplies need AVX-512DQ); `in_place`
// scales out[i], else writes the mask there.
__attribute__((target_clones("arch=skylake-avx512", "avx2", "default"))) void KeyedMaskRange(
    float* out, bool in_place, int64_t lo, int64_t hi, Key k, uint64_t keep, float scale) {
  if (in_place) {
    for (int64_t i = lo; i < hi; ++i) out[i] *= (k.Bits(static_cast<uint64_t>(i)) >> 11) >= keep ? scale : 0.0f;
  } else {
    for (int64_t i = lo; i < hi; ++i) out[i] = (k.Bits(static_cast<uint64_t>(i)) >> 11) >= keep ? scale : 0.0f;
  }
}

// The mask over n elements on the TBB workers: each element a pure function of its index.
void KeyedMask(float* out, bool in_place, int64_t n, const Key& k, double p, float scale) {
  const uint64_t keep = KeepThreshold(p);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, int64_t{1} << 15), [&](const auto& r) {
    KeyedMaskRange(out, in_place, r.begin(), r.end(), k, keep, scale);
  });
}
}  // namespace

Key DropoutKey(const SampleKey& key, uint64_t site) {
  return Key(key.seed).With(kDropoutDomain).With(key.epoch).With(key.step).With(site);
}

torch::Tensor KeyedDropoutMask(at::IntArrayRef sizes, double p, const SampleKey& key, uint64_t site,
                               const torch::Device& device) {
  const Key k = DropoutKey(key, site);
  const auto scale = static_cast<float>(1.0 / (1.0 - p));
#ifdef SLUICE_HAVE_TORCH_CUDA
  if (device.is_cuda()) return CudaKeyedMask(sizes, k, p, scale, device);
#endif
  torch::Tensor mask = torch::empty(sizes, torch::kFloat);
  KeyedMask(mask.data_ptr<float>(), false, mask.numel(), k, p, scale);
  return device.is_cpu() ? mask : mask.to(device);
}

torch::Tensor KeyedDropout(const torch::Tensor& x, double p, const SampleKey& key, uint64_t site) {
  if (p <= 0) return x;
  if (!x.requires_grad() && x.is_contiguous() && x.scalar_type() == torch::kFloat && x.is_cpu()) {
    // Nothing flows back through it (the gathered features): scaled in place, no mask tensor.
    // The same product as x * mask, so the same bits.
    const Key k = DropoutKey(key, site);
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    KeyedMask(x.data_ptr<float>(), true, x.numel(), k, p, scale);
    return x;
  }
  return x * KeyedDropoutMask(x.sizes(), p, key, site, x.device());
}

void ApplyRowOptimizer(RowOptimizer opt, std::span<float* const> rows, const torch::Tensor& sums,
                       int64_t d, float lr) {
  const float* g = sums.data_ptr<float>();
  const auto n = static_cast<int64_t>(rows.size());
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 256), [&](const auto& r) {
    UpdateRows(opt, rows.data(), g, r.begin(), r.end(), d, lr);
  });
}

Result<std::shared_ptr<Model>> CallModelFactory(const std::string& name, const ModelFactory& factory,
                                                const ModelSpec& spec) {
  return CallFactory("model", name, factory, spec);
}

}  // namespace sluice
