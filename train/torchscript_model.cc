#include "train/torchscript_model.h"

#include <torch/script.h>

#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "train/torch_io.h"

namespace sluice {
namespace {

class ScriptedClickModel : public Model {
 public:
  ScriptedClickModel(torch::jit::Module module, const ModelSpec& spec)
      : module_(std::move(module)), spec_(spec) {
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      std::string name = p.name;
      for (char& c : name) c = c == '.' ? '_' : c;
      register_parameter(name, p.value);
    }
  }

  torch::Tensor Predict(const ModelInput& in) override {
    module_.train(in.training);
    const torch::Tensor& uses = in.tables.at(0).uses;
    const torch::Tensor rows = uses.view({in.labels.size(0), spec_.tables, uses.size(1)});
    const torch::Tensor dense = in.dense.defined() ? in.dense : torch::zeros({rows.size(0), 0});
    return module_.forward({dense, rows}).toTensor();
  }
  torch::Tensor Loss(const ModelInput& in) override {
    return torch::binary_cross_entropy_with_logits(Predict(in), in.labels);
  }
  // Unknown activations: the rows and their gradient a few times over, plus 1 KiB per sample
  // for the network.
  uint64_t StepBytes() const override {
    const auto b = static_cast<uint64_t>(spec_.batch);
    return b * (static_cast<uint64_t>(spec_.tables * spec_.row_width) * 4 * 8 + 1024);
  }

 private:
  torch::jit::Module module_;
  ModelSpec spec_;
};

}  // namespace

Result<std::shared_ptr<Model>> LoadScriptedClickModel(const std::string& path, const ModelSpec& spec) {
  if (!std::filesystem::is_regular_file(path)) {
    return NotFound("model.torchscript: " + path + ": no such file");
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const std::exception& e) {
    return InvalidArgument("model.torchscript: " + path + ": not a TorchScript file (" + FirstLine(e.what()) + ")");
  }
  if (!module.find_method("forward")) {
    return InvalidArgument("model.torchscript: " + path + ": the module has no forward method");
  }
  auto model = std::make_shared<ScriptedClickModel>(std::move(module), spec);
  // A probe batch of 2 samples: the forward must run and return [2] logits.
  ModelInput probe;
  probe.dense = torch::zeros({2, spec.dense_features});
  probe.labels = torch::zeros({2});
  TableInput t;
  t.uses = torch::zeros({2 * spec.tables, spec.row_width});
  probe.tables.push_back(t);
  probe.training = false;
  torch::Tensor out;
  try {
    torch::NoGradGuard no_grad;
    out = model->Predict(probe);
  } catch (const std::exception& e) {
    return InvalidArgument("model.torchscript: " + path + ": forward(dense [2, " +
                           std::to_string(spec.dense_features) + "], rows [2, " + std::to_string(spec.tables) +
                           ", " + std::to_string(spec.row_width) + "]) failed: " + FirstLine(e.what()));
  }
  if (out.dim() != 1 || out.size(0) != 2 || out.scalar_type() != torch::kFloat32) {
    std::string shape;
    for (int64_t d : out.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return InvalidArgument("model.torchscript: " + path + ": forward must return float32 logits [B]; "
                           "for B = 2 it returned " + std::string(c10::toString(out.scalar_type())) +
                           " [" + shape + "]");
  }
  return std::shared_ptr<Model>(model);
}

}  // namespace sluice
