#include "train/nc/nc_model.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "common/prefetch.h"
#include "sampler/random.h"
#include "train/model_step.h"

namespace sluice {
namespace {


// dst index of every sampled edge: i repeated offsets[i + 1] - offsets[i] times.
torch::Tensor DstIndex(const BlockInput& b) {
  const torch::Tensor counts = b.offsets.slice(0, 1) - b.offsets.slice(0, 0, b.num_dst);
  // The output size given: on a GPU it would otherwise be read back (a wait for the device).
  return torch::repeat_interleave(torch::arange(b.num_dst, b.offsets.options()), counts, /*dim=*/0,
                                  b.src_local.size(0));
}

torch::Tensor Degrees(const BlockInput& b) {
  return (b.offsets.slice(0, 1) - b.offsets.slice(0, 0, b.num_dst)).to(torch::kFloat);
}

}  // namespace

GnnModelImpl::GnnModelImpl(const NcModelConfig& config, GnnShape shape, torch::Tensor in_degree)
    : cfg_(config), shape_(shape), in_degree_(std::move(in_degree)) {
  const int layers = cfg_.layers;
  for (int l = 0; l < layers; ++l) {
    const bool last = l + 1 == layers;
    const std::string n = std::to_string(l);
    const bool gat = cfg_.kind == GnnKind::kGat;
    const int64_t in = l == 0 ? shape_.in_dim : cfg_.hidden * (gat ? cfg_.heads : 1);
    const int64_t heads = gat ? (last ? cfg_.output_heads : cfg_.heads) : 1;
    const int64_t out = last ? shape_.classes : cfg_.hidden;
    const int64_t width = out * heads;
    const bool sage = cfg_.kind == GnnKind::kGraphSage;
    // GraphSage: a root and a neighbour transform (the root's has the bias); GCN and GAT: one
    // weight (Glorot) and a bias added after aggregation.
    self_.push_back(register_module("self" + n, torch::nn::Linear(torch::nn::LinearOptions(in, width).bias(sage))));
    if (sage) {
      const bool pool = cfg_.aggregator == SageAggregator::kMaxPool;
      if (pool) pool_.push_back(register_module("pool" + n, torch::nn::Linear(in, in)));
      neigh_.push_back(register_module("neigh" + n, torch::nn::Linear(torch::nn::LinearOptions(in, width).bias(false))));
    } else {
      torch::NoGradGuard no_grad;
      torch::nn::init::xavier_uniform_(self_.back()->weight);
      bias_.push_back(register_parameter("bias" + n, torch::zeros({last && gat ? out : width})));
    }
    if (gat) {
      att_src_.push_back(register_parameter("att_src" + n, torch::empty({1, heads, out})));
      att_dst_.push_back(register_parameter("att_dst" + n, torch::empty({1, heads, out})));
      torch::NoGradGuard no_grad;
      torch::nn::init::xavier_uniform_(att_src_.back());
      torch::nn::init::xavier_uniform_(att_dst_.back());
    }
    if (!last && cfg_.norm == NormKind::kBatch) {
      batch_norm_.push_back(register_module("batch_norm" + n, torch::nn::BatchNorm1d(width)));
    }
    if (!last && cfg_.norm == NormKind::kLayer) {
      layer_norm_.push_back(register_module(
          "layer_norm" + n, torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}))));
    }
  }
}

