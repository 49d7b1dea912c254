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

void SoftmaxRows(float* s, const float* pos, const float* mask, int64_t begin, int64_t end,
                 int64_t n, float scale, float* g_pos, double* loss);

// e^x for x <= 0 (what a max-subtracted softmax needs), about 1 ulp; 0 below -87.
// Exposed for its test.
float ExpNonPositive(float x);

}  // namespace sluice
