#pragma once
// Sparse optimizers that update rows in place, their state stored in the row right after the
// embedding (so one read brings both and the cache moves them together). `rows[i]` is row i's
// first float; `g` holds row i's gradient at g + i * d. Rows [begin, end) are updated.
//
//   sgd:             value -= lr g                                   (no state)
//   rowwise_adagrad: s += mean(g^2); value -= lr g / (sqrt(s) + eps)  (1 float of state)
//   adagrad:         s += g^2 per element; value -= lr g / (sqrt(s) + eps)  (d floats)
//
// Each is built for AVX2 and baseline x86-64 and picked at load time.

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/status.h"

namespace sluice {

enum class RowOptimizer { kSgd, kRowwiseAdagrad, kAdagrad };
template <>
struct EnumNames<RowOptimizer> {
  static constexpr std::pair<RowOptimizer, const char*> kNames[] = {
      {RowOptimizer::kSgd, "sgd"}, {RowOptimizer::kRowwiseAdagrad, "rowwise_adagrad"},
      {RowOptimizer::kAdagrad, "adagrad"}};
};
// Floats of optimizer state per row of dimension d.
uint32_t RowStateFloats(RowOptimizer opt, uint32_t d);

void AdagradRows(float* const* rows, const float* g, int64_t begin, int64_t end, int64_t d, float lr);
void RowwiseAdagradRows(float* const* rows, const float* g, int64_t begin, int64_t end, int64_t d,
                        float lr);
void SgdRows(float* const* rows, const float* g, int64_t begin, int64_t end, int64_t d, float lr);

// Dispatches on `opt`.
void UpdateRows(RowOptimizer opt, float* const* rows, const float* g, int64_t begin, int64_t end,
                int64_t d, float lr);

}  // namespace sluice
