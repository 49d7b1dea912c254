#include "train/lp/lp_model.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "sampler/random.h"
#include "train/lp/softmax_rows.h"

namespace sluice {

torch::Tensor LpDecoder::TailQuery(const torch::Tensor& h, const torch::Tensor& r) const {
  if (kind_ == Decoder::kDistMult) return h * r;
  if (kind_ == Decoder::kDot) return h;
  if (kind_ == Decoder::kTransE) return h + r;
  // complex: (hr + i hi)(rr + i ri) = (hr rr - hi ri) + i (hr ri + hi rr); score = <q, t>.
  auto hs = h.chunk(2, 1), rs = r.chunk(2, 1);
  return torch::cat({hs[0] * rs[0] - hs[1] * rs[1], hs[0] * rs[1] + hs[1] * rs[0]}, 1);
}

torch::Tensor LpDecoder::HeadQuery(const torch::Tensor& r, const torch::Tensor& t) const {
  if (kind_ == Decoder::kDistMult) return t * r;
  if (kind_ == Decoder::kDot) return t;
  if (kind_ == Decoder::kTransE) return t - r;
  // complex: Re<h, r, conj(t)> = <hr, rr tr + ri ti> + <hi, rr ti - ri tr>.
  auto rs = r.chunk(2, 1), ts = t.chunk(2, 1);
  return torch::cat({rs[0] * ts[0] + rs[1] * ts[1], rs[0] * ts[1] - rs[1] * ts[0]}, 1);
}

torch::Tensor LpDecoder::Score(const torch::Tensor& q, const torch::Tensor& x) const {
  if (kind_ == Decoder::kTransE) return -((q - x).pow(2).sum(1).clamp_min(1e-12).sqrt());
  return (q * x).sum(1);
}

torch::Tensor LpDecoder::ScoreAll(const torch::Tensor& q, const torch::Tensor& candidates) const {
  if (kind_ == Decoder::kTransE) {
    auto d2 = q.pow(2).sum(1, true) + candidates.pow(2).sum(1).unsqueeze(0) -
              2 * q.mm(candidates.t());
    return -(d2.clamp_min(1e-12).sqrt());
  }
  return q.mm(candidates.t());
}

torch::Tensor LpDecoder::ScoreChunks(const torch::Tensor& q, const torch::Tensor& candidates) const {
  if (kind_ == Decoder::kTransE) {
    auto d2 = q.pow(2).sum(2, true) + candidates.pow(2).sum(2).unsqueeze(1) -
              2 * torch::bmm(q, candidates.transpose(1, 2));
    return -(d2.clamp_min(1e-12).sqrt());
  }
  return torch::bmm(q, candidates.transpose(1, 2));
}

torch::Tensor LpLoss(LossKind kind, double margin, const torch::Tensor& pos,
                     const torch::Tensor& neg) {
  if (kind == LossKind::kSoftmax) {
    return (torch::logsumexp(torch::cat({pos.unsqueeze(1), neg}, 1), 1) - pos).sum();
  }
  if (kind == LossKind::kLogistic) {
    return torch::softplus(-pos).sum() + torch::softplus(neg).mean(1).sum();
  }
  SLUICE_CHECK(kind == LossKind::kMargin, "unknown loss %s", EnumName(kind));
  return torch::relu(margin - pos.unsqueeze(1) + neg).mean(1).sum();
}

namespace {

// Pads q queries into [C, ceil(q / C), d] so chunk c's rows are queries [q*c/C, q*(c+1)/C);
// padding rows are zero. Returns the padded tensor and the row mask [C, bc].
struct Padded {
  torch::Tensor x;      // [C, bc, d]
  torch::Tensor index;  // [C * bc]: the query of each padded row, q for padding
  torch::Tensor mask;   // [C, bc] 1 for real rows
};

Padded Pad(const torch::Tensor& x, int64_t chunks) {
  const int64_t q = x.size(0), d = x.size(1);
  const int64_t bc = (q + chunks - 1) / chunks;
  if (q % chunks == 0) {  // equal chunks: a view, no copies (index stays undefined)
    Padded p;
    p.mask = torch::ones({chunks, bc});
    p.x = x.view({chunks, bc, d});
    return p;
  }
  std::vector<int64_t> index(static_cast<size_t>(chunks * bc), q);
  std::vector<float> mask(index.size(), 0.0f);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = q * c / chunks, hi = q * (c + 1) / chunks;
    for (int64_t i = lo; i < hi; ++i) {
      index[static_cast<size_t>(c * bc + i - lo)] = i;
      mask[static_cast<size_t>(c * bc + i - lo)] = 1.0f;
    }
  }
  Padded p;
  p.index = torch::tensor(index);
  p.mask = torch::tensor(mask).view({chunks, bc});
  p.x = torch::cat({x, torch::zeros({1, d})}, 0).index_select(0, p.index).view({chunks, bc, d});
  return p;
}

torch::Tensor Unpad(const torch::Tensor& padded, const Padded& p, int64_t q) {
  const int64_t d = padded.size(2);
  if (!p.index.defined()) return padded.reshape({q, d});
  torch::Tensor out = torch::zeros({q + 1, d});
  out.index_add_(0, p.index, padded.reshape({-1, d}));
  return out.narrow(0, 0, q);
}

struct SideGrads {
  torch::Tensor query;  // dL/dquery [q, d]
  torch::Tensor target; // dL/dtarget (the true candidate) [q, d]
  torch::Tensor neg;    // dL/dnegatives [C, n, d]
  double loss = 0;
};

// One corrupted side under the logistic or margin loss, as tensor ops: scores of `query`
// against its true candidate and its chunk's negatives (the softmax loss has its own fused
// path, SoftmaxSideChunk below).
SideGrads Side(LossKind loss, double margin, const torch::Tensor& query,
               const torch::Tensor& target, const torch::Tensor& neg, double scale) {
  const int64_t q = query.size(0), chunks = neg.size(0), n = neg.size(1);
  Padded p = Pad(query, chunks);
  torch::Tensor pos = (query * target).sum(1);                            // [q]
  torch::Tensor pos_p = p.index.defined()
                            ? torch::cat({pos, torch::zeros({1})}).index_select(0, p.index)
                                  .view({chunks, -1})
                            : pos.view({chunks, -1});                     // [C, bc]
  torch::Tensor s = torch::bmm(p.x, neg.transpose(1, 2));                 // [C, bc, n]
  torch::Tensor g_pos, g_s;
  double value = 0;
  if (loss == LossKind::kLogistic) {
    value = ((torch::softplus(-pos_p) + torch::softplus(s).mean(2)) * p.mask).sum().item<double>();
    g_pos = -torch::sigmoid(-pos_p);
    g_s = torch::sigmoid(s) / static_cast<double>(n);
  } else {
    torch::Tensor viol = margin - pos_p.unsqueeze(2) + s;
    torch::Tensor active = (viol > 0).to(torch::kFloat);
    value = ((torch::relu(viol).mean(2)) * p.mask).sum().item<double>();
    g_s = active / static_cast<double>(n);
    g_pos = -g_s.sum(2);
  }
  if (p.index.defined()) {  // zero the padding rows' gradients
    g_pos = g_pos * p.mask;
    g_s.mul_(p.mask.unsqueeze(2));
  }
  g_pos = g_pos * scale;                                                   // [C, bc]
  g_s.mul_(scale);                                                         // [C, bc, n]
  SideGrads out;
  out.loss = value;
  torch::Tensor g_pos_q = Unpad(g_pos.unsqueeze(2), p, q).squeeze(1);      // [q]
  out.query = Unpad(torch::bmm(g_s, neg), p, q) + g_pos_q.unsqueeze(1) * target;
  out.target = g_pos_q.unsqueeze(1) * query;
  out.neg = torch::bmm(g_s.transpose(1, 2), p.x);                          // [C, n, d]
  return out;
}

// Row-major C[m, n] = op(A) op(B) (beta 0) through the Fortran BLAS that libtorch links
// (column-major: a row-major [r, k] matrix is a column-major [k, r] one, so C^T = op(B)^T
// op(A)^T is computed). Found at run time: libtorch's own BLAS wrapper is not exported. Without
// a Fortran sgemm_ in the process (a libtorch with static MKL), falls back to torch::mm_out.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const float*, const float*, const int*, const float*, const int*,
                         const float*, float*, const int*, size_t, size_t);

