// RotatE, a knowledge-graph decoder written with autograd against sluice's public API and
// trained for link prediction as a YAML config says (node embeddings in memory or out of core
// in partitions; the model never sees which). A node row of model.dim floats is a complex
// vector of dim / 2 entries (real halves first); relation r is a rotation by the phases
// theta_r, and a triple (h, r, t) scores
//   s(h, r, t) = -|| h o e^{i theta_r} - t ||_2
// so a tail query is q = h o e^{i theta_r} and a head query q = t o e^{-i theta_r} (|e^{i theta}|
// is 1), each scored against every candidate x as -||q - x||, one matrix product. The loss is
// the softmax cross-entropy of the true answer against its chunk's shared negatives.
//
//   kg_custom CONFIG [--set key=value ...] [--export DIR] [--train-only]
// trains, then (unless --train-only) evaluates the best checkpoint on the test split (filtered
// MRR and Hits@k) and prints it (and exports the embeddings and the model into DIR).

#include <sluice/sluice.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

class RotatE : public sluice::Model {
 public:
  explicit RotatE(const sluice::ModelSpec& s) : spec_(s), half_(s.dim / 2) {
    if (s.dim % 2 != 0) {
      throw std::invalid_argument("RotatE needs an even model.dim (real and imaginary halves), got " +
                                  std::to_string(s.dim));
    }
    // The engine seeds torch with train.seed before the factory: the same phases every run.
    phase_ = register_parameter("phase", torch::empty({s.relations, half_}).uniform_(-M_PI, M_PI));
  }

  torch::Tensor Loss(const sluice::ModelInput& in) override {
    const int64_t q = in.sizes.at("queries"), chunks = in.sizes.at("chunks"),
                  n = in.sizes.at("per_chunk");
    const torch::Tensor& uses = in.tables.at(0).uses;
    const torch::Tensor rel = in.ids.at("relation");
    const torch::Tensor h = uses.narrow(0, 0, q), t = uses.narrow(0, q, q);
    const torch::Tensor tail_neg = uses.narrow(0, 2 * q, chunks * n);
    const bool heads = in.sizes.at("head_negatives") != 0;
    torch::Tensor loss = Side(Rotate(h, rel, false), t, tail_neg, chunks, n);
    if (heads) loss = loss + Side(Rotate(t, rel, true), h, uses.narrow(0, 2 * q + chunks * n, chunks * n), chunks, n);
    return loss / static_cast<double>(q * (heads ? 2 : 1));
  }

  // Ranking: anchors (table 0) against candidates (table 1).
  torch::Tensor Predict(const sluice::ModelInput& in) override {
    const bool head = in.sizes.at("corrupt_head") != 0;
    return Distances(Rotate(in.tables.at(0).uses, in.ids.at("relation"), head), in.tables.at(1).uses).neg();
  }

  // About eight [queries, negatives] float matrices per corrupted side (products, distances,
  // softmax inputs and their gradients) and sixteen copies of the query rows. With reciprocal
  // relations a step holds twice the queries and corrupts tails only.
  uint64_t StepBytes() const override {
    const auto queries = static_cast<uint64_t>(spec_.batch * (spec_.reciprocal ? 2 : 1));
    const uint64_t sides = spec_.reciprocal ? 1 : 2;
    return queries * static_cast<uint64_t>(spec_.negatives) * 4 * 8 * sides +
           queries * static_cast<uint64_t>(spec_.dim) * 4 * 16;
  }

 private:
  // a o e^{+-i theta_rel}, row-wise.
  torch::Tensor Rotate(const torch::Tensor& a, const torch::Tensor& rel, bool inverse) const {
    const torch::Tensor theta = phase_.index_select(0, rel);
    const torch::Tensor c = torch::cos(theta), s = inverse ? -torch::sin(theta) : torch::sin(theta);
    const torch::Tensor re = a.narrow(1, 0, half_), im = a.narrow(1, half_, half_);
    return torch::cat({re * c - im * s, re * s + im * c}, 1);
  }
  // ||q_i - x_j||_2 for every pair [b, c], as |q|^2 + |x|^2 - 2 q.x (one matrix product).
  static torch::Tensor Distances(const torch::Tensor& q, const torch::Tensor& x) {
    const torch::Tensor d2 = q.pow(2).sum(1, true) + x.pow(2).sum(1).unsqueeze(0) - 2 * q.mm(x.t());
    return d2.clamp_min(1e-9).sqrt();
  }
  // Softmax cross-entropy, summed over queries: each query's true answer against its chunk's
  // negatives (query i is in chunk c when q*c/C <= i < q*(c+1)/C).
  static torch::Tensor Side(const torch::Tensor& query, const torch::Tensor& truth,
                            const torch::Tensor& negatives, int64_t chunks, int64_t n) {
    const int64_t q = query.size(0);
    const torch::Tensor pos = -(query - truth).pow(2).sum(1).clamp_min(1e-9).sqrt();
    torch::Tensor loss = torch::zeros({});
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t lo = q * c / chunks, hi = q * (c + 1) / chunks;
      const torch::Tensor p = pos.slice(0, lo, hi);
      const torch::Tensor neg = -Distances(query.slice(0, lo, hi), negatives.narrow(0, c * n, n));
      loss = loss + (torch::logsumexp(torch::cat({p.unsqueeze(1), neg}, 1), 1) - p).sum();
    }
    return loss;
  }

  sluice::ModelSpec spec_;
  int64_t half_;
  torch::Tensor phase_;
};

int Fail(const sluice::Status& s) {
  std::fprintf(stderr, "kg_custom: error: %s\n", s.message().c_str());
  return s.code() == sluice::StatusCode::kAborted ? sluice::InterruptExitCode() : 1;
}

sluice::ModelFactory Factory() {
  return [](const sluice::ModelSpec& s) { return std::make_shared<RotatE>(s); };
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, export_dir;
  std::vector<std::string> overrides;
  bool train_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (a == "--export" && i + 1 < argc) {
      export_dir = argv[++i];
    } else if (a == "--train-only") {
      train_only = true;
    } else if (config.empty() && a[0] != '-') {
      config = a;
    } else {
      config.clear();
      break;
    }
  }
  if (config.empty()) {
    std::fprintf(stderr, "usage: kg_custom CONFIG [--set key=value ...] [--export DIR] [--train-only]\n");
    return 2;
  }
  auto run = sluice::Run::FromConfig(config, overrides);
  if (!run.ok()) return Fail(run.status());
  if (sluice::Status s = run->SetModel("rotate", Factory()); !s.ok()) return Fail(s);
  if (sluice::Status s = run->Train(); !s.ok()) return Fail(s);
  if (train_only) return 0;
  auto trained = sluice::Run::Open(run->run_dir());
  if (!trained.ok()) return Fail(trained.status());
  if (sluice::Status s = trained->SetModel("rotate", Factory()); !s.ok()) return Fail(s);
  auto metrics = trained->Evaluate("test");
  if (!metrics.ok()) return Fail(metrics.status());
  std::printf("test %s (model rotate, checkpoint %s)\n", metrics->text.c_str(), trained->checkpoint().c_str());
  if (!export_dir.empty()) {
    if (sluice::Status s = trained->Export(export_dir); !s.ok()) return Fail(s);
  }
  return 0;
}
