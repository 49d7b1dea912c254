#include "train/lp/lp_step.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/clock.h"
#include "sampler/negatives.h"
#include "sampler/random.h"
#include "train/row_optimizers.h"

namespace sluice {
namespace {

using Clock = SteadyClock;

torch::Tensor IndexTensor(std::vector<int64_t>& v) {
  return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kInt64);
}

}  // namespace

LpStepper::LpStepper(const LpConfig& config, const NodeTableLayout& layout, uint64_t num_relations)
    : cfg_(config), layout_(layout), num_relations_(num_relations), decoder_(config.model.decoder) {
  InitRelations();
  stamp_.assign(layout_.num_nodes(), 0);
}

void LpStepper::InitRelations() {
  relations_ = torch::empty({static_cast<int64_t>(num_relations_), cfg_.model.dim});
  auto a = relations_.accessor<float, 2>();
  const Key k = Key(cfg_.train.seed).With(0x7AB1E).With(1);  // a pure function of the seed
  for (int64_t r = 0; r < a.size(0); ++r) {
    for (int64_t j = 0; j < a.size(1); ++j) {
      // DistMult/ComplEx relations start near one so early products are not vanishingly small.
      const double u = 2.0 * k.With(r).Unit(j) - 1.0;
      a[r][j] = static_cast<float>(cfg_.model.decoder == "transe" ? u * cfg_.model.init_scale
                                                                  : 1.0 + 0.1 * u);
    }
  }
  relations_.set_requires_grad(true);
  if (cfg_.train.relation_optimizer == "adam") {
    rel_opt_ = std::make_unique<torch::optim::Adam>(
        std::vector<torch::Tensor>{relations_}, torch::optim::AdamOptions(cfg_.train.relation_lr));
  } else {
    rel_opt_ = std::make_unique<torch::optim::Adagrad>(
        std::vector<torch::Tensor>{relations_},
        torch::optim::AdagradOptions(cfg_.train.relation_lr));
  }
}

LpSampled LpStepper::Sample(const LpStep& step, const StateEdges& edges,
                            const LpSchedule& schedule, uint64_t epoch, uint64_t index,
                            const std::vector<BlockId>& blocks) {
  auto t0 = Clock::now();
  const LpTrainConfig& tc = cfg_.train;
  const bool reciprocal = cfg_.model.reciprocal;
  const uint64_t b = step.end - step.begin;
  const uint64_t base_rel = num_relations_ / (reciprocal ? 2 : 1);
  // Queries: (head, relation, tail) per edge, plus (tail, r^-1, head) when reciprocal.
  const uint64_t q = reciprocal ? 2 * b : b;
  LpSampled out;
  out.b = b, out.q = q;
  out.head.resize(q), out.rel.resize(q), out.tail.resize(q);
  // The state's streamed edges, or (global shuffle) every edge held in memory.
  const std::vector<int64_t>& e_src = edges.src.empty() ? schedule.src() : edges.src;
  const std::vector<int64_t>& e_rel = edges.src.empty() ? schedule.rel() : edges.rel;
  const std::vector<int64_t>& e_dst = edges.src.empty() ? schedule.dst() : edges.dst;
  for (uint64_t i = 0; i < b; ++i) {
    const int64_t e = edges.order[step.begin + i];
    out.head[i] = e_src[e], out.rel[i] = e_rel[e], out.tail[i] = e_dst[e];
    if (reciprocal) {
      out.head[b + i] = e_dst[e], out.rel[b + i] = e_rel[e] + static_cast<int64_t>(base_rel),
      out.tail[b + i] = e_src[e];
    }
  }
  out.chunks = static_cast<uint32_t>(std::min<uint64_t>(tc.chunks, q));
  out.per_chunk = static_cast<uint32_t>(tc.negatives);
  std::vector<NodeRange> ranges;  // the state's partitions, in partition order
  std::vector<BlockId> sorted(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end());
  for (BlockId k : sorted) {
    if (layout_.bounds[k] < layout_.bounds[k + 1]) {
      ranges.push_back({static_cast<int64_t>(layout_.bounds[k]),
                        static_cast<int64_t>(layout_.bounds[k + 1])});
    }
  }
  const NegativeSampler negatives = NegativeSampler::Uniform(ranges);
  out.tail_neg = negatives.Sample({tc.seed, epoch, 2 * index}, out.chunks, out.per_chunk);
  if (!reciprocal) {
    out.head_neg = negatives.Sample({tc.seed, epoch, 2 * index + 1}, out.chunks, out.per_chunk);
  }
  UniqueIds(out);
  times_.sampler_busy_s += SecondsSince(t0);
  return out;
}