namespace {

// Each destination's sum of its sources' rows, added in edge order from zero (index_add's
// order, so the same bits) without a row per edge: for the first layer, whose input (the
// features) takes no gradient, that copy was the step's largest tensor.
torch::Tensor SumNeighbours(const torch::Tensor& h, const BlockInput& b) {
  const torch::Tensor src = h.contiguous();
  const int64_t d = src.size(1);
  torch::Tensor out = torch::zeros({b.num_dst, d});
  const float* x = src.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t* off = b.offsets.data_ptr<int64_t>();
  const int64_t* nb = b.src_local.data_ptr<int64_t>();
  // Sources are rows anywhere in h: the one a few edges ahead is asked for while this one adds.
  constexpr int64_t kAhead = 6;
  const size_t row_bytes = static_cast<size_t>(d) * 4;
  at::parallel_for(0, b.num_dst, 256, [&](int64_t begin, int64_t end) {
    const int64_t last_edge = off[end];
    for (int64_t v = begin; v < end; ++v) {
      float* row = o + v * d;
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        if (e + kAhead < last_edge) PrefetchForRead(x + nb[e + kAhead] * d, row_bytes);
        const float* s = x + nb[e] * d;
        for (int64_t k = 0; k < d; ++k) row[k] += s[k];
      }
    }
  });
  return out;
}

}  // namespace

torch::Tensor GnnModelImpl::Sage(int l, const torch::Tensor& h, const BlockInput& b,
                                 const torch::Tensor& dst_index) {
  torch::Tensor agg;
  if (cfg_.aggregator == SageAggregator::kMean) {
    // On a device (or when h takes a gradient) index_add: deterministic there, and in edge
    // order on the CPU, so the same sums as SumNeighbours's.
    agg = h.requires_grad() || !h.is_cpu()
              ? torch::zeros({b.num_dst, h.size(1)}, h.options()).index_add(0, dst_index, h.index_select(0, b.src_local))
              : SumNeighbours(h, b);
    agg = agg / Degrees(b).clamp_min(1).unsqueeze(1);
  } else {
    const torch::Tensor p = torch::relu(pool_[l](h)).index_select(0, b.src_local);
    agg = torch::zeros({b.num_dst, p.size(1)}, p.options())
              .scatter_reduce(0, dst_index.unsqueeze(1).expand_as(p), p, "amax", /*include_self=*/false);
  }
  return self_[l](h.slice(0, 0, b.num_dst)) + neigh_[l](agg);
}

torch::Tensor GnnModelImpl::Gcn(int l, const torch::Tensor& h, const BlockInput& b,
                                const torch::Tensor& dst_index, const torch::Tensor& nodes) {
  if (in_degree_.device() != nodes.device()) in_degree_ = in_degree_.to(nodes.device());  // once a run
  const torch::Tensor norm =
      (in_degree_.index_select(0, nodes.slice(0, 0, b.num_src)).to(torch::kFloat) + 1).rsqrt().unsqueeze(1);
  const torch::Tensor hw = self_[l](h) * norm;  // h_j W / sqrt(deg(j) + 1)
  const torch::Tensor agg =
      torch::zeros({b.num_dst, hw.size(1)}, hw.options()).index_add(0, dst_index, hw.index_select(0, b.src_local));
  return (agg + hw.slice(0, 0, b.num_dst)) * norm.slice(0, 0, b.num_dst) + bias_[l];
}

torch::Tensor GnnModelImpl::Gat(int l, const torch::Tensor& h, const BlockInput& b,
                                const torch::Tensor& dst_index, const ModelInput& input) {
  const int64_t heads = att_src_[l].size(1), out = att_src_[l].size(2);
  const torch::Tensor wh = self_[l](h).view({b.num_src, heads, out});
  const torch::Tensor a_src = (wh * att_src_[l]).sum(-1);                          // [src, H]
  const torch::Tensor a_dst = (wh.slice(0, 0, b.num_dst) * att_dst_[l]).sum(-1);  // [dst, H]
  const torch::Tensor self_loops = torch::arange(b.num_dst, b.src_local.options());
  const torch::Tensor src = torch::cat({b.src_local, self_loops});
  const torch::Tensor dst = torch::cat({dst_index, self_loops});
  const torch::Tensor e = torch::leaky_relu(a_src.index_select(0, src) + a_dst.index_select(0, dst), 0.2);
  torch::Tensor top;  // per destination and head, the largest score (softmax is shift-free)
  {
    torch::NoGradGuard no_grad;
    top = torch::zeros({b.num_dst, heads}, e.options())
              .scatter_reduce(0, dst.unsqueeze(1).expand_as(e), e, "amax", /*include_self=*/false);
  }
  const torch::Tensor ex = torch::exp(e - top.index_select(0, dst));
  const torch::Tensor sum = torch::zeros({b.num_dst, heads}, ex.options()).index_add(0, dst, ex);
  torch::Tensor alpha = ex / sum.index_select(0, dst);
  if (input.training) alpha = KeyedDropout(alpha, cfg_.attention_dropout, input.key, 2 * l + 1);
  const torch::Tensor agg = torch::zeros({b.num_dst, heads, out}, wh.options())
                                .index_add(0, dst, alpha.unsqueeze(-1) * wh.index_select(0, src));
  const bool last = l + 1 == layers();
  return (last ? agg.mean(1) : agg.reshape({b.num_dst, heads * out})) + bias_[l];
}

