// The sluice executable, built on the public API (include/sluice/). Every subcommand's errors,
// command-line errors included, end here, converted in one place to one line on stderr
// ("sluice: error: what, where, why") and a non-zero exit.

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/prctl.h>
#include <unistd.h>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/thread_plan.h"
#include "sluice/dataset.h"
#include "sluice/run.h"
#include "sluice/status.h"
#include "sluice/version.h"
#include "train/dist.h"
#include "train/storage_demo.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {


int Fail(const Status& status) {
  if (status.code() == StatusCode::kAborted) {  // Ctrl-C / SIGTERM: stopped cleanly
    std::fprintf(stderr, "sluice: %s\n", status.message().c_str());
    return InterruptExitCode();
  }
  std::fprintf(stderr, "sluice: error: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

struct Args {
  std::string config, run_dir, dataset, split = "test", out, checkpoint = "default";
  std::vector<std::string> overrides;
  bool print_config = false, resume = false, overwrite = false, verify = false, json = false;
  PredictRequest predict;
  int k = 10;
  int world_size = 0, rank = -1;  // unset: the environment's (train/dist.h)
  std::string master;
};

int RunVersion() {
  ThreadPlan plan = MakeThreadPlan(ThreadConfig{}, OnlineCores());
  auto handle = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  std::printf("sluice %s\n%s\n%s\n%s\n", kVersion, TorchRuntimeSummary().c_str(),
              plan.ToString().c_str(), DeviceSummary().c_str());
  const char* groups = HaveGloo() && HaveNccl() ? "c10d rendezvous, Gloo and NCCL process groups"
                       : HaveGloo()             ? "c10d rendezvous, Gloo process groups"
                       : HaveNccl()             ? "c10d rendezvous, NCCL process groups (no Gloo headers)"
                                                : "none: built without the Gloo headers (libgloo-dev) or NCCL; "
                                                  "runs across processes are refused";
  std::printf("distributed: %s\n", groups);
  return 0;
}

int RunInfo(const Args& a) {
  auto dataset = OpenDataset(a.dataset, a.verify);
  if (!dataset.ok()) return Fail(dataset.status());
  std::printf("%s", dataset->summary.c_str());
  if (a.verify) {
    std::printf("  checksums: all %llu files verified\n", static_cast<unsigned long long>(dataset->files));
    std::printf("  content: ids of %llu arrays within their counts, %llu float arrays finite\n",
                static_cast<unsigned long long>(dataset->verified_id_arrays),
                static_cast<unsigned long long>(dataset->verified_float_arrays));
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
  auto run = Run::FromConfig(a.config, a.overrides);
  if (!run.ok()) return Fail(run.status());
  // A run across processes: rank R > 0 keeps its tables in RUN_DIR/rank-R (rank 0's run
  // directory holds the run's checkpoints, metrics and summary).
  auto place = ResolveDistPlace(a.world_size, a.rank, a.master, [](const char* n) { return std::getenv(n); });
  if (place.ok() && place->rank > 0 && !a.print_config) {
    std::vector<std::string> overrides = a.overrides;
    overrides.push_back("run_dir=" + run->run_dir() + "/rank-" + std::to_string(place->rank));
    run = Run::FromConfig(a.config, overrides);
    if (!run.ok()) return Fail(run.status());
  }
  if (a.print_config) {
    std::printf("%s", run->ConfigYaml().c_str());
    return 0;
  }
  TrainOptions options;
  options.resume = a.resume;
  options.overwrite = a.overwrite;
  options.world_size = a.world_size;
  options.rank = a.rank;
  options.master = a.master;
  // Test hook: behave as if interrupted (Ctrl-C) after this many steps.
  if (const char* stop = std::getenv("SLUICE_STOP_AFTER_STEPS")) options.stop_after_steps = std::atoll(stop);
  Status s = run->Train(options);
  return s.ok() ? 0 : Fail(s);
}

int RunConfigReference(const Args& a) {
  const std::string text = ConfigReference();
  if (a.out.empty()) {
    std::printf("%s", text.c_str());
    return 0;
  }
  const std::string temp = a.out + ".tmp";
  std::FILE* f = std::fopen(temp.c_str(), "w");
  if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) {
    return Fail(IoError("config-reference: write " + temp + ": " + std::strerror(errno)));
  }
  if (std::rename(temp.c_str(), a.out.c_str()) != 0) {
    return Fail(IoError("config-reference: rename " + temp + ": " + std::strerror(errno)));
  }
  return 0;
}

// eval, export and predict: the run, opened at the chosen checkpoint.
int RunRead(const std::string& command, const Args& a) {
  auto run = Run::Open(a.run_dir);
  if (!run.ok()) return Fail(run.status());
  if (command == "eval") {
    auto m = run->Evaluate(a.split, a.checkpoint);
    if (!m.ok()) return Fail(m.status());
    if (a.json) {
      std::printf("{\"split\": \"%s\", \"checkpoint\": \"%s\", \"metrics\": %s}\n", a.split.c_str(),
                  run->checkpoint().c_str(), m->json.c_str());
    } else {
      std::printf("%s %s (checkpoint %s)\n", a.split.c_str(), m->text.c_str(), run->checkpoint().c_str());
    }
    return 0;
  }
  if (command == "predict") {
    PredictRequest request = a.predict;
    request.k = static_cast<uint64_t>(a.k);
    auto out = run->Predict(request, a.checkpoint);
    if (!out.ok()) return Fail(out.status());
    std::printf("%s", out->c_str());
    return 0;
  }
  Status s = run->Export(a.out, a.checkpoint);
  if (!s.ok()) return Fail(s);
  std::printf("exported checkpoint %s to %s\n", run->checkpoint().c_str(), a.out.c_str());
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
  train->add_option("--world-size", a.world_size,
                    "processes in the run (default: WORLD_SIZE, else 1; docs/distributed.md)")
      ->check(CLI::Range(1, 1000000));
  train->add_option("--rank", a.rank, "this process's rank, 0 to world size - 1 (default: RANK)")
      ->check(CLI::Range(0, 1000000));
  train->add_option("--master", a.master,
                    "the rendezvous: rank 0's ADDR[:PORT] (default: MASTER_ADDR and MASTER_PORT, else "
                    "127.0.0.1:29500)");
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
  eval->add_flag("--json", a.json, "print the metrics as one JSON object, full precision (for scripts)");
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
  info->add_flag("--verify", a.verify, "also verify every file's CRC-32, ids within their counts, finite floats (reads all data)");
  auto* demo = app.add_subcommand(
      "demo-storage", "write a row table, read and update random rows through the io layer, "
                      "check every byte, and print throughput");
  demo->add_option("CONFIG", a.config, "YAML config (optional; defaults otherwise)");
  demo->add_option("--set", a.overrides, "override a config key: --set io.queue_depth=64")
      ->allow_extra_args(false);
  demo->add_flag("--print-config", a.print_config, "print the effective config and exit");
  auto* ref = app.add_subcommand("config-reference",
                                 "write every task's config keys as Markdown (docs/configuration.md)");
  ref->add_option("--out", a.out, "output file (default: standard output)");
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
  if (command == "config-reference") return RunConfigReference(a);
  return RunRead(command, a);
}

}  // namespace
}  // namespace sluice