std::atomic<bool> g_direct_blas{true};

SgemmFn FindSgemm() {
  static const SgemmFn fn = reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_"));
  return g_direct_blas.load(std::memory_order_relaxed) ? fn : nullptr;
}

void GemmRowMajor(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (SgemmFn sgemm = FindSgemm()) {
    const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
    const int mi = static_cast<int>(n), ni = static_cast<int>(m), ki = static_cast<int>(k);
    const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
    const float one = 1.0f, zero = 0.0f;
    sgemm(&ta, &tb, &mi, &ni, &ki, &one, b, &la, a, &lb, &zero, c, &lc, 1, 1);
    return;
  }
  auto view = [](const float* p, int64_t rows, int64_t cols, int64_t ld, bool t) {
    torch::Tensor x = torch::from_blob(const_cast<float*>(p), {rows, cols}, {ld, 1});
    return t ? x.t() : x;
  };
  torch::Tensor out = torch::from_blob(c, {m, n}, {ldc, 1});
  torch::mm_out(out, view(a, trans_a ? k : m, trans_a ? m : k, lda, trans_a),
                view(b, trans_b ? n : k, trans_b ? k : n, ldb, trans_b));
}

// One corrupted side of one chunk under the softmax loss: queries x [rows, d] against their true
// candidates t [rows, d] and the chunk's negatives [n, d]. The scores [rows, n] are computed,
// turned into gradients in place (SoftmaxRows) and multiplied back while they sit in cache, with
// BLAS called directly. Writes dq = dL/dx, dt = dL/dt (or adds it: add_dt), d_neg = dL/dneg
// and the per-query losses. Scratch: s [rows, n], pos and g_pos [rows].
void SoftmaxSideChunk(const float* x, const float* t, const float* neg, int64_t rows, int64_t n,
                      int64_t d, float scale, float* s, float* pos, float* g_pos, float* dq,
                      float* dt, bool add_dt, float* d_neg, double* loss) {
  if (rows == 0) {
    std::fill_n(d_neg, n * d, 0.0f);
    return;
  }
  RowDots(x, t, rows, d, pos);
  GemmRowMajor(false, true, rows, n, d, x, d, neg, d, s, n);            // S = X N^T
  SoftmaxRows(s, pos, nullptr, 0, rows, n, scale, g_pos, loss);
  GemmRowMajor(false, false, rows, d, n, s, n, neg, d, dq, d);          // dQ = G N
  TrueCandidateGrads(g_pos, x, t, rows, d, dq, dt, add_dt);
  GemmRowMajor(true, false, n, d, rows, s, n, x, d, d_neg, d);          // dN = G^T X
}

