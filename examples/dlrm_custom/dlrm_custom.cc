// Two recommendation models written against sluice's public API, trained as a YAML config says
// (in memory or out of core through the row cache: the model never sees which):
//   dot  the DLRM interaction (bottom MLP, pairwise dot products, top MLP, linear term): the
//        same network as sluice's built-in model, so the same config and seed train the same
//        bits;
//   dcn  a DCN-v2 cross network over the bottom MLP's output and the embeddings, then the top
//        MLP.
//
//   dlrm_custom --model dot|dcn CONFIG [--set key=value ...] [--export DIR] [--resume]
//               [--train-only]
// trains (--resume: on from the run directory's latest checkpoint), then, unless --train-only,
// evaluates the run's best checkpoint on the test split and prints its metrics (and exports
// its embedding tables into DIR).

#include <sluice/sluice.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

// Bottom MLP: dense features -> dim (ReLU after every layer), as the built-in model builds it.
torch::nn::Sequential BottomMlp(const sluice::ModelSpec& s) {
  torch::nn::Sequential mlp;
  int64_t in = s.dense_features;
  for (int h : s.bottom_layers) {
    mlp->push_back(torch::nn::Linear(in, h));
    mlp->push_back(torch::nn::ReLU());
    in = h;
  }
  mlp->push_back(torch::nn::Linear(in, s.dim));
  mlp->push_back(torch::nn::ReLU());
  return mlp;
}

// Top MLP: `in` -> one logit.
torch::nn::Sequential TopMlp(const sluice::ModelSpec& s, int64_t in) {
  torch::nn::Sequential mlp;
  for (int h : s.top_layers) {
    mlp->push_back(torch::nn::Linear(in, h));
    mlp->push_back(torch::nn::ReLU());
    in = h;
  }
  mlp->push_back(torch::nn::Linear(in, 1));
  return mlp;
}

// What both models share: the rows of a step as [B, C, row_width], the bottom MLP's output
// (a learned vector when the dataset has no dense features) and the linear term.
class ClickModel : public sluice::Model {
 public:
  explicit ClickModel(const sluice::ModelSpec& s) : spec_(s) {
    if (s.dense_features > 0) {
      bottom_ = register_module("bottom", BottomMlp(s));
    } else {
      x0_ = register_parameter("x0", torch::rand({s.dim}) - 0.5);
    }
  }
  torch::Tensor Loss(const sluice::ModelInput& in) override {
    return torch::binary_cross_entropy_with_logits(Predict(in), in.labels);
  }

 protected:
  torch::Tensor Rows(const sluice::ModelInput& in) const {
    const torch::Tensor& uses = in.tables.at(0).uses;
    return uses.view({in.dense.size(0), spec_.tables, uses.size(1)});
  }
  torch::Tensor Embeddings(const torch::Tensor& rows) const {
    return spec_.linear ? rows.narrow(2, 0, spec_.dim) : rows;
  }
  torch::Tensor Bottom(const sluice::ModelInput& in, int64_t b) {
    return spec_.dense_features > 0 ? bottom_->forward(in.dense) : x0_.unsqueeze(0).expand({b, spec_.dim});
  }
  torch::Tensor WithLinear(torch::Tensor logit, const torch::Tensor& rows) const {
    return spec_.linear ? logit + rows.select(2, spec_.dim).sum(1) : logit;
  }

  sluice::ModelSpec spec_;
  torch::nn::Sequential bottom_{nullptr};
  torch::Tensor x0_;
};

// The DLRM dot interaction.
class DotModel : public ClickModel {
 public:
  explicit DotModel(const sluice::ModelSpec& s) : ClickModel(s) {
    const int64_t f = s.tables + 1;
    std::vector<int64_t> tri;
    for (int64_t i = 0; i < f; ++i) {
      for (int64_t j = 0; j < i; ++j) tri.push_back(i * f + j);
    }
    pairs_ = torch::tensor(tri, torch::kInt64);
    top_ = register_module("top", TopMlp(s, s.dim + static_cast<int64_t>(tri.size())));
  }
  torch::Tensor Predict(const sluice::ModelInput& in) override {
    const torch::Tensor rows = Rows(in);
    const int64_t b = rows.size(0), f = spec_.tables + 1;
    const torch::Tensor x = Bottom(in, b);
    const torch::Tensor t = torch::cat({x.unsqueeze(1), Embeddings(rows)}, 1);
    torch::Tensor z = torch::bmm(t, t.transpose(1, 2)).reshape({b, f * f}).index_select(1, pairs_);
    return WithLinear(top_->forward(torch::cat({x, z}, 1)).reshape({b}), rows);
  }
  uint64_t StepBytes() const override {
    const auto f = static_cast<uint64_t>(spec_.tables + 1), w = static_cast<uint64_t>(spec_.row_width);
    return static_cast<uint64_t>(spec_.batch) * ((f - 1) * w * 24 + f * f * 12 + 4096);
  }