// Unique rows in first-occurrence order (heads, tails, tail negatives, head negatives); the
// id lists become indices into them.
void LpStepper::UniqueIds(LpSampled& out) {
  if (++stamp_call_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    stamp_call_ = 1;
  }
  const uint64_t call = uint64_t{stamp_call_} << 32;
  std::vector<int64_t>& unique = out.unique;
  unique.reserve(2 * out.q + out.tail_neg.size() + out.head_neg.size());
  auto local = [&](std::vector<int64_t>& ids) {
    for (int64_t& v : ids) {
      uint64_t& s = stamp_[v];
      if ((s & ~0xFFFFFFFFull) != call) {
        s = call | unique.size();
        unique.push_back(v);
      }
      v = static_cast<int64_t>(s & 0xFFFFFFFFull);
    }
  };
  local(out.head);
  local(out.tail);
  local(out.tail_neg);
  local(out.head_neg);
}

std::vector<float*> LpStepper::RowAddresses(const LpSampled& s,
                                            const std::vector<std::byte*>& base) const {
  std::vector<float*> rows(s.unique.size());
  for (size_t i = 0; i < s.unique.size(); ++i) {
    const int64_t v = s.unique[i];
    const BlockId blk = layout_.block_of(v);
    rows[i] = reinterpret_cast<float*>(
        base[blk] + (static_cast<uint64_t>(v) - layout_.bounds[blk]) * layout_.row_bytes);
  }
  return rows;
}

// Bilinear decoders: each use's row copied straight from the table into the batch tensors
// (heads, tails, negatives), in parallel.
void LpStepper::GatherUses(LpSampled& s, const std::vector<float*>& rows, LpBatch& batch) const {
  const int64_t d = cfg_.model.dim;
  const bool reciprocal = cfg_.model.reciprocal;
  batch.h = torch::empty({static_cast<int64_t>(s.q), d});
  batch.t = torch::empty({static_cast<int64_t>(s.q), d});
  batch.tail_neg = torch::empty({s.chunks, s.per_chunk, d});
  if (!reciprocal) batch.head_neg = torch::empty({s.chunks, s.per_chunk, d});
  struct Use {
    const std::vector<int64_t>* ids;
    float* out;
  };
  std::vector<Use> uses = {{&s.head, batch.h.data_ptr<float>()},
                           {&s.tail, batch.t.data_ptr<float>()},
                           {&s.tail_neg, batch.tail_neg.data_ptr<float>()}};
  if (!reciprocal) uses.push_back({&s.head_neg, batch.head_neg.data_ptr<float>()});
  struct Piece {
    size_t use;
    int64_t begin, end;
  };
  std::vector<Piece> pieces;
  for (size_t k = 0; k < uses.size(); ++k) {
    const int64_t m = static_cast<int64_t>(uses[k].ids->size());
    for (int64_t i = 0; i < m; i += 1024) pieces.push_back({k, i, std::min(m, i + 1024)});
  }
  tbb::parallel_for(size_t{0}, pieces.size(), [&](size_t k) {
    const Piece& pc = pieces[k];
    const int64_t* ids = uses[pc.use].ids->data();
    float* out = uses[pc.use].out;
    for (int64_t i = pc.begin; i < pc.end; ++i) {
      std::memcpy(out + i * d, rows[static_cast<size_t>(ids[i])], d * 4);
    }
  });
}