// Per-thread scratch of SoftmaxSideChunk (and DistMult's query and its gradient), grown as
// needed and reused from step to step rather than allocated per chunk. Safe as thread_local:
// a chunk's task makes no TBB call, so no other task can start on its thread mid-way.
struct ChunkScratch {
  std::vector<float> s, pos, g_pos, x, dq;
  static ChunkScratch& ForThisThread(int64_t rows, int64_t n, int64_t d) {
    thread_local ChunkScratch w;
    auto fit = [](std::vector<float>& v, int64_t size) {
      if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
    };
    fit(w.s, rows * n);
    fit(w.pos, rows);
    fit(w.g_pos, rows);
    fit(w.x, rows * d);
    fit(w.dq, rows * d);
    return w;
  }
};

// Queries are split into chunks [q*c/C, q*(c+1)/C); both sides share that split. The work runs
// as one task per chunk (DistMult: both sides and its h/r/t gradients, so a chunk's rows stay
// in cache) or per (side, chunk) (the other decoders). Tasks write disjoint rows and the
// per-query losses are summed in a fixed order afterwards, so results do not depend on the
// number of threads or which thread runs which task.
struct ChunkRange {
  int64_t lo, rows;
};
ChunkRange ChunkOf(int64_t q, int64_t chunks, int64_t c) {
  const int64_t lo = q * c / chunks;
  return {lo, q * (c + 1) / chunks - lo};
}

double SumInOrder(const double* begin, const double* end) {
  double sum = 0;
  for (const double* x = begin; x != end; ++x) sum += *x;
  return sum;
}

