#include "train/lp/lp_model.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "common/check.h"
#include "sampler/random.h"
#include "train/lp/softmax_rows.h"
#include "train/model_step.h"

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

torch::Tensor LpDecoder::ScoreRelations(const torch::Tensor& h, const torch::Tensor& t,
                                        const torch::Tensor& relations) const {
  if (kind_ == Decoder::kDistMult) return (h * t).mm(relations.t());
  if (kind_ == Decoder::kTransE) return ScoreAll(t - h, relations);  // -||r - (t - h)||
  SLUICE_CHECK(kind_ == Decoder::kComplEx, "%s has no relations to score", EnumName(kind_));
  // complex: Re<h, r, conj(t)> = <rr, hr tr + hi ti> + <ri, hr ti - hi tr>.
  auto hs = h.chunk(2, 1), ts = t.chunk(2, 1);
  const torch::Tensor x = torch::cat({hs[0] * ts[0] + hs[1] * ts[1], hs[0] * ts[1] - hs[1] * ts[0]}, 1);
  return x.mm(relations.t());
}

torch::Tensor RelationPredictionLoss(const LpDecoder& decoder, const torch::Tensor& h,
                                     const torch::Tensor& t, const torch::Tensor& relations,
                                     const torch::Tensor& ids, bool reciprocal) {
  torch::Tensor scores = decoder.ScoreRelations(h, t, relations);
  if (reciprocal) {
    const int64_t base = relations.size(0) / 2;
    const torch::Tensor inverse_col =
        torch::arange(relations.size(0), ids.options()).ge(base).unsqueeze(0);
    const torch::Tensor other = inverse_col.ne(ids.ge(base).unsqueeze(1));
    scores = scores.masked_fill(other, -std::numeric_limits<float>::infinity());
  }
  return (torch::logsumexp(scores, 1) - scores.gather(1, ids.unsqueeze(1)).squeeze(1)).sum();
}

