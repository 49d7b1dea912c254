#pragma once
// Link-prediction decoders and losses (libtorch). A decoder scores (head, relation, tail):
//   distmult: <h, r, t>            complex: Re<h, r, conj(t)> (first half real, second imag)
//   transe:   -||h + r - t||_2     dot:     <h, t> (relations ignored)
// Each is written as a query built from two of the three embeddings, scored against the third,
// so corrupting a side is one matrix product against the negatives.

#include <torch/torch.h>

#include <string>

namespace sluice {

class LpDecoder {
 public:
  explicit LpDecoder(std::string kind) : kind_(std::move(kind)) {}
  // Query scoring candidate tails of (h, r, ?).
  torch::Tensor TailQuery(const torch::Tensor& h, const torch::Tensor& r) const;
  // Query scoring candidate heads of (?, r, t).
  torch::Tensor HeadQuery(const torch::Tensor& r, const torch::Tensor& t) const;
  // Row-wise scores of query i against candidate x[i].
  torch::Tensor Score(const torch::Tensor& q, const torch::Tensor& x) const;
  // Scores of every query against every candidate: [queries, candidates].
  torch::Tensor ScoreAll(const torch::Tensor& q, const torch::Tensor& candidates) const;

 private:
  std::string kind_;
};

// Sum over queries of the loss of positive scores `pos` [b] against negatives `neg` [b, n].
torch::Tensor LpLoss(const std::string& kind, double margin, const torch::Tensor& pos,
                     const torch::Tensor& neg);

}  // namespace sluice
