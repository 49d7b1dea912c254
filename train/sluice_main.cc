// The sluice executable. Errors from every subcommand end here, converted in one place to one
// line on stderr ("sluice: error: what, where, why") and a non-zero exit.

#include <CLI/CLI.hpp>

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "common/thread_plan.h"
#include "common/version.h"
#include "storage/dataset.h"
#include "train/dlrm_trainer.h"
#include "train/lp_trainer.h"
#include "train/storage_demo.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

int Fail(const Status& status) {
  if (status.code() == StatusCode::kAborted) {  // Ctrl-C: stopped cleanly, as a shell expects
    std::fprintf(stderr, "sluice: %s\n", status.message().c_str());
    return 130;
  }
  std::fprintf(stderr, "sluice: error: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int RunVersion() {
  ThreadPlan plan = MakeThreadPlan(ThreadConfig{}, OnlineCores());
  auto handle = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  std::printf("sluice %s\n%s\n%s\n", kVersion, TorchRuntimeSummary().c_str(),
              plan.ToString().c_str());
  return 0;
}

int RunInfo(const std::string& dir, bool verify) {
  auto dataset = Dataset::Open(dir);
  if (!dataset.ok()) return Fail(dataset.status());
  std::printf("%s", dataset->Summary().c_str());
  if (verify) {
    Status s = dataset->Verify();
    if (!s.ok()) return Fail(s);
    std::printf("  checksums: all %zu files verified\n", dataset->manifest().files.size());
  }
  return 0;
}

// Loads a command's config; returns an exit code when the command is done already (a bad
// config, or --print-config), nothing when it should run.
template <class Config>
std::optional<int> LoadCommandConfig(const std::string& path,
                                     const std::vector<std::string>& overrides, bool print_config,
                                     Config& config) {
  Status s = LoadConfig(path, overrides, config);
  if (!s.ok()) return Fail(s);
  if (print_config) {
    std::printf("%s", DumpConfig(config).c_str());
    return 0;
  }
  return std::nullopt;
}

int RunDemo(const std::string& config_path, const std::vector<std::string>& overrides,
            bool print_config) {
  StorageDemoConfig config;
  if (auto done = LoadCommandConfig(config_path, overrides, print_config, config)) return *done;
  ThreadPlan plan = MakeThreadPlan(config.threads, OnlineCores());
  auto handle = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  std::printf("%s\n", plan.ToString().c_str());
  Status s = RunStorageDemo(config);
  return s.ok() ? 0 : Fail(s);
}

// The task a config (with its overrides) asks for: its `task` key, link_prediction by default.
Result<std::string> ConfigTask(const std::string& path, const std::vector<std::string>& overrides) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ParseConfigFile(path));
  for (const std::string& o : overrides) {
    if (o.rfind("task=", 0) == 0) return o.substr(5);
  }
  if (root.kind == ConfigNode::Kind::kMap) {
    if (ConfigNode* task = root.Find("task"); task != nullptr && task->kind == ConfigNode::Kind::kScalar) {
      return task->scalar;
    }
  }
  return std::string("link_prediction");
}

// The task of a run directory (its config.yaml).
Result<std::string> RunTask(const std::string& run_dir) {
  const std::string path = run_dir + "/config.yaml";
  if (!std::filesystem::exists(path)) return NotFound(path + ": not a run directory (no config.yaml)");
  return ConfigTask(path, {});
}

int RunTrain(const std::string& config_path, const std::vector<std::string>& overrides,
             bool print_config, bool resume) {
  auto task = ConfigTask(config_path, overrides);
  if (!task.ok()) return Fail(task.status());
  // Test hook: behave as if interrupted (Ctrl-C) after this many steps.
  const char* stop = std::getenv("SLUICE_STOP_AFTER_STEPS");
  if (*task == "recommendation") {
    DlrmConfig config;
    if (auto done = LoadCommandConfig(config_path, overrides, print_config, config)) return *done;
    DlrmTrainOptions options;
    options.resume = resume;
    if (stop != nullptr) options.stop_after_steps = std::atoll(stop);
    Status s = RunDlrmTrain(config, options);
    return s.ok() ? 0 : Fail(s);
  }
  if (*task != "link_prediction") {
    return Fail(InvalidArgument(config_path + ": task '" + *task +
                                "' is not one of link_prediction, recommendation"));
  }
  LpConfig config;
  if (auto done = LoadCommandConfig(config_path, overrides, print_config, config)) return *done;
  LpTrainOptions options;
  options.resume = resume;
  if (stop != nullptr) options.stop_after_steps = std::atoll(stop);
  Status s = RunLpTrain(config, options);
  return s.ok() ? 0 : Fail(s);
}