double LpStepper::Penalty(const LpBatch& batch, LpGrads& g, double scale) const {
  const LpTrainConfig& tc = cfg_.train;
  if (tc.regularizer == "none" || tc.regularization <= 0) return 0;
  const double w = tc.regularization * scale * (cfg_.model.reciprocal ? 1 : 2);
  const bool n3 = tc.regularizer == "n3";
  double loss = AddRowPenalty(n3, w, batch.h, g.h);
  loss += AddRowPenalty(n3, w, batch.t, g.t);
  loss += AddRowPenalty(n3, w, batch.r, g.r);
  return loss;
}

// Sums the per-use gradients into per-row ones in use order (heads, tails, tail negatives,
// head negatives). Each thread owns a range of rows and scans every use, adding those of its
// rows, so every row is summed in that order whatever the thread count.
torch::Tensor LpStepper::SumRowGrads(const LpSampled& s, const LpGrads& g, int64_t u) const {
  const int64_t d = cfg_.model.dim;
  torch::Tensor grad = torch::zeros({u, d});
  float* gr = grad.data_ptr<float>();
  std::vector<std::pair<const std::vector<int64_t>*, torch::Tensor>> parts = {
      {&s.head, g.h.reshape({-1, d}).contiguous()},
      {&s.tail, g.t.reshape({-1, d}).contiguous()},
      {&s.tail_neg, g.tail_neg.reshape({-1, d}).contiguous()}};
  if (!cfg_.model.reciprocal) parts.push_back({&s.head_neg, g.head_neg.reshape({-1, d}).contiguous()});
  const int64_t owners = std::max(1, tbb::this_task_arena::max_concurrency());
  tbb::parallel_for(int64_t{0}, owners, [&](int64_t k) {
    const int64_t lo = u * k / owners, hi = u * (k + 1) / owners;
    for (const auto& [idx, gt] : parts) {
      const float* src = gt.template data_ptr<float>();
      const int64_t* ids = idx->data();
      for (size_t i = 0; i < idx->size(); ++i) {
        if (ids[i] < lo || ids[i] >= hi) continue;
        float* __restrict dst = gr + ids[i] * d;
        const float* __restrict x = src + i * static_cast<size_t>(d);
        for (int64_t j = 0; j < d; ++j) dst[j] += x[j];
      }
    }
  });
  return grad;
}

// Bilinear decoders: gradients computed directly (no autograd graph).
LpStepper::StepGrads LpStepper::BilinearStep(LpSampled& s, LpBatch& batch) const {
  const LpTrainConfig& tc = cfg_.train;
  const int64_t d = cfg_.model.dim;
  const double scale = 1.0 / static_cast<double>(s.q * (cfg_.model.reciprocal ? 1 : 2));
  batch.r = relations_.detach().index_select(0, IndexTensor(s.rel));
  LpGrads g = BilinearLossAndGrads(cfg_.model.decoder, tc.loss, tc.margin, batch, scale);
  StepGrads out;
  out.loss = g.loss * scale;
  out.loss += Penalty(batch, g, scale);
  out.rows = SumRowGrads(s, g, static_cast<int64_t>(s.unique.size()));
  out.relations = torch::zeros({static_cast<int64_t>(num_relations_), d});
  float* rg = out.relations.data_ptr<float>();
  torch::Tensor c = g.r.contiguous();
  const float* src = c.data_ptr<float>();
  for (size_t i = 0; i < s.rel.size(); ++i) {
    for (int64_t j = 0; j < d; ++j) rg[s.rel[i] * d + j] += src[i * static_cast<size_t>(d) + j];
  }
  return out;
}

