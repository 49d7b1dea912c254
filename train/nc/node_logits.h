#pragma once
// Where an inference pass's logits go, a row of `classes` floats per wanted node (its position
// among the wanted nodes):
//   TopClasses  keeps each node's most probable class and its probability (predict: 8 bytes a
//               node instead of 4 x classes);
//   ProbabilityRows  writes every row's softmax to a .npy file (export), holding none;
//   NodeScores  keeps what a node's metrics need, its loss and its predicted class (12 bytes a
//               node instead of 4 x classes), so a split's evaluation holds no logits at all.
// Across processes each rank takes its steps' nodes and the ranks then exchange what their sinks
// keep (Pack/Unpack, `item_floats` floats a node; NcTask::ShareLogits), so every rank holds what
// one process would.
//
// NodeLogits routes a pass over every node in order (layer-wise inference, nc_layerwise.cc) to a
// sink: `Keep` takes a step's rows of consecutive nodes and hands the wanted ones on, the wanted
// nodes in any order, a node even more than once.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "train/nc/nc_model.h"
#include "train/npy.h"

namespace sluice {

class LogitSink {
 public:
  virtual ~LogitSink() = default;
  // Wanted node i's row (`classes` floats).
  virtual void Take(uint64_t i, const float* row) = 0;
  // What travels for node i: item_floats() floats (bit patterns, not always floats).
  virtual uint64_t item_floats() const = 0;
  virtual void Pack(uint64_t i, float* out) const = 0;
  virtual void Unpack(uint64_t i, const float* in) = 0;
};

// Each node's first largest logit's class (as torch's argmax; a NaN counts as the largest) and
// that class's probability (softmax in double, as export writes it).
class TopClasses final : public LogitSink {
 public:
  TopClasses(uint64_t nodes, int64_t classes) : classes_(classes), top_(nodes) {}
  void Take(uint64_t i, const float* row) override;
  uint64_t item_floats() const override { return 2; }  // the class's 4 bytes, the probability
  void Pack(uint64_t i, float* out) const override;
  void Unpack(uint64_t i, const float* in) override;
  int32_t predicted(uint64_t i) const { return top_[i].predicted; }
  float probability(uint64_t i) const { return top_[i].probability; }

 private:
  struct Top {
    int32_t predicted = 0;
    float probability = 0;
  };
  int64_t classes_;
  std::vector<Top> top_;
};

// Each node's class probabilities (softmax, in double) written as row i of a .npy file
// (export): nothing held but a write's worth. Write errors are kept, the first one in status().
class ProbabilityRows final : public LogitSink {
 public:
  ProbabilityRows(NpyRowWriter* out, int64_t classes) : out_(out), row_(static_cast<size_t>(classes)) {}
  void Take(uint64_t i, const float* row) override;
  uint64_t item_floats() const override { return row_.size(); }
  void Pack(uint64_t i, float* out) const override;
  void Unpack(uint64_t i, const float* in) override;
  const Status& status() const { return status_; }

 private:
  NpyRowWriter* out_;
  std::vector<float> row_;
  mutable Status status_ = Status::Ok();
};

class NodeScores final : public LogitSink {
 public:
  // `labels`: wanted node i's class at i; both must outlive this.
  NodeScores(const std::vector<int64_t>& labels, int64_t classes);
  // Cross-entropy in double (log-sum-exp less the label's logit) and the first largest logit's
  // class, as torch's argmax picks (a NaN counts as the largest).
  void Take(uint64_t i, const float* row) override;
  uint64_t item_floats() const override { return 3; }  // the loss's 8 bytes, the class's 4
  void Pack(uint64_t i, float* out) const override;
  void Unpack(uint64_t i, const float* in) override;
  // Accuracy and macro-F1 from the classes; the loss is the nodes' mean, added in node order.
  ClassMetrics Metrics() const;

 private:
  const std::vector<int64_t>& labels_;
  int64_t classes_;
  std::vector<double> loss_;
  std::vector<int32_t> predicted_;
};

class NodeLogits {
 public:
  // `wanted` and `sink` must outlive this.
  NodeLogits(const std::vector<int64_t>& wanted, LogitSink* sink);
  // Rows [n, classes] of nodes [first, first + n): the wanted ones to the sink.
  void Keep(int64_t first, size_t n, int64_t classes, const float* rows) const;
  const std::vector<int64_t>& nodes() const { return nodes_; }
  LogitSink* sink() const { return sink_; }

 private:
  const std::vector<int64_t>& nodes_;
  LogitSink* sink_;
  std::vector<int64_t> order_;  // positions in nodes_, sorted by node
};

}  // namespace sluice