namespace {

// libtorch's OpenMP workers spin after every parallel region by default (libgomp's
// OMP_WAIT_POLICY unset), on the cores the pipeline's sampler and io threads need: on 2 cores a
// node-classification step took 0.859 s out of core and 0.683 s in memory spinning, 0.771 s and
// 0.589 s with the workers sleeping (docs/benchmarks.md, 2026-12-03), link prediction and DLRM
// the same within noise. libgomp reads the policy once, when it is loaded, before main: so the
// executable sets it and starts itself again, for `train` only (loading libtorch twice costs
// about half a second). A policy in the environment wins; an exec that fails leaves the run
// spinning, nothing worse.
void SleepingOpenMpWorkers(int argc, char** argv) {
  int command = 1;  // the first argument that is not an option
  while (command < argc && argv[command][0] == '-') ++command;
  if (command >= argc || std::strcmp(argv[command], "train") != 0) return;
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (::setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  // By the binary's own path, so the process keeps its name in ps, top and perf (started through
  // /proc/self/exe it would be "exe"); that link when the path is gone (a rebuilt binary).
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    ::execv(self, argv);
  }
  ::execv("/proc/self/exe", argv);
}

// Started through /proc/self/exe (its path gone) the process is called "exe": the threads
// started from here on inherit "sluice" instead (those the libraries start while loading keep
// "exe").
void KeepOurName() {
  char name[16] = {};
  if (::prctl(PR_GET_NAME, name) == 0 && std::strcmp(name, "exe") == 0) ::prctl(PR_SET_NAME, "sluice");
}

}  // namespace

int main(int argc, char** argv) {
  SleepingOpenMpWorkers(argc, argv);
  KeepOurName();
  try {
    return sluice::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: error: %s\n", e.what());
    return 1;
  }
}
