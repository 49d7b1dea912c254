// A GraphSage with a gated aggregator, written against sluice's public API and trained for node
// classification as a YAML config says (feature rows in memory or out of core through the row
// cache; the model never sees which). Per layer l, for destination i with sampled in-neighbours
// N(i) and the mean m_i of their rows:
//   g_i = sigmoid(W_g [h_i, m_i] + b_g)         (one gate per output channel)
//   h'_i = W_self h_i + g_i * (W_neigh m_i)       (ReLU and dropout between layers)
//
// With --encoder, the model is sluice's built-in GNN instead, behind a user's encoder of the
// node features (Run::SetEncoder): x' = x + relu(W x + b), trained with the GNN.
//
//   gnn_custom CONFIG [--encoder] [--set key=value ...] [--export DIR] [--train-only]
// trains, then (unless --train-only) evaluates the best checkpoint on the test split and prints
// its metrics (and exports the predictions into DIR).

#include <sluice/sluice.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

class GatedSage : public sluice::Model {
 public:
  explicit GatedSage(const sluice::ModelSpec& s) : spec_(s) {
    int64_t in = s.feature_dim + s.embedding_dim;
    for (int64_t l = 0; l < s.layers; ++l) {
      const int64_t out = l + 1 == s.layers ? s.classes : s.dim;
      const std::string n = std::to_string(l);
      self_.push_back(register_module("self" + n, torch::nn::Linear(in, out)));
      neigh_.push_back(register_module("neigh" + n, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false))));
      gate_.push_back(register_module("gate" + n, torch::nn::Linear(2 * in, out)));
      in = out;
    }
  }

  // [seeds, classes]: blocks[0] maps every node of the sample to the next layer's nodes, the
  // last block has the seeds as destinations; destinations are a prefix of their sources.
  torch::Tensor Predict(const sluice::ModelInput& in) override {
    torch::Tensor h = Rows(in);
    for (size_t l = 0; l < in.blocks.size(); ++l) {
      const sluice::BlockInput& b = in.blocks[l];
      const torch::Tensor deg = (b.offsets.narrow(0, 1, b.num_dst) - b.offsets.narrow(0, 0, b.num_dst));
      const torch::Tensor dst = torch::repeat_interleave(deg);
      const torch::Tensor sum = torch::zeros({b.num_dst, h.size(1)}).index_add(0, dst, h.index_select(0, b.src_local));
      const torch::Tensor mean = sum / deg.clamp_min(1).unsqueeze(1).to(torch::kFloat32);
      const torch::Tensor self = h.narrow(0, 0, b.num_dst);
      const torch::Tensor gate = torch::sigmoid(gate_[l]->forward(torch::cat({self, mean}, 1)));
      h = self_[l]->forward(self) + gate * neigh_[l]->forward(mean);
      if (l + 1 < in.blocks.size()) h = torch::relu(h);
    }
    return h;
  }
  torch::Tensor Loss(const sluice::ModelInput& in) override {
    return torch::nn::functional::cross_entropy(Predict(in), in.labels);
  }
  // Rows, their gradient and each layer's activations a few times over, for 64 nodes a seed.
  uint64_t StepBytes() const override {
    const auto width = static_cast<uint64_t>(spec_.feature_dim + spec_.embedding_dim + 3 * spec_.dim);
    return static_cast<uint64_t>(spec_.batch) * 64 * width * 4 * 6;
  }

 private:
  // Every node's input row: its features, then its learnable embedding when the run has one.
  static torch::Tensor Rows(const sluice::ModelInput& in) {
    std::vector<torch::Tensor> parts;
    for (const sluice::TableInput& t : in.tables) parts.push_back(t.uses);
    return parts.size() == 1 ? parts[0] : torch::cat(parts, 1);
  }

  sluice::ModelSpec spec_;
  std::vector<torch::nn::Linear> self_, neigh_, gate_;
};

// A residual feature encoder in front of the built-in GNN: the features keep their width.
class FeatureMlp : public sluice::Encoder {
 public:
  explicit FeatureMlp(const sluice::ModelSpec& s)
      : linear_(register_module("linear", torch::nn::Linear(s.feature_dim, s.feature_dim))) {}
  sluice::ModelInput Encode(sluice::ModelInput in) override {
    torch::Tensor& x = in.tables.at(0).uses;
    x = x + torch::relu(linear_->forward(x));
    return in;
  }
  // The projection and its ReLU over every node of a step (64 a seed), with their gradients.
  uint64_t StepBytes() const override {
    return static_cast<uint64_t>(linear_->weight.size(0)) * 64 * 1024 * 4 * 4;
  }

 private:
  torch::nn::Linear linear_;
};

int Fail(const sluice::Status& s) {
  std::fprintf(stderr, "gnn_custom: error: %s\n", s.message().c_str());
  return s.code() == sluice::StatusCode::kAborted ? sluice::InterruptExitCode() : 1;
}

sluice::ModelFactory Factory() {
  return [](const sluice::ModelSpec& s) { return std::make_shared<GatedSage>(s); };
}

// The user's part of a run: the gated GraphSage, or (--encoder) the feature encoder.
sluice::Status Plug(sluice::Run& run, bool encoder) {
  if (!encoder) return run.SetModel("gated_sage", Factory());
  return run.SetEncoder("feature_mlp", [](const sluice::ModelSpec& s) { return std::make_shared<FeatureMlp>(s); });
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, export_dir;
  std::vector<std::string> overrides;
  bool train_only = false, encoder = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (a == "--export" && i + 1 < argc) {
      export_dir = argv[++i];
    } else if (a == "--train-only") {
      train_only = true;
    } else if (a == "--encoder") {
      encoder = true;
    } else if (config.empty() && a[0] != '-') {
      config = a;
    } else {
      config.clear();
      break;
    }
  }
  if (config.empty()) {
    std::fprintf(stderr, "usage: gnn_custom CONFIG [--encoder] [--set key=value ...] [--export DIR] [--train-only]\n");
    return 2;
  }
  auto run = sluice::Run::FromConfig(config, overrides);
  if (!run.ok()) return Fail(run.status());
  if (sluice::Status s = Plug(*run, encoder); !s.ok()) return Fail(s);
  if (sluice::Status s = run->Train(); !s.ok()) return Fail(s);
  if (train_only) return 0;
  auto trained = sluice::Run::Open(run->run_dir());
  if (!trained.ok()) return Fail(trained.status());
  if (sluice::Status s = Plug(*trained, encoder); !s.ok()) return Fail(s);
  auto metrics = trained->Evaluate("test");
  if (!metrics.ok()) return Fail(metrics.status());
  std::printf("test %s (%s, checkpoint %s)\n", metrics->text.c_str(),
              encoder ? "built-in GNN behind feature_mlp" : "model gated_sage", trained->checkpoint().c_str());
  if (!export_dir.empty()) {
    if (sluice::Status s = trained->Export(export_dir); !s.ok()) return Fail(s);
  }
  return 0;
}