// TransE: autograd over the unique rows.
LpStepper::StepGrads LpStepper::AutogradStep(LpSampled& s, const std::vector<float*>& rows) {
  const LpTrainConfig& tc = cfg_.train;
  const bool reciprocal = cfg_.model.reciprocal;
  const int64_t d = cfg_.model.dim, u = static_cast<int64_t>(s.unique.size());
  torch::Tensor emb = torch::empty({u, d});
  float* e = emb.data_ptr<float>();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, u, 512), [&](const auto& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) std::memcpy(e + i * d, rows[i], d * 4);
  });
  emb.set_requires_grad(true);
  torch::Tensor h = emb.index_select(0, IndexTensor(s.head));
  torch::Tensor t = emb.index_select(0, IndexTensor(s.tail));
  torch::Tensor r = relations_.index_select(0, IndexTensor(s.rel));
  torch::Tensor tn = emb.index_select(0, IndexTensor(s.tail_neg)).view({s.chunks, s.per_chunk, d});
  torch::Tensor tq = decoder_.TailQuery(h, r);
  torch::Tensor pos = decoder_.Score(tq, t);
  torch::Tensor loss = torch::zeros({});
  torch::Tensor hq, hn;
  if (!reciprocal) {
    hq = decoder_.HeadQuery(r, t);
    hn = emb.index_select(0, IndexTensor(s.head_neg)).view({s.chunks, s.per_chunk, d});
  }
  for (uint32_t c = 0; c < s.chunks; ++c) {
    const auto lo = static_cast<int64_t>(s.q * c / s.chunks);
    const auto hi = static_cast<int64_t>(s.q * (c + 1) / s.chunks);
    torch::Tensor p = pos.slice(0, lo, hi);
    loss = loss + LpLoss(tc.loss, tc.margin, p, decoder_.ScoreAll(tq.slice(0, lo, hi), tn[c]));
    if (!reciprocal) {
      loss = loss + LpLoss(tc.loss, tc.margin, p, decoder_.ScoreAll(hq.slice(0, lo, hi), hn[c]));
    }
  }
  const double scale = 1.0 / static_cast<double>(s.q * (reciprocal ? 1 : 2));
  loss = loss * scale;
  if (tc.regularizer != "none" && tc.regularization > 0) {
    const double w = tc.regularization * scale * (reciprocal ? 1 : 2);
    if (tc.regularizer == "l2") {
      loss = loss + w * (h.pow(2).sum() + t.pow(2).sum() + r.pow(2).sum());
    } else {
      loss = loss + w * (h.abs().pow(3).sum() + t.abs().pow(3).sum() + r.abs().pow(3).sum());
    }
  }
  rel_opt_->zero_grad();
  loss.backward();
  StepGrads out;
  out.loss = loss.item<double>();
  out.rows = emb.grad().contiguous();
  out.relations = relations_.grad().clone();
  return out;
}

double LpStepper::Train(LpSampled& sampled, const std::vector<std::byte*>& block_base) {
  auto t0 = Clock::now();
  const std::vector<float*> rows = RowAddresses(sampled, block_base);
  const bool bilinear = cfg_.model.decoder != "transe";
  LpBatch batch;
  if (bilinear) GatherUses(sampled, rows, batch);
  auto t2 = Clock::now();
  times_.gather_s += std::chrono::duration<double>(t2 - t0).count();
  StepGrads g = bilinear ? BilinearStep(sampled, batch) : AutogradStep(sampled, rows);
  relations_.mutable_grad() = g.relations;
  auto t3 = Clock::now();
  times_.compute_s += std::chrono::duration<double>(t3 - t2).count();
  // Row-wise Adagrad into the rows (state in the second half of the row).
  const float* gp = g.rows.data_ptr<float>();
  const float lr = static_cast<float>(cfg_.train.lr);
  const int64_t d = cfg_.model.dim, u = static_cast<int64_t>(sampled.unique.size());
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, u, 256), [&](const auto& range) {
    AdagradRows(rows.data(), gp, range.begin(), range.end(), d, lr);
  });
  rel_opt_->step();
  times_.update_s += SecondsSince(t3);
  return g.loss;
}

}  // namespace sluice