// DistMult: score <h * r, t>. The tail query is h * r (true candidate t), the head query t * r
// (true candidate h); dh = dq_tail r + dt_head, dr = dq_tail h + dq_head t,
// dt = dt_tail + dq_head r.
LpGrads DistMultSoftmax(const LpBatch& b, double scale) {
  const int64_t q = b.h.size(0), d = b.h.size(1), chunks = b.tail_neg.size(0),
                n = b.tail_neg.size(1);
  const bool heads = b.head_neg.defined();
  torch::Tensor h = b.h.contiguous(), r = b.r.contiguous(), t = b.t.contiguous();
  torch::Tensor tail_neg = b.tail_neg.contiguous(), head_neg;
  LpGrads g;
  g.h = torch::empty({q, d});
  g.r = torch::empty({q, d});
  g.t = torch::empty({q, d});
  g.tail_neg = torch::empty({chunks, n, d});
  if (heads) {
    head_neg = b.head_neg.contiguous();
    g.head_neg = torch::empty({chunks, n, d});
  }
  std::vector<double> loss(static_cast<size_t>((heads ? 2 : 1) * q));
  const float fscale = static_cast<float>(scale);
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t c) {
    const ChunkRange cr = ChunkOf(q, chunks, c);
    const int64_t off = cr.lo * d, rows = cr.rows;
    const float *hp = h.data_ptr<float>() + off, *rp = r.data_ptr<float>() + off,
                *tp = t.data_ptr<float>() + off;
    float *gh = g.h.data_ptr<float>() + off, *gr = g.r.data_ptr<float>() + off,
          *gt = g.t.data_ptr<float>() + off;
    ChunkScratch& w = ChunkScratch::ForThisThread(rows, n, d);
    RowProducts(hp, rp, rows, d, w.x.data());
    SoftmaxSideChunk(w.x.data(), tp, tail_neg.data_ptr<float>() + c * n * d, rows, n, d, fscale,
                     w.s.data(), w.pos.data(), w.g_pos.data(), w.dq.data(), gt, false,
                     g.tail_neg.data_ptr<float>() + c * n * d, loss.data() + cr.lo);
    RowProducts(w.dq.data(), rp, rows, d, gh);
    RowProducts(w.dq.data(), hp, rows, d, gr);
    if (!heads) return;
    RowProducts(tp, rp, rows, d, w.x.data());
    SoftmaxSideChunk(w.x.data(), hp, head_neg.data_ptr<float>() + c * n * d, rows, n, d, fscale,
                     w.s.data(), w.pos.data(), w.g_pos.data(), w.dq.data(), gh, true,
                     g.head_neg.data_ptr<float>() + c * n * d, loss.data() + q + cr.lo);
    AddRowProducts(w.dq.data(), rp, rows, d, gt);
    AddRowProducts(w.dq.data(), tp, rows, d, gr);
  });
  g.loss = SumInOrder(loss.data(), loss.data() + loss.size());
  return g;
}

// The other bilinear decoders' softmax sides: one task per (side, chunk) on the queries
// LpDecoder built; the caller maps the query gradients back to h, r and t.
void SoftmaxSides(const torch::Tensor* query, const torch::Tensor* target, const torch::Tensor* neg,
                  int sides, double scale, SideGrads** out) {
  const int64_t q = query[0].size(0), d = query[0].size(1), chunks = neg[0].size(0),
                n = neg[0].size(1);
  std::vector<double> loss(static_cast<size_t>(sides * q));
  for (int k = 0; k < sides; ++k) {
    out[k]->query = torch::empty({q, d});
    out[k]->target = torch::empty({q, d});
    out[k]->neg = torch::empty({chunks, n, d});
  }
  tbb::parallel_for(int64_t{0}, sides * chunks, [&](int64_t task) {
    const int k = static_cast<int>(task / chunks);
    const int64_t c = task % chunks;
    const ChunkRange cr = ChunkOf(q, chunks, c);
    const int64_t off = cr.lo * d;
    ChunkScratch& w = ChunkScratch::ForThisThread(cr.rows, n, 0);
    SoftmaxSideChunk(query[k].data_ptr<float>() + off, target[k].data_ptr<float>() + off,
                     neg[k].data_ptr<float>() + c * n * d, cr.rows, n, d,
                     static_cast<float>(scale), w.s.data(), w.pos.data(), w.g_pos.data(),
                     out[k]->query.data_ptr<float>() + off,
                     out[k]->target.data_ptr<float>() + off, false,
                     out[k]->neg.data_ptr<float>() + c * n * d, loss.data() + k * q + cr.lo);
  });
  for (int k = 0; k < sides; ++k) {
    out[k]->loss = SumInOrder(loss.data() + k * q, loss.data() + (k + 1) * q);
  }
}

}  // namespace

