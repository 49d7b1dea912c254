#include "train/lp/softmax_rows.h"

#include <bit>
#include <cmath>
#include <limits>

namespace sluice {
namespace {

// Range reduction x = k ln2 + r with |r| <= ln2 / 2 (ln2 split in two for precision), then a
// degree-6 polynomial for e^r (Cephes' expf coefficients) and 2^k built in the exponent bits.
// Plain arithmetic, integer bit operations and selects only (no float-to-int conversion), so
// the loops around it vectorise at every width; always inlined, or the AVX2 clone would call
// the baseline version once per element.
__attribute__((always_inline)) inline float ExpKernel(float x) {
  // Adding 1.5 * 2^23 rounds x log2(e) to the nearest integer k, which then sits in the low
  // mantissa bits of t: (bits(t) + 127) << 23 is 2^k (the constant's own bits shift out).
  const float t = x * 1.44269504088896341f + 12582912.0f;
  const float k = t - 12582912.0f;
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_k = std::bit_cast<float>((std::bit_cast<uint32_t>(t) + 127u) << 23);
  return x < -87.0f ? 0.0f : p * two_k;
}

}  // namespace

float ExpNonPositive(float x) { return ExpKernel(x); }

namespace {

// kLanes partial sums of row[0, n) combined in a fixed order, so the loop vectorises and every
// build gives the same sums.
__attribute__((always_inline)) inline float LaneSum(const float* __restrict row, int64_t n) {
  constexpr int64_t kLanes = 16;
  const int64_t body = n - n % kLanes;
  float lane[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) lane[l] = 0.0f;
  for (int64_t j = 0; j < body; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += row[j + l];
  }
  for (int64_t j = body; j < n; ++j) lane[0] += row[j];
  float z = 0.0f;
  for (int64_t l = 0; l < kLanes; ++l) z += lane[l];
  return z;
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default"))) void SoftmaxRows(
    float* s, const float* pos, const float* mask, int64_t begin, int64_t end, int64_t n,
    float scale, float* g_pos, double* loss, SoftmaxTargets targets) {
  const float eps = targets.smoothing;
  for (int64_t i = begin; i < end; ++i) {
    float* __restrict row = s + i * n;
    if (mask != nullptr && mask[i] == 0.0f) {
      for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;
      g_pos[i] = 0.0f;
      if (targets.g_own != nullptr) targets.g_own[i] = 0.0f;
      loss[i] = 0.0;
      continue;
    }
    const int64_t ex = targets.exclude != nullptr ? targets.exclude[i] : -1;
    const bool has_own = targets.own != nullptr && targets.own[i] != -std::numeric_limits<float>::infinity();
    const float own = has_own ? targets.own[i] : 0.0f;
    const int64_t m = n - (ex >= 0 ? 1 : 0) + (has_own ? 1 : 0);  // the negatives left
    // The max in any order (it is exact).
    float mx = has_own && own > pos[i] ? own : pos[i];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
    // Smoothing's share of the loss needs the scores' sum before they become probabilities.
    const float raw =
        eps > 0.0f ? LaneSum(row, n) - (ex >= 0 ? row[ex] : 0.0f) + (has_own ? own : 0.0f) : 0.0f;
    for (int64_t j = 0; j < n; ++j) row[j] = ExpKernel(row[j] - mx);
    if (ex >= 0) row[ex] = 0.0f;
    float z = LaneSum(row, n);
    const float e0 = ExpKernel(pos[i] - mx);
    z += e0;
    const float e_own = has_own ? ExpKernel(own - mx) : 0.0f;
    z += e_own;
    const float f = scale / z;
    for (int64_t j = 0; j < n; ++j) row[j] *= f;
    g_pos[i] = (e0 / z - 1.0f) * scale;
    if (targets.g_own != nullptr) targets.g_own[i] = e_own * f;
    loss[i] = std::log(static_cast<double>(z)) - static_cast<double>(pos[i] - mx);
    if (eps > 0.0f && m > 0) {
      const float share = scale * eps / static_cast<float>(m);
      for (int64_t j = 0; j < n; ++j) row[j] -= share;
      if (ex >= 0) row[ex] = 0.0f;
      if (has_own) targets.g_own[i] -= share;
      g_pos[i] += eps * scale;
      loss[i] += static_cast<double>(eps) * static_cast<double>(pos[i] - mx) -
                 static_cast<double>(eps) / static_cast<double>(m) *
                     (static_cast<double>(raw) - static_cast<double>(m) * static_cast<double>(mx));
    }
  }
}

#define SLUICE_ROW_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))

SLUICE_ROW_KERNEL void RowDots(const float* a, const float* b, int64_t rows, int64_t d,
                               float* out) {
  // kLanes partial sums combined in a fixed order, as in SoftmaxRows.
  constexpr int64_t kLanes = 16;
  const int64_t body = d - d % kLanes;
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict x = a + i * d;
    const float* __restrict y = b + i * d;
    float lane[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += x[j + l] * y[j + l];
    }
    for (int64_t j = body; j < d; ++j) lane[0] += x[j] * y[j];
    float sum = 0.0f;
    for (int64_t l = 0; l < kLanes; ++l) sum += lane[l];
    out[i] = sum;
  }
}

SLUICE_ROW_KERNEL void RowProducts(const float* a, const float* b, int64_t rows, int64_t d,
                                   float* out) {
  const float* __restrict x = a;
  const float* __restrict y = b;
  float* __restrict o = out;
  for (int64_t k = 0; k < rows * d; ++k) o[k] = x[k] * y[k];
}

SLUICE_ROW_KERNEL void AddRowProducts(const float* a, const float* b, int64_t rows, int64_t d,
                                      float* out) {
  const float* __restrict x = a;
  const float* __restrict y = b;
  float* __restrict o = out;
  for (int64_t k = 0; k < rows * d; ++k) o[k] += x[k] * y[k];
}

SLUICE_ROW_KERNEL void TrueCandidateGrads(const float* g, const float* x, const float* t,
                                          int64_t rows, int64_t d, float* dq, float* dt,
                                          bool add_dt) {
  for (int64_t i = 0; i < rows; ++i) {
    const float gi = g[i];
    const float* __restrict xi = x + i * d;
    const float* __restrict ti = t + i * d;
    float* __restrict dqi = dq + i * d;
    float* __restrict dti = dt + i * d;
    for (int64_t j = 0; j < d; ++j) dqi[j] += gi * ti[j];
    if (add_dt) {
      for (int64_t j = 0; j < d; ++j) dti[j] += gi * xi[j];
    } else {
      for (int64_t j = 0; j < d; ++j) dti[j] = gi * xi[j];
    }
  }
}

}  // namespace sluice