torch::Tensor LpLoss(LossKind kind, double margin, const torch::Tensor& pos,
                     const torch::Tensor& neg, double smoothing, const torch::Tensor& excluded) {
  if (kind == LossKind::kSoftmax) {
    const torch::Tensor scores =
        excluded.defined() ? neg.masked_fill(excluded, -std::numeric_limits<float>::infinity()) : neg;
    const torch::Tensor lse = torch::logsumexp(torch::cat({pos.unsqueeze(1), scores}, 1), 1);
    if (smoothing <= 0) return (lse - pos).sum();
    // The negatives left: their count and score sum per row.
    torch::Tensor m = torch::full({neg.size(0)}, static_cast<double>(neg.size(1)), neg.options());
    torch::Tensor sum = neg.sum(1);
    if (excluded.defined()) {
      m = m - excluded.sum(1).to(neg.scalar_type());
      sum = neg.masked_fill(excluded, 0.0).sum(1);
    }
    return (lse - (1.0 - smoothing) * pos - smoothing * sum / m.clamp_min(1.0)).sum();
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
  torch::Tensor own;    // dL/d(own entity as a negative) [q, d] (train.own_negative)
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

// One MKL thread for the product run by this guard's thread, restored after. MKL (PyTorch's
// wheels) may split a product's inner dimension over its threads, and its thread count differs
// between sluice's TBB workers (MKL's default, every core) and the thread that set libtorch's
// count; which worker runs which block is not fixed, so without this a 1vsAll step's bits
// changed from run to run on a 16-core machine. The fused path's parallelism is its own blocks.
// Without MKL (OpenBLAS: it splits only rows and columns) it does nothing.
class OneMklThread {
 public:
  OneMklThread() {
    if (SetLocal set = MklSetLocal()) before_ = set(1);
  }
  ~OneMklThread() {
    if (SetLocal set = MklSetLocal()) set(before_);
  }
  OneMklThread(const OneMklThread&) = delete;
  OneMklThread& operator=(const OneMklThread&) = delete;

 private:
  using SetLocal = int (*)(int);  // MKL's C entry point (the lower-case name takes a pointer)
  static SetLocal MklSetLocal() {
    static const auto fn = reinterpret_cast<SetLocal>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
    return fn;
  }
  int before_ = 0;
};

void GemmRowMajor(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  OneMklThread pin;
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

// train.own_negative in a fused side: each query's own entity e [rows, d] (h of (h, r, ?), t of
// (?, r, t)) scored as one more negative, left out where loop[i] (a self-loop: it is the true
// candidate); its gradient goes to d_e [rows, d]. Scratch s and g [rows]. e null: none.
struct OwnNegatives {
  const float* e = nullptr;
  const bool* loop = nullptr;
  float* d_e = nullptr;
  float* s = nullptr;
  float* g = nullptr;
};

// One corrupted side of one chunk under the softmax loss: queries x [rows, d] against their true
// candidates t [rows, d] and the chunk's negatives [n, d]. The scores [rows, n] are computed,
// turned into gradients in place (SoftmaxRows) and multiplied back while they sit in cache, with
// BLAS called directly. Writes dq = dL/dx, dt = dL/dt (or adds it: add_dt), d_neg = dL/dneg
// and the per-query losses. Scratch: s [rows, n], pos and g_pos [rows].
void SoftmaxSideChunk(const float* x, const float* t, const float* neg, int64_t rows, int64_t n,
                      int64_t d, float scale, float* s, float* pos, float* g_pos, float* dq,
                      float* dt, bool add_dt, float* d_neg, double* loss, float smoothing = 0.0f,
                      const OwnNegatives& own = {}) {
  if (rows == 0) {
    std::fill_n(d_neg, n * d, 0.0f);
    return;
  }
  RowDots(x, t, rows, d, pos);
  if (own.e != nullptr) {
    RowDots(x, own.e, rows, d, own.s);
    for (int64_t i = 0; i < rows; ++i) {
      if (own.loop[i]) own.s[i] = -std::numeric_limits<float>::infinity();
    }
  }
  GemmRowMajor(false, true, rows, n, d, x, d, neg, d, s, n);            // S = X N^T
  SoftmaxRows(s, pos, nullptr, 0, rows, n, scale, g_pos, loss,
              {nullptr, smoothing, own.e != nullptr ? own.s : nullptr, own.g});
  GemmRowMajor(false, false, rows, d, n, s, n, neg, d, dq, d);          // dQ = G N
  TrueCandidateGrads(g_pos, x, t, rows, d, dq, dt, add_dt);
  if (own.e != nullptr) TrueCandidateGrads(own.g, x, own.e, rows, d, dq, own.d_e, false);
  GemmRowMajor(true, false, n, d, rows, s, n, x, d, d_neg, d);          // dN = G^T X
}

// 1vsAll: one corrupted side of all q queries x [q, d] against the same n candidates [n, d]
// (every node of the step's partitions), query i's true candidate t_i [q, d] sitting in column
// col[i] of them, which its softmax leaves out. Two passes, each parallel over fixed blocks so
// the bits do not depend on the thread count: blocks of queries (scores into g [q, n], turned
// into their gradients in place, dQ = G C, the true candidates' terms), then blocks of
// candidates (dC = G^T X, each block summing over every query in order).
void SharedSoftmaxSide(const float* x, const float* t, const float* cand, const int64_t* col,
                       int64_t q, int64_t n, int64_t d, float scale, float smoothing, float* g,
                       float* dq, float* dt, float* d_cand, double* loss) {
  constexpr int64_t kRows = 128, kCandidates = 256;
  std::vector<float> pos(static_cast<size_t>(q)), g_pos(static_cast<size_t>(q));
  tbb::parallel_for(int64_t{0}, (q + kRows - 1) / kRows, [&](int64_t block) {
    const int64_t lo = block * kRows, rows = std::min(q, lo + kRows) - lo;
    RowDots(x + lo * d, t + lo * d, rows, d, pos.data() + lo);
    GemmRowMajor(false, true, rows, n, d, x + lo * d, d, cand, d, g + lo * n, n);
    SoftmaxRows(g, pos.data(), nullptr, lo, lo + rows, n, scale, g_pos.data(), loss, {col, smoothing});
    GemmRowMajor(false, false, rows, d, n, g + lo * n, n, cand, d, dq + lo * d, d);
    TrueCandidateGrads(g_pos.data() + lo, x + lo * d, t + lo * d, rows, d, dq + lo * d,
                       dt + lo * d, false);
  });
  tbb::parallel_for(int64_t{0}, (n + kCandidates - 1) / kCandidates, [&](int64_t block) {
    const int64_t lo = block * kCandidates, m = std::min(n, lo + kCandidates) - lo;
    GemmRowMajor(true, false, m, d, q, g + lo, n, x, d, d_cand + lo * d, d);
  });
}

// Per-thread scratch of SoftmaxSideChunk (and DistMult's query and its gradient), grown as
// needed and reused from step to step rather than allocated per chunk. Safe as thread_local:
// a chunk's task makes no TBB call, so no other task can start on its thread mid-way.
struct ChunkScratch {
  std::vector<float> s, pos, g_pos, x, dq, own_s, own_g;
  static ChunkScratch& ForThisThread(int64_t rows, int64_t n, int64_t d) {
    thread_local ChunkScratch w;
    auto fit = [](std::vector<float>& v, int64_t size) {
      if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
    };
    fit(w.s, rows * n);
    fit(w.pos, rows);
    fit(w.g_pos, rows);
    fit(w.own_s, rows);
    fit(w.own_g, rows);
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
// LpDecoder built; the caller maps the query gradients back to h, r and t. `own` (null: none)
// holds each side's own entities [q, d] and `loop` (bool [q]) the self-loops
// (train.own_negative).
void SoftmaxSides(const torch::Tensor* query, const torch::Tensor* target, const torch::Tensor* neg,
                  int sides, double scale, SideGrads** out, float smoothing = 0.0f,
                  const torch::Tensor* own = nullptr, const torch::Tensor& loop = {}) {
  const int64_t q = query[0].size(0), d = query[0].size(1), chunks = neg[0].size(0),
                n = neg[0].size(1);
  std::vector<double> loss(static_cast<size_t>(sides * q));
  for (int k = 0; k < sides; ++k) {
    out[k]->query = torch::empty({q, d});
    out[k]->target = torch::empty({q, d});
    out[k]->neg = torch::empty({chunks, n, d});
    if (own != nullptr) out[k]->own = torch::empty({q, d});
  }
  tbb::parallel_for(int64_t{0}, sides * chunks, [&](int64_t task) {
    const int k = static_cast<int>(task / chunks);
    const int64_t c = task % chunks;
    const ChunkRange cr = ChunkOf(q, chunks, c);
    const int64_t off = cr.lo * d;
    ChunkScratch& w = ChunkScratch::ForThisThread(cr.rows, n, 0);
    OwnNegatives o;
    if (own != nullptr) {
      o = {own[k].data_ptr<float>() + off, loop.data_ptr<bool>() + cr.lo,
           out[k]->own.data_ptr<float>() + off, w.own_s.data(), w.own_g.data()};
    }
    SoftmaxSideChunk(query[k].data_ptr<float>() + off, target[k].data_ptr<float>() + off,
                     neg[k].data_ptr<float>() + c * n * d, cr.rows, n, d,
                     static_cast<float>(scale), w.s.data(), w.pos.data(), w.g_pos.data(),
                     out[k]->query.data_ptr<float>() + off,
                     out[k]->target.data_ptr<float>() + off, false,
                     out[k]->neg.data_ptr<float>() + c * n * d, loss.data() + k * q + cr.lo,
                     smoothing, o);
  });
  for (int k = 0; k < sides; ++k) {
    out[k]->loss = SumInOrder(loss.data() + k * q, loss.data() + (k + 1) * q);
  }
}

// A side's query gradient dq mapped back to its two inputs: the tail query (h, r) -> (dh, dr),
// the head query (r, t) -> (dt, dr) (`entity`: h or t, as the query was built).
std::pair<torch::Tensor, torch::Tensor> QueryGrads(Decoder decoder, bool tail_side,
                                                   const torch::Tensor& dq,
                                                   const torch::Tensor& entity,
                                                   const torch::Tensor& r) {
  if (decoder == Decoder::kDistMult) return {dq * r, dq * entity};
  if (decoder == Decoder::kDot) return {dq, torch::zeros_like(r)};
  auto a = dq.chunk(2, 1), e = entity.chunk(2, 1), rs = r.chunk(2, 1);
  if (tail_side) {  // complex: q = [hr rr - hi ri, hr ri + hi rr]
    return {torch::cat({a[0] * rs[0] + a[1] * rs[1], -a[0] * rs[1] + a[1] * rs[0]}, 1),
            torch::cat({a[0] * e[0] + a[1] * e[1], -a[0] * e[1] + a[1] * e[0]}, 1)};
  }
  // complex: q = [rr tr + ri ti, rr ti - ri tr]
  return {torch::cat({a[0] * rs[0] - a[1] * rs[1], a[0] * rs[1] + a[1] * rs[0]}, 1),
          torch::cat({a[0] * e[0] + a[1] * e[1], a[0] * e[1] - a[1] * e[0]}, 1)};
}

torch::Tensor Masked(const torch::Tensor& x, const torch::Tensor& mask) {
  return mask.defined() ? x * mask : x;
}

// The general path: dropout on the queries' inputs, label smoothing, 1vsAll. Per side the query
// is built from the (dropped-out) entity and relation, scored (chunked negatives, or every
// candidate), and its gradient mapped back through the masks.
LpGrads GeneralLossAndGrads(Decoder decoder, const LpBatch& b, const BilinearOptions& o) {
  const LpDecoder dec(decoder);
  const int sides = b.head_neg.defined() ? 2 : 1;
  torch::Tensor entity[2], rel[2], query[2], target[2], neg[2];
  for (int k = 0; k < sides; ++k) {
    const bool tail = k == 0;
    entity[k] = Masked(tail ? b.h : b.t, tail ? o.tail_entity_mask : o.head_entity_mask);
    rel[k] = Masked(b.r, tail ? o.tail_relation_mask : o.head_relation_mask);
    query[k] = (tail ? dec.TailQuery(entity[k], rel[k]) : dec.HeadQuery(rel[k], entity[k])).contiguous();
    target[k] = Masked(tail ? b.t : b.h, tail ? o.tail_target_mask : o.head_target_mask).contiguous();
    neg[k] = Masked(tail ? b.tail_neg : b.head_neg, tail ? o.tail_candidate_mask : o.head_candidate_mask).contiguous();
  }
  SideGrads side[2];
  const bool all = o.tail_col.defined();
  if (all) {
    const int64_t q = b.h.size(0), n = neg[0].size(1), d = b.h.size(1);
    std::vector<float>& scores = *o.scores;
    if (scores.size() < static_cast<size_t>(q * n)) scores.resize(static_cast<size_t>(q * n));
    for (int k = 0; k < sides; ++k) {
      std::vector<double> loss(static_cast<size_t>(q));
      side[k].query = torch::empty({q, d}), side[k].target = torch::empty({q, d});
      side[k].neg = torch::empty({1, n, d});
      const torch::Tensor col = (k == 0 ? o.tail_col : o.head_col).contiguous();
      SharedSoftmaxSide(query[k].data_ptr<float>(), target[k].data_ptr<float>(),
                        neg[k].data_ptr<float>(), col.data_ptr<int64_t>(), q, n, d,
                        static_cast<float>(o.scale), o.smoothing, scores.data(),
                        side[k].query.data_ptr<float>(), side[k].target.data_ptr<float>(),
                        side[k].neg.data_ptr<float>(), loss.data());
      side[k].loss = SumInOrder(loss.data(), loss.data() + loss.size());
    }
  } else if (o.loss == LossKind::kSoftmax) {
    SideGrads* out[2] = {&side[0], &side[1]};
    torch::Tensor own[2];
    const bool with_own = o.own_loop.defined();
    if (with_own) {
      own[0] = b.h.contiguous();
      if (sides == 2) own[1] = b.t.contiguous();
    }
    SoftmaxSides(query, target, neg, sides, o.scale, out, o.smoothing, with_own ? own : nullptr,
                 with_own ? o.own_loop.contiguous() : torch::Tensor());
  } else {
    for (int k = 0; k < sides; ++k) side[k] = Side(o.loss, o.margin, query[k], target[k], neg[k], o.scale);
  }
  LpGrads g;
  g.loss = 0;
  for (int k = 0; k < sides; ++k) {
    const bool tail = k == 0;
    auto [de, dr] = QueryGrads(decoder, tail, side[k].query, entity[k], rel[k]);
    de = Masked(de, tail ? o.tail_entity_mask : o.head_entity_mask);
    dr = Masked(dr, tail ? o.tail_relation_mask : o.head_relation_mask);
    side[k].target = Masked(side[k].target, tail ? o.tail_target_mask : o.head_target_mask);
    side[k].neg = Masked(side[k].neg, tail ? o.tail_candidate_mask : o.head_candidate_mask);
    g.loss += side[k].loss;
    if (side[k].own.defined()) de = de + side[k].own;  // the own entity scored as a negative
    if (tail) {
      g.h = de, g.r = dr, g.t = side[k].target, g.tail_neg = side[k].neg;
    } else {
      g.t = g.t + de, g.r = g.r + dr, g.h = g.h + side[k].target, g.head_neg = side[k].neg;
    }
  }
  return g;
}

}  // namespace

void UseDirectBlasForTesting(bool enabled) { g_direct_blas = enabled; }

LpGrads BilinearLossAndGrads(Decoder decoder, LossKind loss, double margin,
                             const LpBatch& b, double scale) {
  BilinearOptions o;
  o.loss = loss, o.margin = margin, o.scale = scale;
  return BilinearLossAndGrads(decoder, b, o);
}

LpGrads BilinearLossAndGrads(Decoder decoder, const LpBatch& b, const BilinearOptions& o) {
  torch::NoGradGuard no_grad;
  if (o.general()) return GeneralLossAndGrads(decoder, b, o);
  const LossKind loss = o.loss;
  const double margin = o.margin, scale = o.scale;
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
  std::tie(g.h, g.r) = QueryGrads(decoder, true, tail.query, b.h, b.r);
  if (b.head_neg.defined()) {
    g.loss += head.loss;
    g.head_neg = head.neg;
    g.h = g.h + head.target;
    auto [dt, dr] = QueryGrads(decoder, false, head.query, b.t, b.r);
    g.t = g.t + dt;
    if (decoder != Decoder::kDot) g.r = g.r + dr;
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

LinkModel::LinkModel(const LpConfig& config, uint64_t num_relations, uint64_t num_nodes)
    : config_(config), decoder_(config.model.decoder), num_nodes_(num_nodes) {
  torch::Tensor r = torch::empty({static_cast<int64_t>(num_relations), config.model.dim});
  auto a = r.accessor<float, 2>();
  const Key k = Key(config.train.seed).With(0x7AB1E).With(1);  // a pure function of the seed
  for (int64_t i = 0; i < a.size(0); ++i) {
    for (int64_t j = 0; j < a.size(1); ++j) {
      // DistMult/ComplEx relations start near one so early products are not vanishingly small,
      // or around zero (model.relation_init_scale) so a symmetric relation can find the
      // negative weights it needs (docs/link_prediction.md, "Relations that start near one").
      const double u = 2.0 * k.With(i).Unit(j) - 1.0;
      const double s = config.model.relation_init_scale;
      a[i][j] = static_cast<float>(config.model.decoder == Decoder::kTransE ? u * config.model.init_scale
                                   : s > 0                                  ? u * s
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
  if (auto it = in.ids.find("tail_col"); it != in.ids.end()) v.tail_col = it->second;
  if (auto it = in.ids.find("head_col"); it != in.ids.end()) v.head_col = it->second;
  return v;
}

LinkModel::Masks LinkModel::DropoutMasks(const ModelInput& in, const Views& v) const {
  Masks m;
  if (!in.training) return m;
  const double pe = config_.model.entity_dropout, pr = config_.model.relation_dropout;
  const int64_t d = config_.model.dim;
  const torch::Device device = relations_.device();
  auto mask = [&](double p, uint64_t site) {
    return p > 0 ? KeyedDropoutMask({v.q, d}, p, in.key, site, device) : torch::Tensor();
  };
  m.tail_entity = mask(pe, 0), m.tail_relation = mask(pr, 1);
  if (v.batch.head_neg.defined()) m.head_entity = mask(pe, 2), m.head_relation = mask(pr, 3);
  const double pc = config_.model.candidate_dropout;
  if (pc <= 0) return m;
  // A true candidate among the scored ones (1vsAll: its column) takes that candidate's mask, so
  // its score is the one its softmax column would have; otherwise its own.
  auto candidates = [&](const torch::Tensor& negatives, const torch::Tensor& col, uint64_t site,
                        torch::Tensor& cand, torch::Tensor& target) {
    cand = KeyedDropoutMask(negatives.sizes(), pc, in.key, site, device);
    target = KeyedDropoutMask({v.q, d}, pc, in.key, site + 1, device);
    if (!col.defined()) return;
    const torch::Tensor c = col.to(device);
    const torch::Tensor rows = cand.view({-1, d}).index_select(0, c.clamp_min(0));
    target = torch::where((c >= 0).unsqueeze(1), rows, target);
  };
  candidates(v.batch.tail_neg, v.tail_col, 4, m.tail_candidate, m.tail_target);
  if (v.batch.head_neg.defined()) candidates(v.batch.head_neg, v.head_col, 6, m.head_candidate, m.head_target);
  return m;
}

namespace {

// 1vsAll: each row's true candidate among the negatives, as a bool [q, n] (undefined otherwise).
torch::Tensor ExcludedColumns(const torch::Tensor& col, int64_t n) {
  if (!col.defined()) return {};
  torch::Tensor ex = torch::zeros({col.size(0), n}, torch::TensorOptions(torch::kBool).device(col.device()));
  const torch::Tensor in_range = col >= 0;
  return ex.scatter_(1, col.clamp_min(0).unsqueeze(1), in_range.unsqueeze(1));
}

}  // namespace

torch::Tensor LinkModel::OwnLoops(const Views& v) const {
  if (!config_.train.own_negative || v.tail_col.defined()) return {};
  return (v.batch.h == v.batch.t).all(1);
}

// Every chunk's loss, summed: with equal chunks one batched product per side (a few kernels a
// step on a GPU instead of a few per chunk), else chunk by chunk. An own-entity score is one
// more column of its row, excluded on self-loops.
torch::Tensor LinkModel::ChunkLosses(const Views& v, const torch::Tensor& pos, const torch::Tensor& head_pos,
                                     const torch::Tensor& tq, const torch::Tensor& hq,
                                     const torch::Tensor (&own)[2], const torch::Tensor& loop) const {
  const LpTrainConfig& tc = config_.train;
  const LpBatch& b = v.batch;
  // A side's rows [lo, hi): their scores, with the own column appended when there is one.
  auto loss_of = [&](const torch::Tensor& p, torch::Tensor scores, torch::Tensor excluded,
                     const torch::Tensor& own_score, int64_t lo, int64_t hi) {
    if (own_score.defined()) {
      scores = torch::cat({scores, own_score.slice(0, lo, hi).unsqueeze(1)}, 1);
      const torch::Tensor last = loop.slice(0, lo, hi).unsqueeze(1);
      excluded = torch::cat({torch::zeros({hi - lo, scores.size(1) - 1}, last.options()), last}, 1);
    }
    return LpLoss(tc.loss, tc.margin, p.slice(0, lo, hi), scores, tc.label_smoothing, excluded);
  };
  if (v.q % v.chunks == 0) {
    const int64_t per = v.q / v.chunks, d = tq.size(1), n = v.per_chunk;
    auto side = [&](const torch::Tensor& query, const torch::Tensor& p, const torch::Tensor& negatives,
                    const torch::Tensor& col, const torch::Tensor& own_score) {
      const torch::Tensor scores = decoder_.ScoreChunks(query.reshape({v.chunks, per, d}), negatives);
      return loss_of(p, scores.reshape({v.q, n}), ExcludedColumns(col, n), own_score, 0, v.q);
    };
    torch::Tensor loss = side(tq, pos, b.tail_neg, v.tail_col, own[0]);
    return hq.defined() ? loss + side(hq, head_pos, b.head_neg, v.head_col, own[1]) : loss;
  }
  torch::Tensor loss = torch::zeros({}, relations_.options());
  for (int64_t c = 0; c < v.chunks; ++c) {
    const int64_t lo = v.q * c / v.chunks, hi = v.q * (c + 1) / v.chunks;
    loss = loss + loss_of(pos, decoder_.ScoreAll(tq.slice(0, lo, hi), b.tail_neg[c]), {}, own[0], lo, hi);
    if (hq.defined()) {
      loss = loss + loss_of(head_pos, decoder_.ScoreAll(hq.slice(0, lo, hi), b.head_neg[c]), {}, own[1], lo, hi);
    }
  }
  return loss;
}

torch::Tensor LinkModel::Loss(const ModelInput& in) {
  const LpTrainConfig& tc = config_.train;
  Views v = Split(in);
  const LpBatch& b = v.batch;
  torch::Tensor r = relations_.index_select(0, v.relation_ids);
  const Masks m = DropoutMasks(in, v);
  Views scored = v;  // the candidates as scored (dropped out in training)
  scored.batch.tail_neg = Masked(b.tail_neg, m.tail_candidate);
  if (b.head_neg.defined()) scored.batch.head_neg = Masked(b.head_neg, m.head_candidate);
  torch::Tensor tq = decoder_.TailQuery(Masked(b.h, m.tail_entity), Masked(r, m.tail_relation));
  torch::Tensor pos = decoder_.Score(tq, Masked(b.t, m.tail_target));
  torch::Tensor hq, head_pos = pos;  // without dropout both sides score the same triple
  if (b.head_neg.defined()) {
    hq = decoder_.HeadQuery(Masked(r, m.head_relation), Masked(b.t, m.head_entity));
    if (m.head_entity.defined() || m.head_relation.defined() || m.tail_target.defined()) {
      head_pos = decoder_.Score(hq, Masked(b.h, m.head_target));
    }
  }
  // train.own_negative: each query's own entity (unmasked) as one more negative.
  const torch::Tensor loop = OwnLoops(v);
  torch::Tensor own[2];
  if (loop.defined()) {
    own[0] = decoder_.Score(tq, b.h);
    if (hq.defined()) own[1] = decoder_.Score(hq, b.t);
  }
  torch::Tensor loss = ChunkLosses(scored, pos, head_pos, tq, hq, own, loop);
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
  if (tc.relation_prediction > 0) {
    loss = loss + tc.relation_prediction * scale *
                      RelationPredictionLoss(decoder_, b.h, b.t, relations_, v.relation_ids,
                                             config_.model.reciprocal);
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
  BilinearOptions o;
  o.loss = tc.loss, o.margin = tc.margin, o.scale = scale;
  o.smoothing = static_cast<float>(tc.label_smoothing);
  o.tail_col = v.tail_col, o.head_col = v.head_col;
  const Masks m = DropoutMasks(in, v);
  o.tail_entity_mask = m.tail_entity, o.tail_relation_mask = m.tail_relation;
  o.head_entity_mask = m.head_entity, o.head_relation_mask = m.head_relation;
  o.tail_candidate_mask = m.tail_candidate, o.tail_target_mask = m.tail_target;
  o.head_candidate_mask = m.head_candidate, o.head_target_mask = m.head_target;
  o.scores = &scores_;
  o.own_loop = OwnLoops(v);
  LpGrads g = BilinearLossAndGrads(config_.model.decoder, v.batch, o);
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
  if (tc.relation_prediction > 0) out.loss += AddRelationPrediction(v, scale, g, rel_grad);
  relations_.mutable_grad() = rel_grad;
  out.use_grads = {{g.h, g.t, g.tail_neg}};
  if (g.head_neg.defined()) out.use_grads[0].push_back(g.head_neg);
  return true;
}

// A small product (queries x relations) next to the scoring: through autograd on leaves of the
// step's heads, tails and the relations, its gradients added to the fused ones.
double LinkModel::AddRelationPrediction(const Views& v, double scale, LpGrads& g,
                                        torch::Tensor& rel_grad) const {
  torch::AutoGradMode grad_mode(true);
  const torch::Tensor h = v.batch.h.detach().requires_grad_(true);
  const torch::Tensor t = v.batch.t.detach().requires_grad_(true);
  const torch::Tensor rel = relations_.detach().requires_grad_(true);
  const torch::Tensor loss = config_.train.relation_prediction * scale *
                             RelationPredictionLoss(decoder_, h, t, rel, v.relation_ids,
                                                    config_.model.reciprocal);
  loss.backward();
  g.h.add_(h.grad());
  g.t.add_(t.grad());
  rel_grad.add_(rel.grad());
  return loss.item<double>();
}

uint64_t LinkModel::StepBytes() const {
  const uint64_t queries = static_cast<uint64_t>(config_.train.batch) * (config_.model.reciprocal ? 2 : 1);
  const uint64_t sides = config_.model.reciprocal ? 1 : 2;
  if (config_.train.scoring == Scoring::kAll) {
    // The score matrix [queries, candidates] (fused: one, reused by both sides; autograd: about
    // six per side, the scores, their masked copy, the logits and their gradients), the
    // candidates' uses and their gradients (per side), the per-row sums and the query rows.
    const uint64_t d = static_cast<uint64_t>(config_.model.dim);
    const uint64_t matrices = fused() ? 1 : 6 * sides;
    return matrices * queries * num_nodes_ * 4 + num_nodes_ * d * 4 * (2 * sides + 1) +
           queries * d * 4 * 16;
  }
  return queries * static_cast<uint64_t>(config_.train.negatives) * 16 * sides +
         queries * static_cast<uint64_t>(config_.model.dim) * 4 * 16;
}

}  // namespace sluice