void UseDirectBlasForTesting(bool enabled) { g_direct_blas = enabled; }

LpGrads BilinearLossAndGrads(Decoder decoder, LossKind loss, double margin,
                             const LpBatch& b, double scale) {
  torch::NoGradGuard no_grad;
  const LpDecoder dec(decoder);
  LpGrads g;
  // The two corrupted sides are independent: compute them on two TBB workers (each with the
  // caller's intra-op thread count, so results do not depend on which worker runs which).
  const int threads = at::get_num_threads();
  SideGrads tail, head;
  auto tail_side = [&] {
    at::set_num_threads(threads);
    tail = Side(loss, margin, dec.TailQuery(b.h, b.r), b.t, b.tail_neg, scale);
  };
  auto head_side = [&] {
    at::set_num_threads(threads);
    head = Side(loss, margin, dec.HeadQuery(b.r, b.t), b.h, b.head_neg, scale);
  };
  if (loss == LossKind::kSoftmax && decoder == Decoder::kDistMult) return DistMultSoftmax(b, scale);
  if (loss == LossKind::kSoftmax) {
    const int sides = b.head_neg.defined() ? 2 : 1;
    torch::Tensor query[2], target[2], neg[2];
    query[0] = dec.TailQuery(b.h, b.r).contiguous();
    target[0] = b.t.contiguous();
    neg[0] = b.tail_neg.contiguous();
    if (sides == 2) {
      query[1] = dec.HeadQuery(b.r, b.t).contiguous();
      target[1] = b.h.contiguous();
      neg[1] = b.head_neg.contiguous();
    }
    SideGrads* out[2] = {&tail, &head};
    SoftmaxSides(query, target, neg, sides, scale, out);
  } else if (b.head_neg.defined()) {
    tbb::parallel_invoke(tail_side, head_side);
  } else {
    tail_side();
  }
  g.loss = tail.loss;
  g.tail_neg = tail.neg;
  g.t = tail.target;
  torch::Tensor dq = tail.query;
  if (decoder == Decoder::kDistMult) {
    g.h = dq * b.r;
    g.r = dq * b.h;
  } else if (decoder == Decoder::kDot) {
    g.h = dq;
    g.r = torch::zeros_like(b.r);
  } else {  // complex: q = [hr rr - hi ri, hr ri + hi rr]
    auto a = dq.chunk(2, 1), h = b.h.chunk(2, 1), r = b.r.chunk(2, 1);
    g.h = torch::cat({a[0] * r[0] + a[1] * r[1], -a[0] * r[1] + a[1] * r[0]}, 1);
    g.r = torch::cat({a[0] * h[0] + a[1] * h[1], -a[0] * h[1] + a[1] * h[0]}, 1);
  }
  if (b.head_neg.defined()) {
    g.loss += head.loss;
    g.head_neg = head.neg;
    g.h = g.h + head.target;
    torch::Tensor dh = head.query;
    if (decoder == Decoder::kDistMult) {
      g.t = g.t + dh * b.r;
      g.r = g.r + dh * b.t;
    } else if (decoder == Decoder::kDot) {
      g.t = g.t + dh;
    } else {  // complex: q = [rr tr + ri ti, rr ti - ri tr]
      auto a = dh.chunk(2, 1), t = b.t.chunk(2, 1), r = b.r.chunk(2, 1);
      g.t = g.t + torch::cat({a[0] * r[0] - a[1] * r[1], a[0] * r[1] + a[1] * r[0]}, 1);
      g.r = g.r + torch::cat({a[0] * t[0] + a[1] * t[1], a[0] * t[1] - a[1] * t[0]}, 1);
    }
  }
  return g;
}