int RunEval(const std::string& run_dir, const std::string& split) {
  auto task = RunTask(run_dir);
  if (!task.ok()) return Fail(task.status());
  if (*task == "recommendation") {
    auto m = RunDlrmEval(run_dir, split);
    if (!m.ok()) return Fail(m.status());
    std::printf("%s %s\n", split.c_str(), m->ToString().c_str());
    return 0;
  }
  auto m = RunLpEval(run_dir, split);
  if (!m.ok()) return Fail(m.status());
  std::printf("%s %s\n", split.c_str(), m->ToString().c_str());
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"sluice: out-of-core training of embedding-heavy models from local disk"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sluice ") + kVersion);

  app.add_subcommand("version", "print the version, libtorch, BLAS and the thread plan");

  auto* info = app.add_subcommand("info", "check a dataset directory and summarise it");
  std::string dataset_dir;
  bool verify = false;
  info->add_option("DATASET", dataset_dir, "dataset directory (holds manifest.json)")->required();
  info->add_flag("--verify", verify, "also verify every file's CRC-32 (reads all data)");

  auto* demo = app.add_subcommand(
      "demo-storage", "write a row table, read and update random rows through the io layer, "
                      "check every byte, and print throughput");
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  demo->add_option("CONFIG", config_path, "YAML config (optional; defaults otherwise)");
  demo->add_option("--set", overrides, "override a config key: --set io.queue_depth=64")
      ->allow_extra_args(false);
  demo->add_flag("--print-config", print_config, "print the effective config and exit");

  auto* train = app.add_subcommand("train", "train a model as a YAML config says");
  std::string train_config;
  std::vector<std::string> train_overrides;
  bool train_print = false, resume = false;
  train->add_option("CONFIG", train_config, "YAML config (see configs/)")->required();
  train->add_option("--set", train_overrides, "override a config key: --set train.epochs=3")
      ->allow_extra_args(false);
  train->add_flag("--print-config", train_print, "print the effective config and exit");
  train->add_flag("--resume", resume, "continue from the run directory's latest checkpoint");

  auto* eval = app.add_subcommand("eval", "evaluate a run directory's latest checkpoint");
  std::string run_dir, split = "test";
  eval->add_option("RUN_DIR", run_dir, "run directory (written by sluice train)")->required();
  eval->add_option("--split", split, "valid or test");

  auto* exp = app.add_subcommand("export", "write embeddings as .npy with the original-id maps");
  std::string out_dir;
  exp->add_option("RUN_DIR", run_dir, "run directory")->required();
  exp->add_option("--out", out_dir, "output directory (must not exist)")->required();

  auto* predict = app.add_subcommand(
      "predict", "link prediction: the k best tails of a head and relation; recommendation: "
                 "click probabilities of the first k samples of a split");
  std::string head, relation, predict_split = "test";
  int k = 10;
  predict->add_option("RUN_DIR", run_dir, "run directory")->required();
  predict->add_option("--head", head, "head node, by original id or name (link prediction)");
  predict->add_option("--relation", relation, "relation, by original id or name (link prediction)");
  predict->add_option("--split", predict_split, "split whose samples to score (recommendation)");
  predict->add_option("-k", k, "how many tails or samples")->check(CLI::Range(1, 100000000));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.got_subcommand("version")) return RunVersion();
  if (app.got_subcommand("info")) return RunInfo(dataset_dir, verify);
  if (app.got_subcommand("demo-storage")) return RunDemo(config_path, overrides, print_config);
  if (app.got_subcommand("train")) return RunTrain(train_config, train_overrides, train_print, resume);
  if (app.got_subcommand("eval")) return RunEval(run_dir, split);
  if (app.got_subcommand("export")) {
    auto task = RunTask(run_dir);
    if (!task.ok()) return Fail(task.status());
    Status s = *task == "recommendation" ? RunDlrmExport(run_dir, out_dir) : RunLpExport(run_dir, out_dir);
    if (!s.ok()) return Fail(s);
    std::printf("exported to %s\n", out_dir.c_str());
    return 0;
  }
  if (app.got_subcommand("predict")) {
    auto task = RunTask(run_dir);
    if (!task.ok()) return Fail(task.status());
    if (*task == "recommendation") {
      auto out = RunDlrmPredict(run_dir, predict_split, static_cast<uint64_t>(k));
      if (!out.ok()) return Fail(out.status());
      std::printf("%s", out->c_str());
      return 0;
    }
    if (head.empty() || relation.empty()) {
      return Fail(InvalidArgument("predict: a link-prediction run needs --head and --relation"));
    }
    auto out = RunLpPredict(run_dir, head, relation, k);
    if (!out.ok()) return Fail(out.status());
    std::printf("%s", out->c_str());
    return 0;
  }
  return 2;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  // Training allocates and frees the same multi-megabyte tensors every step. glibc would map
  // and unmap each one (page faults and zeroing: a fifth of the step); keep them in the heap.
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  try {
    return sluice::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: error: %s\n", e.what());
    return 1;
  }
}
