#pragma once
// The softmax cross-entropy of link prediction's negatives, fused into one sweep per query
// (no libtorch: a row of scores stays in L1 while it is read three times, where the tensor
// version streamed the whole [chunks, queries, negatives] block through memory five times).
//
// Row i has the true candidate's score pos[i] and n negative scores s[i*n .. i*n+n). In place,
// s becomes the loss gradient of the negatives, scale * p_j, and g_pos[i] that of the true
// candidate, scale * (p_true - 1), where p is the softmax over [pos, s] (max subtracted first).
// loss[i] = log Z - pos[i] (unscaled). Rows whose mask is 0 get zero gradients and zero loss
// (mask may be null: every row counts). Rows are independent, so callers may split [begin, end)
// across threads without changing any result.

#include <cstdint>

namespace sluice {

//
// SoftmaxTargets change the target (both default to the plain one-hot on the true candidate):
// exclude[i] >= 0 takes column exclude[i] out of row i (1vsAll: the true candidate among all
// nodes): zero probability, zero gradient; smoothing e puts 1 - e on the true candidate and
// e / m on each of the m negatives left, so s_j's gradient is scale * (p_j - e / m), the true
// candidate's scale * (p_true - 1 + e), and loss[i] = log Z - (1 - e) pos' - e / m sum_j s'_j
// (' : max subtracted).
//
// own[i] (own not null) is one more negative score of row i, the query's own entity
// (train.own_negative), left out of the row where it is -inf; its gradient goes to g_own[i]
// (0 when left out). It counts among the m negatives smoothing spreads over, added after the
// row's other terms.
struct SoftmaxTargets {
  const int64_t* exclude = nullptr;
  float smoothing = 0.0f;
  const float* own = nullptr;
  float* g_own = nullptr;
};
void SoftmaxRows(float* s, const float* pos, const float* mask, int64_t begin, int64_t end,
                 int64_t n, float scale, float* g_pos, double* loss, SoftmaxTargets targets = {});

// Row helpers of the fused side (rows of d floats, contiguous):
//   RowDots:        out[i] = <a_i, b_i>
//   RowProducts:    out_i = a_i * b_i (elementwise); AddRowProducts: out_i += a_i * b_i
//   TrueCandidateGrads: dq_i += g_i t_i, and dt_i = g_i x_i (or += when add_dt): the true
//                   candidate's score <x_i, t_i> had gradient g_i
void RowDots(const float* a, const float* b, int64_t rows, int64_t d, float* out);
void RowProducts(const float* a, const float* b, int64_t rows, int64_t d, float* out);
void AddRowProducts(const float* a, const float* b, int64_t rows, int64_t d, float* out);
void TrueCandidateGrads(const float* g, const float* x, const float* t, int64_t rows, int64_t d,
                        float* dq, float* dt, bool add_dt);

// e^x for x <= 0 (what a max-subtracted softmax needs), about 1 ulp; 0 below -87.
// Exposed for its test.
float ExpNonPositive(float x);

}  // namespace sluice
