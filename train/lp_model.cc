#include "train/lp_model.h"

#include "common/check.h"

namespace sluice {

torch::Tensor LpDecoder::TailQuery(const torch::Tensor& h, const torch::Tensor& r) const {
  if (kind_ == "distmult") return h * r;
  if (kind_ == "dot") return h;
  if (kind_ == "transe") return h + r;
  // complex: (hr + i hi)(rr + i ri) = (hr rr - hi ri) + i (hr ri + hi rr); score = <q, t>.
  auto hs = h.chunk(2, 1), rs = r.chunk(2, 1);
  return torch::cat({hs[0] * rs[0] - hs[1] * rs[1], hs[0] * rs[1] + hs[1] * rs[0]}, 1);
}

torch::Tensor LpDecoder::HeadQuery(const torch::Tensor& r, const torch::Tensor& t) const {
  if (kind_ == "distmult") return t * r;
  if (kind_ == "dot") return t;
  if (kind_ == "transe") return t - r;
  // complex: Re<h, r, conj(t)> = <hr, rr tr + ri ti> + <hi, rr ti - ri tr>.
  auto rs = r.chunk(2, 1), ts = t.chunk(2, 1);
  return torch::cat({rs[0] * ts[0] + rs[1] * ts[1], rs[0] * ts[1] - rs[1] * ts[0]}, 1);
}

torch::Tensor LpDecoder::Score(const torch::Tensor& q, const torch::Tensor& x) const {
  if (kind_ == "transe") return -((q - x).pow(2).sum(1).clamp_min(1e-12).sqrt());
  return (q * x).sum(1);
}

torch::Tensor LpDecoder::ScoreAll(const torch::Tensor& q, const torch::Tensor& candidates) const {
  if (kind_ == "transe") {
    auto d2 = q.pow(2).sum(1, true) + candidates.pow(2).sum(1).unsqueeze(0) -
              2 * q.mm(candidates.t());
    return -(d2.clamp_min(1e-12).sqrt());
  }
  return q.mm(candidates.t());
}

torch::Tensor LpLoss(const std::string& kind, double margin, const torch::Tensor& pos,
                     const torch::Tensor& neg) {
  if (kind == "softmax") {
    return (torch::logsumexp(torch::cat({pos.unsqueeze(1), neg}, 1), 1) - pos).sum();
  }
  if (kind == "logistic") {
    return torch::softplus(-pos).sum() + torch::softplus(neg).mean(1).sum();
  }
  SLUICE_CHECK(kind == "margin", "unknown loss %s", kind.c_str());
  return torch::relu(margin - pos.unsqueeze(1) + neg).mean(1).sum();
}

}  // namespace sluice