torch::Tensor GnnModelImpl::Layer(int l, const torch::Tensor& h, const BlockInput& block,
                                  const torch::Tensor& nodes, const ModelInput& input) {
  const torch::Tensor dst_index = DstIndex(block);
  switch (cfg_.kind) {
    case GnnKind::kGraphSage: return Sage(l, h, block, dst_index);
    case GnnKind::kGcn: return Gcn(l, h, block, dst_index, nodes);
    case GnnKind::kGat: return Gat(l, h, block, dst_index, input);
  }
  return {};
}

torch::Tensor GnnModelImpl::Hidden(int l, torch::Tensor h, const ModelInput& input) {
  (void)input;
  if (cfg_.norm == NormKind::kBatch) h = batch_norm_[l](h);
  if (cfg_.norm == NormKind::kLayer) h = layer_norm_[l](h);
  return cfg_.kind == GnnKind::kGat ? torch::elu(h) : torch::relu(h);
}

torch::Tensor GnnModelImpl::Apply(int l, const torch::Tensor& h, const BlockInput& block,
                                  const torch::Tensor& nodes, const ModelInput& input) {
  torch::Tensor out = Layer(l, h, block, nodes, input);
  return l + 1 < layers() ? Hidden(l, out, input) : out;
}

int64_t GnnModelImpl::OutputWidth(int l) const {
  if (l + 1 == layers()) return shape_.classes;
  return cfg_.kind == GnnKind::kGat ? static_cast<int64_t>(cfg_.hidden) * cfg_.heads : cfg_.hidden;
}

torch::Tensor GnnModelImpl::Logits(const ModelInput& input) {
  TORCH_CHECK(static_cast<int>(input.blocks.size()) == layers(), "the step has ",
              input.blocks.size(), " blocks for ", layers(), " layers");
  const torch::Tensor& nodes = input.ids.at("nodes");
  torch::Tensor h = input.tables.at(0).uses;
  for (int l = 0; l < layers(); ++l) {
    const BlockInput& b = input.blocks[static_cast<size_t>(l)];
    h = h.slice(0, 0, b.num_src);
    if (input.training) h = KeyedDropout(h, cfg_.dropout, input.key, 2 * static_cast<uint64_t>(l));
    h = Apply(l, h, b, nodes, input);
  }
  return h;
}

torch::Tensor GnnModelImpl::Loss(const ModelInput& input) {
  const torch::Tensor logits = Logits(input);
  if (logits.is_cpu()) return torch::nn::functional::cross_entropy(logits, input.labels);
  // On a GPU: the log-softmax picked by a one-hot mask, elementwise forward and backward, so
  // the loss and its gradient do not depend on the order of atomic adds.
  const torch::Tensor picked = torch::arange(logits.size(1), input.labels.options()).unsqueeze(0) ==
                               input.labels.unsqueeze(1);
  return -(torch::log_softmax(logits, 1) * picked.to(logits.scalar_type())).sum(1).mean();
}

