#include "train/dlrm/dlrm_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/json.h"

namespace sluice {

double AreaUnderRoc(const float* scores, const float* labels, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (!std::isfinite(scores[i])) return std::nan("");  // (sorting NaN is undefined)
  }
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return scores[a] < scores[b]; });
  double pos = 0, rank_sum = 0;
  for (uint64_t i = 0; i < n;) {
    uint64_t j = i + 1;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (uint64_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += mean_rank;
        pos += 1;
      }
    }
    i = j;
  }
  const double neg = static_cast<double>(n) - pos;
  if (pos == 0 || neg == 0) return std::nan("");
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

DlrmMetrics ClickMetrics(const std::vector<float>& scores, const std::vector<float>& labels) {
  DlrmMetrics m;
  const uint64_t n = scores.size();
  m.samples = n;
  m.auc = AreaUnderRoc(scores.data(), labels.data(), n);
  double ll = 0, correct = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double q = std::clamp<double>(scores[i], 1e-7, 1 - 1e-7);
    ll -= labels[i] > 0.5f ? std::log(q) : std::log(1 - q);
    correct += (scores[i] > 0.5f) == (labels[i] > 0.5f);
  }
  m.logloss = ll / static_cast<double>(std::max<uint64_t>(n, 1));
  m.accuracy = correct / static_cast<double>(std::max<uint64_t>(n, 1));
  return m;
}

std::string DlrmMetrics::ToString() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "AUC %.4f logloss %.4f accuracy %.4f (%llu samples)", auc,
                logloss, accuracy, static_cast<unsigned long long>(samples));
  return buf;
}

std::string DlrmMetrics::ToJson() const {
  JsonObject o;
  o.Add("auc", auc).Add("logloss", logloss).Add("accuracy", accuracy).Add("samples", samples);
  return o.str();
}

}  // namespace sluice
