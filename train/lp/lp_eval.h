#pragma once
// Link-prediction evaluation: every edge of a split ranked as (h, r, ?) and (?, r, t) against
// every node (or, past eval.exact_max_nodes, against a seeded sample of nodes), filtered (the
// other true edges of every split removed from the rankings) unless eval.filtered is false.
// MRR and Hits@1/3/10, ties counted at their mean rank.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "storage/dataset.h"
#include "train/lp/lp_config.h"
#include "train/lp/lp_model.h"

namespace sluice {

struct LpMetrics {
  uint64_t edges = 0;
  double mrr = 0, hits1 = 0, hits3 = 0, hits10 = 0;
  bool exact = true;     // ranked against every node (else against sampled nodes)
  bool filtered = true;  // other true edges removed from the rankings
  std::string ToString() const;
  std::string ToJson() const;
};

class LpRanker {
 public:
  // `dataset` must outlive the ranker.
  LpRanker(const Dataset& dataset, const LpConfig& config, uint64_t num_relations);
  // Ranks split `split` with node embeddings `nodes` [n, d] and relations [R, d].
  Result<LpMetrics> Rank(const std::string& split, const LpDecoder& decoder,
                         const torch::Tensor& nodes, const torch::Tensor& relations);

 private:
  struct Sums {
    double rr = 0, h1 = 0, h3 = 0, h10 = 0;
    uint64_t ranked = 0;
  };
  using Known = std::vector<const std::vector<int64_t>*>;
  Status BuildFilter();
  void RankRows(const LpDecoder& decoder, const torch::Tensor& q, const torch::Tensor& truth,
                const torch::Tensor& nodes, const torch::Tensor& candidates, const Known& known,
                const LpMetrics& m, Sums& sums) const;
  // The known true answers of each query in edges [lo, lo + b): tails of (src, rel) or heads
  // of (dst, rel).
  Known KnownOf(bool tails, const std::vector<int64_t>& a, const std::vector<int64_t>& rel,
                uint64_t lo, int64_t b) const;

  const Dataset& dataset_;
  LpConfig cfg_;
  uint64_t base_relations_ = 0;
  // True tails of (h, r) and heads of (t, r), keyed node * R + r; built once.
  std::unordered_map<uint64_t, std::vector<int64_t>> tails_of_, heads_of_;
  bool filter_built_ = false;
};

}  // namespace sluice
