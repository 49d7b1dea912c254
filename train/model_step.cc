#include "train/model_step.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cstring>
#include <exception>

#include "train/torch_io.h"

namespace sluice {

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

Result<StepGrads> RunModel(Model& model, ModelInput& input, bool allow_fused) {
  StepGrads out;
  try {
    ModelInput in = model.Encode(std::move(input));
    FusedOutput fused;
    if (allow_fused && model.FusedLoss(in, fused)) {
      out.loss = fused.loss;
      out.use_grads = std::move(fused.use_grads);
      return out;
    }
    torch::Tensor loss = model.Loss(in);
    loss.backward();
    out.loss = loss.item<double>();
    for (const TableInput& t : in.tables) out.use_grads.push_back({t.uses.grad()});
  } catch (const std::exception& e) {
    return InvalidArgument("the model failed at epoch " + std::to_string(input.key.epoch + 1) +
                           ", step " + std::to_string(input.key.step) + ": " + FirstLine(e.what()));
  }
  return out;
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
  std::shared_ptr<Model> model;
  try {
    model = factory(spec);
  } catch (const std::exception& e) {
    return InvalidArgument("model " + name + ": its factory failed: " + FirstLine(e.what()));
  }
  if (model == nullptr) return InvalidArgument("model " + name + ": its factory returned no model");
  return model;
}

}  // namespace sluice