double AddRowPenalty(bool n3, double w, const torch::Tensor& x, torch::Tensor& gx) {
  if (!gx.is_contiguous()) gx = gx.contiguous();
  const torch::Tensor xc = x.contiguous();
  const int64_t n = xc.size(0), d = xc.size(1);
  const float* xs = xc.data_ptr<float>();
  float* gs = gx.data_ptr<float>();
  constexpr int64_t kBlock = 256;
  std::vector<double> partial(static_cast<size_t>((n + kBlock - 1) / kBlock), 0.0);
  const float k = static_cast<float>((n3 ? 3.0 : 2.0) * w);
  tbb::parallel_for(size_t{0}, partial.size(), [&](size_t b) {
    const int64_t lo = static_cast<int64_t>(b) * kBlock, hi = std::min(n, lo + kBlock);
    const float* __restrict xr = xs + lo * d;
    float* __restrict gr = gs + lo * d;
    double sum = 0;
    for (int64_t i = 0; i < (hi - lo) * d; ++i) {
      const float a = std::fabs(xr[i]);
      sum += n3 ? a * a * a : a * a;
      gr[i] += n3 ? k * xr[i] * a : k * xr[i];
    }
    partial[b] = sum;
  });
  double total = 0;
  for (double v : partial) total += v;
  return w * total;
}

LinkModel::LinkModel(const LpConfig& config, uint64_t num_relations)
    : config_(config), decoder_(config.model.decoder) {
  torch::Tensor r = torch::empty({static_cast<int64_t>(num_relations), config.model.dim});
  auto a = r.accessor<float, 2>();
  const Key k = Key(config.train.seed).With(0x7AB1E).With(1);  // a pure function of the seed
  for (int64_t i = 0; i < a.size(0); ++i) {
    for (int64_t j = 0; j < a.size(1); ++j) {
      // DistMult/ComplEx relations start near one so early products are not vanishingly small.
      const double u = 2.0 * k.With(i).Unit(j) - 1.0;
      a[i][j] = static_cast<float>(config.model.decoder == Decoder::kTransE ? u * config.model.init_scale
                                                                    : 1.0 + 0.1 * u);
    }
  }
  relations_ = register_parameter("relations", r);
}

double LinkModel::Scale(int64_t queries) const {
  return 1.0 / static_cast<double>(queries * (config_.model.reciprocal ? 1 : 2));
}

LinkModel::Views LinkModel::Split(const ModelInput& in) const {
  Views v;
  v.q = in.sizes.at("queries");
  v.chunks = in.sizes.at("chunks");
  v.per_chunk = in.sizes.at("per_chunk");
  const torch::Tensor& uses = in.tables.at(0).uses;
  const int64_t d = uses.size(1), negs = v.chunks * v.per_chunk;
  v.batch.h = uses.narrow(0, 0, v.q);
  v.batch.t = uses.narrow(0, v.q, v.q);
  v.batch.tail_neg = uses.narrow(0, 2 * v.q, negs).view({v.chunks, v.per_chunk, d});
  if (in.sizes.at("head_negatives") != 0) {
    v.batch.head_neg = uses.narrow(0, 2 * v.q + negs, negs).view({v.chunks, v.per_chunk, d});
  }
  v.relation_ids = in.ids.at("relation");
  return v;
}

// Every chunk's loss, summed: with equal chunks one batched product per side (a few kernels a
// step on a GPU instead of a few per chunk), else chunk by chunk.
torch::Tensor LinkModel::ChunkLosses(const Views& v, const torch::Tensor& pos, const torch::Tensor& tq,
                                     const torch::Tensor& hq) const {
  const LpTrainConfig& tc = config_.train;
  const LpBatch& b = v.batch;
  if (v.q % v.chunks == 0) {
    const int64_t per = v.q / v.chunks, d = tq.size(1), n = v.per_chunk;
    auto side = [&](const torch::Tensor& query, const torch::Tensor& negatives) {
      const torch::Tensor scores = decoder_.ScoreChunks(query.reshape({v.chunks, per, d}), negatives);
      return LpLoss(tc.loss, tc.margin, pos, scores.reshape({v.q, n}));
    };
    torch::Tensor loss = side(tq, b.tail_neg);
    return hq.defined() ? loss + side(hq, b.head_neg) : loss;
  }
  torch::Tensor loss = torch::zeros({}, relations_.options());
  for (int64_t c = 0; c < v.chunks; ++c) {
    const int64_t lo = v.q * c / v.chunks, hi = v.q * (c + 1) / v.chunks;
    torch::Tensor p = pos.slice(0, lo, hi);
    loss = loss + LpLoss(tc.loss, tc.margin, p, decoder_.ScoreAll(tq.slice(0, lo, hi), b.tail_neg[c]));
    if (hq.defined()) {
      loss = loss + LpLoss(tc.loss, tc.margin, p, decoder_.ScoreAll(hq.slice(0, lo, hi), b.head_neg[c]));
    }
  }
  return loss;
}