uint64_t GnnModelImpl::StepBytes() const {
  // Training: what autograd keeps per layer: the dropped input (the linear layers save views
  // into it), and from the second layer on its input and dropout mask too (the input needs a
  // gradient); the aggregate (GraphSage, GCN) or the per-edge scores and transformed rows
  // (GAT); the activation's output. On top, the largest transient of any layer (a row per
  // sampled edge: GraphSage's mean gathers raw inputs, the others transformed rows) and in
  // backward the gradients of the largest layer. Evaluation keeps nothing for backward: a
  // layer's input, transient and output at a time. Measured against peak RSS by
  // bench/memory_report.py.
  const bool gat = cfg_.kind == GnnKind::kGat;
  uint64_t kept = 0, transient = 0, grads = 0, eval = 0;
  for (int l = 0; l < layers(); ++l) {
    const auto in = static_cast<uint64_t>(l == 0 ? shape_.in_dim : OutputWidth(l - 1));
    const uint64_t heads = gat ? static_cast<uint64_t>(l + 1 == layers() ? cfg_.output_heads : cfg_.heads) : 1;
    const uint64_t out = static_cast<uint64_t>(OutputWidth(l)) * (gat && l + 1 == layers() ? heads : 1);
    const uint64_t message = cfg_.kind == GnnKind::kGraphSage ? in : out;
    // The first layer's mean needs no row per edge (SumNeighbours).
    const bool fused = l == 0 && cfg_.kind == GnnKind::kGraphSage && cfg_.aggregator == SageAggregator::kMean;
    for (const bool training : {true, false}) {
      const GnnShape::Layers& sh = training ? shape_.train : shape_.eval;
      const bool per_layer = sh.src.size() == static_cast<size_t>(layers());
      const auto at = [&](const std::vector<int64_t>& v, int64_t all) {
        return static_cast<uint64_t>(per_layer ? v[static_cast<size_t>(l)] : all);
      };
      const uint64_t src = at(sh.src, shape_.max_nodes), dst = at(sh.dst, shape_.max_nodes);
      const uint64_t e = at(sh.edges, shape_.max_edges) + (gat ? dst : 0);
      const uint64_t agg = dst * in * 4 + (gat ? e * (4 * heads * 3 + out * 4) + src * out * 4 : 0);
      const uint64_t step = (fused ? 0 : e * message * 4) + (cfg_.kind == GnnKind::kGraphSage ? 0 : src * out * 4);
      if (!training) {
        eval = std::max(eval, src * in * 4 + agg + step + dst * out * 4 * 2);
        continue;
      }
      const uint64_t layer_kept = src * in * 4 * (l == 0 ? 1 : 3) + agg + dst * out * 4 * 2;
      kept += layer_kept;
      transient = std::max(transient, step);
      grads = std::max(grads, l == 0 ? dst * out * 4 * 3 : layer_kept + step);
    }
  }
  return std::max(kept + transient + grads, eval);
}

ClassMetrics ClassificationMetrics(const std::vector<int64_t>& predicted,
                                   const std::vector<int64_t>& labels, int64_t classes) {
  ClassMetrics m;
  m.nodes = labels.size();
  std::vector<uint64_t> tp(static_cast<size_t>(classes)), fp(tp.size()), fn(tp.size());
  uint64_t right = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto y = static_cast<size_t>(labels[i]), p = static_cast<size_t>(predicted[i]);
    if (y == p) {
      ++right, ++tp[y];
    } else {
      ++fn[y], ++fp[p];
    }
  }
  double f1 = 0;
  int present = 0;  // classes among the labels or the predictions
  for (size_t c = 0; c < tp.size(); ++c) {
    const uint64_t denom = 2 * tp[c] + fp[c] + fn[c];
    if (denom == 0) continue;
    f1 += 2.0 * static_cast<double>(tp[c]) / static_cast<double>(denom);
    ++present;
  }
  m.accuracy = labels.empty() ? 0 : static_cast<double>(right) / static_cast<double>(labels.size());
  m.macro_f1 = present ? f1 / present : 0;
  return m;
}

}  // namespace sluice
