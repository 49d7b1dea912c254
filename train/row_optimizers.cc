#include "train/row_optimizers.h"

#include <cmath>

#include "common/prefetch.h"

namespace sluice {
namespace {

// Rows are scattered over the table, so the hardware prefetcher cannot see them coming: the
// row kAhead positions on (value and state, `floats` floats) is requested while this one is
// updated. Without it the state half, untouched since the row's last step, is a cache miss
// per line (AdagradRows spent most of its time on them).
constexpr int64_t kAhead = 8;
inline void PrefetchRow(float* const* rows, int64_t i, int64_t end, int64_t floats) {
  if (i + kAhead >= end) return;
  PrefetchForWrite(rows[i + kAhead], static_cast<size_t>(floats) * 4);
}

}  // namespace

uint32_t RowStateFloats(RowOptimizer opt, uint32_t d) {
  switch (opt) {
    case RowOptimizer::kSgd: return 0;
    case RowOptimizer::kRowwiseAdagrad: return 1;
    case RowOptimizer::kAdagrad: return d;
  }
  return 0;
}

__attribute__((target_clones("avx2", "default"))) void AdagradRows(
    float* const* rows, const float* g, int64_t begin, int64_t end, int64_t d, float lr) {
  for (int64_t i = begin; i < end; ++i) {
    PrefetchRow(rows, i, end, 2 * d);
    float* __restrict value = rows[i];
    float* __restrict state = value + d;
    const float* __restrict gi = g + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const float s = state[j] + gi[j] * gi[j];
      state[j] = s;
      value[j] -= lr * gi[j] / (std::sqrt(s) + 1e-10f);
    }
  }
}

__attribute__((target_clones("avx2", "default"))) void RowwiseAdagradRows(
    float* const* rows, const float* g, int64_t begin, int64_t end, int64_t d, float lr) {
  for (int64_t i = begin; i < end; ++i) {
    PrefetchRow(rows, i, end, d + 1);
    float* __restrict value = rows[i];
    const float* __restrict gi = g + i * d;
    float sq = 0;
    for (int64_t j = 0; j < d; ++j) sq += gi[j] * gi[j];
    const float s = value[d] + sq / static_cast<float>(d);
    value[d] = s;
    const float step = lr / (std::sqrt(s) + 1e-10f);
    for (int64_t j = 0; j < d; ++j) value[j] -= step * gi[j];
  }
}

__attribute__((target_clones("avx2", "default"))) void SgdRows(
    float* const* rows, const float* g, int64_t begin, int64_t end, int64_t d, float lr) {
  for (int64_t i = begin; i < end; ++i) {
    float* __restrict value = rows[i];
    const float* __restrict gi = g + i * d;
    for (int64_t j = 0; j < d; ++j) value[j] -= lr * gi[j];
  }
}

void UpdateRows(RowOptimizer opt, float* const* rows, const float* g, int64_t begin, int64_t end,
                int64_t d, float lr) {
  switch (opt) {
    case RowOptimizer::kSgd: return SgdRows(rows, g, begin, end, d, lr);
    case RowOptimizer::kRowwiseAdagrad: return RowwiseAdagradRows(rows, g, begin, end, d, lr);
    case RowOptimizer::kAdagrad: return AdagradRows(rows, g, begin, end, d, lr);
  }
}

}  // namespace sluice