torch::Tensor LinkModel::Loss(const ModelInput& in) {
  const LpTrainConfig& tc = config_.train;
  Views v = Split(in);
  const LpBatch& b = v.batch;
  torch::Tensor r = relations_.index_select(0, v.relation_ids);
  torch::Tensor tq = decoder_.TailQuery(b.h, r);
  torch::Tensor pos = decoder_.Score(tq, b.t);
  torch::Tensor hq = b.head_neg.defined() ? decoder_.HeadQuery(r, b.t) : torch::Tensor();
  torch::Tensor loss = ChunkLosses(v, pos, tq, hq);
  const double scale = Scale(v.q);
  loss = loss * scale;
  if (tc.regularizer != Regularizer::kNone && tc.regularization > 0) {
    const double w = tc.regularization * scale * (config_.model.reciprocal ? 1 : 2);
    if (tc.regularizer == Regularizer::kL2) {
      loss = loss + w * (b.h.pow(2).sum() + b.t.pow(2).sum() + r.pow(2).sum());
    } else {
      loss = loss + w * (b.h.abs().pow(3).sum() + b.t.abs().pow(3).sum() + r.abs().pow(3).sum());
    }
  }
  return loss;
}

bool LinkModel::FusedLoss(const ModelInput& in, FusedOutput& out) {
  if (!fused()) return false;
  const LpTrainConfig& tc = config_.train;
  Views v = Split(in);
  const int64_t d = config_.model.dim;
  const double scale = Scale(v.q);
  v.batch.r = relations_.detach().index_select(0, v.relation_ids);
  LpGrads g = BilinearLossAndGrads(config_.model.decoder, tc.loss, tc.margin, v.batch, scale);
  out.loss = g.loss * scale;
  if (tc.regularizer != Regularizer::kNone && tc.regularization > 0) {
    const double w = tc.regularization * scale * (config_.model.reciprocal ? 1 : 2);
    const bool n3 = tc.regularizer == Regularizer::kN3;
    out.loss += AddRowPenalty(n3, w, v.batch.h, g.h);
    out.loss += AddRowPenalty(n3, w, v.batch.t, g.t);
    out.loss += AddRowPenalty(n3, w, v.batch.r, g.r);
  }
  // The relations' gradient: each query's added into its relation's row, in query order.
  torch::Tensor rel_grad = torch::zeros_like(relations_);
  float* rg = rel_grad.data_ptr<float>();
  const torch::Tensor gr = g.r.contiguous();
  const float* src = gr.data_ptr<float>();
  const int64_t* ids = v.relation_ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < v.q; ++i) {
    for (int64_t j = 0; j < d; ++j) rg[ids[i] * d + j] += src[i * d + j];
  }
  relations_.mutable_grad() = rel_grad;
  out.use_grads = {{g.h, g.t, g.tail_neg}};
  if (g.head_neg.defined()) out.use_grads[0].push_back(g.head_neg);
  return true;
}

uint64_t LinkModel::StepBytes() const {
  const uint64_t queries = static_cast<uint64_t>(config_.train.batch) * (config_.model.reciprocal ? 2 : 1);
  const uint64_t sides = config_.model.reciprocal ? 1 : 2;
  return queries * static_cast<uint64_t>(config_.train.negatives) * 16 * sides +
         queries * static_cast<uint64_t>(config_.model.dim) * 4 * 16;
}

}  // namespace sluice