 private:
  torch::Tensor pairs_;
  torch::nn::Sequential top_{nullptr};
};

// DCN-v2: x_{l+1} = x_0 * (W_l x_l + b_l) + x_l over x_0 = [bottom, embeddings...].
class DcnModel : public ClickModel {
 public:
  static constexpr int kCrossLayers = 2;
  explicit DcnModel(const sluice::ModelSpec& s) : ClickModel(s), width_((s.tables + 1) * s.dim) {
    for (int l = 0; l < kCrossLayers; ++l) {
      cross_.push_back(register_module("cross" + std::to_string(l), torch::nn::Linear(width_, width_)));
    }
    top_ = register_module("top", TopMlp(s, width_));
  }
  torch::Tensor Predict(const sluice::ModelInput& in) override {
    const torch::Tensor rows = Rows(in);
    const int64_t b = rows.size(0);
    const torch::Tensor x0 =
        torch::cat({Bottom(in, b).unsqueeze(1), Embeddings(rows)}, 1).reshape({b, width_});
    torch::Tensor x = x0;
    for (auto& layer : cross_) x = x0 * layer->forward(x) + x;
    return WithLinear(top_->forward(x).reshape({b}), rows);
  }
  uint64_t StepBytes() const override {
    const auto w = static_cast<uint64_t>(width_);
    return static_cast<uint64_t>(spec_.batch) * (w * 4 * (4 + 4 * kCrossLayers) + 4096);
  }

 private:
  int64_t width_;
  std::vector<torch::nn::Linear> cross_;
  torch::nn::Sequential top_{nullptr};
};

sluice::ModelFactory Factory(const std::string& kind) {
  if (kind == "dot") return [](const sluice::ModelSpec& s) { return std::make_shared<DotModel>(s); };
  return [](const sluice::ModelSpec& s) { return std::make_shared<DcnModel>(s); };
}

int Fail(const sluice::Status& s) {
  std::fprintf(stderr, "dlrm_custom: error: %s\n", s.message().c_str());
  return s.code() == sluice::StatusCode::kAborted ? sluice::InterruptExitCode() : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kind = "dot", config, export_dir;
  std::vector<std::string> overrides;
  sluice::TrainOptions options;
  bool train_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      kind = argv[++i];
    } else if (a == "--train-only") {
      train_only = true;
    } else if (a == "--resume") {
      options.resume = true;
    } else if (a == "--export" && i + 1 < argc) {
      export_dir = argv[++i];
    } else if (a == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (config.empty() && a[0] != '-') {
      config = a;
    } else {
      config.clear();
      break;
    }
  }
  if (config.empty() || (kind != "dot" && kind != "dcn")) {
    std::fprintf(stderr, "usage: dlrm_custom --model dot|dcn CONFIG [--set key=value ...] [--export DIR] [--resume] [--train-only]\n");
    return 2;
  }
  auto run = sluice::Run::FromConfig(config, overrides);
  if (!run.ok()) return Fail(run.status());
  if (sluice::Status s = run->SetModel(kind, Factory(kind)); !s.ok()) return Fail(s);
  if (sluice::Status s = run->Train(options); !s.ok()) return Fail(s);
  if (train_only) return 0;

  // Read the trained run back: its best checkpoint, with the same model.
  auto trained = sluice::Run::Open(run->run_dir());
  if (!trained.ok()) return Fail(trained.status());
  if (sluice::Status s = trained->SetModel(kind, Factory(kind)); !s.ok()) return Fail(s);
  auto metrics = trained->Evaluate("test");
  if (!metrics.ok()) return Fail(metrics.status());
  std::printf("test %s (model %s, checkpoint %s)\n", metrics->text.c_str(), kind.c_str(),
              trained->checkpoint().c_str());
  if (!export_dir.empty()) {
    if (sluice::Status s = trained->Export(export_dir); !s.ok()) return Fail(s);
  }
  return 0;
}
