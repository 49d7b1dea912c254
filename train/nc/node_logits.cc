#include "train/nc/node_logits.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace sluice {

namespace {

// The first largest logit's class, as torch's argmax picks it (a NaN counts as the largest).
int64_t TopClass(const float* row, int64_t classes) {
  int64_t best = 0;
  for (int64_t c = 1; c < classes && !std::isnan(row[best]); ++c) {
    if (row[c] > row[best] || std::isnan(row[c])) best = c;
  }
  return best;
}

// The sum of exp(logit - top) over the classes, in double.
double SumExpFrom(const float* row, int64_t classes, double top) {
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c]) - top);
  return sum;
}

}  // namespace

void TopClasses::Take(uint64_t i, const float* row) {
  const int64_t best = TopClass(row, classes_);
  top_[i].predicted = static_cast<int32_t>(best);
  top_[i].probability = static_cast<float>(1.0 / SumExpFrom(row, classes_, row[best]));
}

void TopClasses::Pack(uint64_t i, float* out) const {
  std::memcpy(out, &top_[i].predicted, 4);
  out[1] = top_[i].probability;
}

void TopClasses::Unpack(uint64_t i, const float* in) {
  std::memcpy(&top_[i].predicted, in, 4);
  top_[i].probability = in[1];
}

void ProbabilityRows::Take(uint64_t i, const float* row) {
  const size_t c = row_.size();
  const float top = *std::max_element(row, row + c);
  const double sum = SumExpFrom(row, static_cast<int64_t>(c), top);
  for (size_t k = 0; k < c; ++k) row_[k] = static_cast<float>(std::exp(static_cast<double>(row[k]) - top) / sum);
  if (status_.ok()) status_ = out_->Write(i, row_.data());
}

void ProbabilityRows::Pack(uint64_t i, float* out) const {
  if (status_.ok()) status_ = out_->Read(i, out);
}

void ProbabilityRows::Unpack(uint64_t i, const float* in) {
  if (status_.ok()) status_ = out_->Write(i, in);
}

NodeScores::NodeScores(const std::vector<int64_t>& labels, int64_t classes)
    : labels_(labels), classes_(classes), loss_(labels.size()), predicted_(labels.size()) {}

void NodeScores::Take(uint64_t i, const float* row) {
  const int64_t best = TopClass(row, classes_);
  const double top = row[best];
  loss_[i] = std::log(SumExpFrom(row, classes_, top)) + top - static_cast<double>(row[labels_[i]]);
  predicted_[i] = static_cast<int32_t>(best);
}

void NodeScores::Pack(uint64_t i, float* out) const {
  std::memcpy(out, &loss_[i], 8);
  std::memcpy(out + 2, &predicted_[i], 4);
}

void NodeScores::Unpack(uint64_t i, const float* in) {
  std::memcpy(&loss_[i], in, 8);
  std::memcpy(&predicted_[i], in + 2, 4);
}

ClassMetrics NodeScores::Metrics() const {
  ClassMetrics m = ClassificationMetrics(std::vector<int64_t>(predicted_.begin(), predicted_.end()), labels_, classes_);
  double sum = 0;
  for (const double l : loss_) sum += l;
  m.loss = loss_.empty() ? 0 : sum / static_cast<double>(loss_.size());
  return m;
}

// The wanted nodes' positions sorted by node, so a step's consecutive nodes find theirs by one
// search.
NodeLogits::NodeLogits(const std::vector<int64_t>& wanted, LogitSink* sink)
    : nodes_(wanted), sink_(sink), order_(wanted.size()) {
  std::iota(order_.begin(), order_.end(), int64_t{0});
  std::stable_sort(order_.begin(), order_.end(), [&](int64_t a, int64_t b) { return nodes_[a] < nodes_[b]; });
}

void NodeLogits::Keep(int64_t first, size_t n, int64_t classes, const float* rows) const {
  auto it = std::lower_bound(order_.begin(), order_.end(), first, [&](int64_t k, int64_t v) { return nodes_[k] < v; });
  for (; it != order_.end() && nodes_[*it] < first + static_cast<int64_t>(n); ++it) {
    sink_->Take(static_cast<uint64_t>(*it), rows + (nodes_[*it] - first) * classes);
  }
}

}  // namespace sluice
