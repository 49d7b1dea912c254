#pragma once
// Click-through metrics: AUC, log loss and accuracy of predicted click probabilities.

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct DlrmMetrics {
  uint64_t samples = 0;
  double auc = 0, logloss = 0, accuracy = 0;
  std::string ToString() const;
  std::string ToJson() const;
};

// AUC by the rank-sum formula (ties get their mean rank). NaN when a class is absent or a
// score is not finite (a diverged model), never a hang.
double AreaUnderRoc(const float* scores, const float* labels, uint64_t n);

// AUC, log loss (probabilities clamped to [1e-7, 1 - 1e-7]) and accuracy at 0.5.
DlrmMetrics ClickMetrics(const std::vector<float>& scores, const std::vector<float>& labels);

}  // namespace sluice
