// The sluice executable. Every subcommand's errors, command-line errors included, end here,
// converted in one place to one line on stderr ("sluice: error: what, where, why") and a
// non-zero exit. Tasks are dispatched through one table (kTasks).

#include <CLI/CLI.hpp>

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "common/thread_plan.h"
#include "common/version.h"
#include "storage/dataset.h"
#include "train/dlrm/dlrm_task.h"
#include "train/lp/lp_task.h"
#include "train/nc/nc_task.h"
#include "train/runner.h"
#include "train/storage_demo.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

int Fail(const Status& status) {
  if (status.code() == StatusCode::kAborted) {  // Ctrl-C / SIGTERM: stopped cleanly
    std::fprintf(stderr, "sluice: %s\n", status.message().c_str());
    return InterruptExitCode();
  }
  std::fprintf(stderr, "sluice: error: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

// Loads a task's config from `path` plus overrides; `run_dir` (when not empty) replaces the
// config's (a run directory read where it is, even if moved).
template <class Config, std::unique_ptr<Task> (*Make)(const Config&)>
Result<std::unique_ptr<Task>> LoadTask(const std::string& path,
                                       const std::vector<std::string>& overrides,
                                       const std::string& run_dir) {
  Config config;
  SLUICE_RETURN_IF_ERROR(LoadConfig(path, overrides, config));
  if (!run_dir.empty()) config.run_dir = run_dir;
  return Make(config);
}

struct TaskEntry {
  const char* name;
  Result<std::unique_ptr<Task>> (*load)(const std::string& path,
                                        const std::vector<std::string>& overrides,
                                        const std::string& run_dir);
};

// Every task sluice trains. A config's `task` key picks one (link_prediction by default).
constexpr TaskEntry kTasks[] = {
    {"link_prediction", &LoadTask<LpConfig, &MakeLpTask>},
    {"recommendation", &LoadTask<DlrmConfig, &MakeDlrmTask>},
    {"node_classification", &LoadTask<NcConfig, &MakeNcTask>},
};

// The task a config (with its overrides) names: its `task` key, link_prediction by default.
Result<const TaskEntry*> ConfigTask(const std::string& path, const std::vector<std::string>& overrides) {
  SLUICE_ASSIGN_OR_RETURN(ConfigNode root, ParseConfigFile(path));
  std::string name = "link_prediction";
  if (root.kind == ConfigNode::Kind::kMap) {
    if (ConfigNode* task = root.Find("task"); task != nullptr && task->kind == ConfigNode::Kind::kScalar) {
      name = task->scalar;
    }
  }
  for (const std::string& o : overrides) {
    if (o.rfind("task=", 0) == 0) name = o.substr(5);
  }
  std::string names;
  for (const TaskEntry& e : kTasks) {
    if (name == e.name) return &e;
    names += (names.empty() ? "" : ", ") + std::string(e.name);
  }
  return InvalidArgument(path + ": task '" + name + "' is not one of " + names);
}

// Loads the task of a run directory from its config.yaml.
Result<std::unique_ptr<Task>> LoadRun(const std::string& run_dir) {
  const std::string path = run_dir + "/config.yaml";
  if (!fs::exists(path)) return NotFound(path + ": not a run directory (no config.yaml)");
  SLUICE_ASSIGN_OR_RETURN(const TaskEntry* entry, ConfigTask(path, {}));
  return entry->load(path, {}, run_dir);
}

struct Args {
  std::string config, run_dir, dataset, split = "test", out, checkpoint = "default";
  std::vector<std::string> overrides;
  bool print_config = false, resume = false, overwrite = false, verify = false;
  PredictRequest predict;
  int k = 10;
};

int RunVersion() {
  ThreadPlan plan = MakeThreadPlan(ThreadConfig{}, OnlineCores());
  auto handle = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  std::printf("sluice %s\n%s\n%s\n", kVersion, TorchRuntimeSummary().c_str(),
              plan.ToString().c_str());
  return 0;
}

int RunInfo(const Args& a) {
  auto dataset = Dataset::Open(a.dataset);
  if (!dataset.ok()) return Fail(dataset.status());
  std::printf("%s", dataset->Summary().c_str());
  if (a.verify) {
    Status s = dataset->Verify();
    if (!s.ok()) return Fail(s);
    std::printf("  checksums: all %zu files verified\n", dataset->manifest().files.size());
  }
  return 0;
}

int RunDemo(const Args& a) {
  StorageDemoConfig config;
  Status s = LoadConfig(a.config, a.overrides, config);
  if (!s.ok()) return Fail(s);
  if (a.print_config) {
    std::printf("%s", DumpConfig(config).c_str());
    return 0;
  }
  ThreadPlan plan = MakeThreadPlan(config.threads, OnlineCores());
  auto handle = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  std::printf("%s\n", plan.ToString().c_str());
  s = RunStorageDemo(config);
  return s.ok() ? 0 : Fail(s);
}

int RunTrain(const Args& a) {
  auto entry = ConfigTask(a.config, a.overrides);
  if (!entry.ok()) return Fail(entry.status());
  auto task = (*entry)->load(a.config, a.overrides, "");
  if (!task.ok()) return Fail(task.status());
  if (a.print_config) {
    std::printf("%s", (*task)->ConfigYaml().c_str());
    return 0;
  }
  TrainOptions options;
  options.resume = a.resume;
  options.overwrite = a.overwrite;
  // Test hook: behave as if interrupted (Ctrl-C) after this many steps.
  if (const char* stop = std::getenv("SLUICE_STOP_AFTER_STEPS")) options.stop_after_steps = std::atoll(stop);
  Status s = Train(**task, options);
  return s.ok() ? 0 : Fail(s);
}

// eval, export and predict: the run's task, opened at the chosen checkpoint.
int RunRead(const std::string& command, const Args& a) {
  auto task = LoadRun(a.run_dir);
  if (!task.ok()) return Fail(task.status());
  if (command == "export" && fs::exists(a.out)) {
    return Fail(InvalidArgument("export: " + a.out + " exists; choose a new directory"));
  }
  ThreadPlan plan = MakeThreadPlan((*task)->settings().threads, OnlineCores());
  auto threads = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  auto opened = OpenTrained(**task, a.checkpoint);
  if (!opened.ok()) return Fail(opened.status());
  if (command == "eval") {
    auto m = (*task)->Evaluate(a.split);
    if (!m.ok()) return Fail(m.status());
    std::printf("%s %s (checkpoint %s)\n", a.split.c_str(), m->text.c_str(), opened->c_str());
    return 0;
  }
  if (command == "predict") {
    PredictRequest request = a.predict;
    request.k = static_cast<uint64_t>(a.k);
    auto out = (*task)->Predict(request);
    if (!out.ok()) return Fail(out.status());
    std::printf("%s", out->c_str());
    return 0;
  }
  const std::string temp = a.out + ".tmp";
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp, ec);
  if (ec) return Fail(IoError("export: create " + temp + ": " + ec.message()));
  Status s = (*task)->Export(temp);
  if (!s.ok()) return Fail(s);
  fs::rename(temp, a.out, ec);
  if (ec) return Fail(IoError("export: rename " + temp + " to " + a.out + ": " + ec.message()));
  std::printf("exported checkpoint %s to %s\n", opened->c_str(), a.out.c_str());
  return 0;
}

constexpr const char* kCheckpointHelp =
    "checkpoint to open: best (the best-validating), latest, or a name such as epoch-3-step-0; "
    "default: best when the run has one, else latest";

void AddTrain(CLI::App& app, Args& a) {
  auto* train = app.add_subcommand("train", "train a model as a YAML config says");
  train->add_option("CONFIG", a.config, "YAML config (see configs/)")->required();
  train->add_option("--set", a.overrides, "override a config key: --set train.epochs=3")
      ->allow_extra_args(false);
  train->add_flag("--print-config", a.print_config, "print the effective config and exit");
  train->add_flag("--resume", a.resume, "continue from the run directory's latest checkpoint");
  train->add_flag("--overwrite", a.overwrite,
                  "discard the run directory's checkpoints, tables, metrics and summary, and "
                  "start over (without it, a run directory that holds checkpoints is refused)");
}

void AddReaders(CLI::App& app, Args& a) {
  auto* eval = app.add_subcommand(
      "eval", "evaluate a run: its best checkpoint (by validation) when it has one, else its latest");
  eval->add_option("RUN_DIR", a.run_dir, "run directory (written by sluice train)")->required();
  eval->add_option("--split", a.split, "valid or test");
  eval->add_option("--checkpoint", a.checkpoint, kCheckpointHelp);
  auto* exp = app.add_subcommand(
      "export", "write embeddings as .npy with the original-id maps (best checkpoint, else latest)");
  exp->add_option("RUN_DIR", a.run_dir, "run directory")->required();
  exp->add_option("--out", a.out, "output directory (must not exist)")->required();
  exp->add_option("--checkpoint", a.checkpoint, kCheckpointHelp);
  auto* predict = app.add_subcommand(
      "predict", "link prediction: the k best tails of a head and relation; recommendation: "
                 "click probabilities of the first k samples of a split (best checkpoint, else latest)");
  predict->add_option("RUN_DIR", a.run_dir, "run directory")->required();
  predict->add_option("--head", a.predict.head, "head node, by original id or name (link prediction)");
  predict->add_option("--relation", a.predict.relation, "relation, by original id or name (link prediction)");
  predict->add_option("--split", a.predict.split, "split whose samples to score (recommendation)");
  predict->add_option("-k", a.k, "how many tails or samples")->check(CLI::Range(1, 100000000));
  predict->add_option("--checkpoint", a.checkpoint, kCheckpointHelp);
}

void BuildCli(CLI::App& app, Args& a) {
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sluice ") + kVersion);
  app.add_subcommand("version", "print the version, libtorch, BLAS and the thread plan");
  auto* info = app.add_subcommand("info", "check a dataset directory and summarise it");
  info->add_option("DATASET", a.dataset, "dataset directory (holds manifest.json)")->required();
  info->add_flag("--verify", a.verify, "also verify every file's CRC-32 (reads all data)");
  auto* demo = app.add_subcommand(
      "demo-storage", "write a row table, read and update random rows through the io layer, "
                      "check every byte, and print throughput");
  demo->add_option("CONFIG", a.config, "YAML config (optional; defaults otherwise)");
  demo->add_option("--set", a.overrides, "override a config key: --set io.queue_depth=64")
      ->allow_extra_args(false);
  demo->add_flag("--print-config", a.print_config, "print the effective config and exit");
  AddTrain(app, a);
  AddReaders(app, a);
}

// A first argument that is no subcommand: named, with the closest one when it looks like a typo.
std::optional<int> UnknownCommand(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  std::string known, close;
  for (const CLI::App* sub : app.get_subcommands({})) {
    const std::string& name = sub->get_name();
    if (name == argv[1]) return std::nullopt;
    known += (known.empty() ? "" : ", ") + name;
    size_t same = 0;
    for (size_t i = 0; i < name.size() && argv[1][i] != '\0'; ++i) same += name[i] == argv[1][i];
    if (close.empty() && same + 2 >= name.size() && std::strlen(argv[1]) + 2 >= name.size()) close = name;
  }
  std::fprintf(stderr, "sluice: error: unknown command '%s'%s (commands: %s; see sluice --help)\n",
               argv[1], close.empty() ? "" : ("; did you mean '" + close + "'?").c_str(), known.c_str());
  return 2;
}

int Main(int argc, char** argv) {
  CLI::App app{"sluice: out-of-core training of embedding-heavy models from local disk"};
  Args a;
  BuildCli(app, a);
  if (auto code = UnknownCommand(app, argc, argv)) return *code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "sluice: error: %s (see sluice --help)\n", e.what());
    return 2;
  }
  const std::string command = app.get_subcommands().front()->get_name();
  if (command == "version") return RunVersion();
  if (command == "info") return RunInfo(a);
  if (command == "demo-storage") return RunDemo(a);
  if (command == "train") return RunTrain(a);
  return RunRead(command, a);
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
