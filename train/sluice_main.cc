// The sluice executable. Errors from every subcommand end here, converted in one place to one
// line on stderr ("sluice: error: what, where, why") and a non-zero exit.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "common/thread_plan.h"
#include "common/version.h"
#include "storage/dataset.h"
#include "train/storage_demo.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

int Fail(const Status& status) {
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

int RunDemo(const std::string& config_path, const std::vector<std::string>& overrides,
            bool print_config) {
  StorageDemoConfig config;
  Status s = LoadConfig(config_path, overrides, config);
  if (!s.ok()) return Fail(s);
  if (print_config) {
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.got_subcommand("version")) return RunVersion();
  if (app.got_subcommand("info")) return RunInfo(dataset_dir, verify);
  if (app.got_subcommand("demo-storage")) return RunDemo(config_path, overrides, print_config);
  return 2;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  try {
    return sluice::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: error: %s\n", e.what());
    return 1;
  }
}
