// The public Run (sluice/run.h) over the training core: tasks are dispatched through one table
// (kTasks), trained by the runner (train/runner.h) and read through OpenTrained.

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/thread_plan.h"
#include "sluice/dataset.h"
#include "sluice/run.h"
#include "storage/dataset.h"
#include "train/allocator.h"
#include "train/dlrm/dlrm_task.h"
#include "train/lp/lp_task.h"
#include "train/nc/nc_task.h"
#include "train/runner.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

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

template <class Config>
std::string Reference() {
  return ConfigReferenceTable(Config{});
}

struct TaskEntry {
  const char* name;
  Result<std::unique_ptr<Task>> (*load)(const std::string& path,
                                        const std::vector<std::string>& overrides,
                                        const std::string& run_dir);
  std::string (*reference)();  // the config's keys as a Markdown table
};

// Every task sluice trains. A config's `task` key picks one (link_prediction by default).
constexpr TaskEntry kTasks[] = {
    {"link_prediction", &LoadTask<LpConfig, &MakeLpTask>, &Reference<LpConfig>},
    {"recommendation", &LoadTask<DlrmConfig, &MakeDlrmTask>, &Reference<DlrmConfig>},
    {"node_classification", &LoadTask<NcConfig, &MakeNcTask>, &Reference<NcConfig>},
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

// Whether the run at `path` trained in virtual shards (train.virtual_shards above 0): its
// storage.cache_rows then sized one rank's cache for its share of the rows.
bool TrainedInShards(const std::string& path) {
  Result<ConfigNode> root = ParseConfigFile(path);
  if (!root.ok() || root->kind != ConfigNode::Kind::kMap) return false;
  ConfigNode* train = root->Find("train");
  ConfigNode* shards = train != nullptr && train->kind == ConfigNode::Kind::kMap ? train->Find("virtual_shards") : nullptr;
  return shards != nullptr && shards->kind == ConfigNode::Kind::kScalar && shards->scalar != "0";
}

// Runs `f`, turning an exception (a config parser's, libtorch's, a user's) into a Status.
template <class F>
auto Guard(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return IoError(what + ": " + e.what());
  } catch (...) {
    return IoError(what + ": an exception that is not a std::exception");
  }
}

}  // namespace

Run::Run(std::string task, std::unique_ptr<Task> impl, bool read_only)
    : task_name_(std::move(task)), impl_(std::move(impl)), read_only_(read_only) {}
Run::Run(Run&&) noexcept = default;
Run& Run::operator=(Run&&) noexcept = default;
Run::~Run() = default;

Result<Run> Run::FromConfig(const std::string& config_path, const std::vector<std::string>& overrides) {
  TuneAllocator();
  return Guard("config " + config_path, [&]() -> Result<Run> {
    SLUICE_ASSIGN_OR_RETURN(const TaskEntry* entry, ConfigTask(config_path, overrides));
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Task> task, entry->load(config_path, overrides, ""));
    return Run(entry->name, std::move(task), /*read_only=*/false);
  });
}

Result<Run> Run::Open(const std::string& run_dir) {
  TuneAllocator();
  return Guard("open run", [&]() -> Result<Run> {
    const std::string path = run_dir + "/config.yaml";
    if (!fs::exists(path)) return NotFound(path + ": not a run directory (no config.yaml)");
    SLUICE_ASSIGN_OR_RETURN(const TaskEntry* entry, ConfigTask(path, {}));
    // One process reads every rank's rows: a rank's storage.cache_rows does not apply to it; the
    // cache is sized from storage.budget.
    std::vector<std::string> overrides;
    if (TrainedInShards(path)) overrides.push_back("storage.cache_rows=0");
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Task> task, entry->load(path, overrides, run_dir));
    return Run(entry->name, std::move(task), /*read_only=*/true);
  });
}

const std::string& Run::task() const { return task_name_; }
const std::string& Run::run_dir() const { return impl_->settings().run_dir; }

std::string Run::ConfigYaml() const {
  try {
    return impl_->ConfigYaml();
  } catch (const std::exception& e) {
    return std::string("# cannot print the config: ") + e.what() + "\n";
  }
}

Status Run::SetModel(const std::string& name, ModelFactory factory) {
  if (trained_ || !opened_.empty()) {
    return FailedPrecondition("Run::SetModel: the run has started; set the model first");
  }
  if (!factory) return InvalidArgument("Run::SetModel: the factory is empty");
  if (name.empty()) return InvalidArgument("Run::SetModel: the model needs a name");
  return impl_->SetModelFactory(name, std::move(factory));
}

Status Run::SetEncoder(const std::string& name, EncoderFactory factory) {
  if (trained_ || !opened_.empty()) {
    return FailedPrecondition("Run::SetEncoder: the run has started; set the encoder first");
  }
  if (!factory) return InvalidArgument("Run::SetEncoder: the factory is empty");
  if (name.empty()) return InvalidArgument("Run::SetEncoder: the encoder needs a name");
  return impl_->SetEncoderFactory(name, std::move(factory));
}

Status Run::Train(const TrainOptions& options) {
  if (read_only_) return FailedPrecondition("Run::Train: a run opened for reading does not train");
  if (trained_) return FailedPrecondition("Run::Train: the run has trained; build a new Run");
  trained_ = true;
  return Guard("train", [&] { return sluice::Train(*impl_, options); });
}

Status Run::OpenCheckpoint(const std::string& checkpoint) {
  if (!read_only_) return FailedPrecondition("open the trained run with Run::Open to read it");
  if (!opened_.empty()) {
    if (checkpoint == "default" || checkpoint == opened_) return Status::Ok();
    return FailedPrecondition("the run reads checkpoint " + opened_ + "; open it again to read " +
                              checkpoint);
  }
  ThreadPlan plan = MakeThreadPlan(impl_->settings().threads, OnlineCores());
  threads_ = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  SLUICE_ASSIGN_OR_RETURN(opened_, OpenTrained(*impl_, checkpoint));
  return Status::Ok();
}

Result<Metrics> Run::Evaluate(const std::string& split, const std::string& checkpoint) {
  return Guard("evaluate", [&]() -> Result<Metrics> {
    SLUICE_RETURN_IF_ERROR(OpenCheckpoint(checkpoint));
    return impl_->Evaluate(split);
  });
}

Status Run::Export(const std::string& out_dir, const std::string& checkpoint) {
  return Guard("export", [&]() -> Status {
    if (fs::exists(out_dir)) return InvalidArgument("export: " + out_dir + " exists; choose a new directory");
    SLUICE_RETURN_IF_ERROR(OpenCheckpoint(checkpoint));
    const std::string temp = out_dir + ".tmp";
    std::error_code ec;
    fs::remove_all(temp, ec);
    fs::create_directories(temp, ec);
    if (ec) return IoError("export: create " + temp + ": " + ec.message());
    if (Status s = impl_->Export(temp); !s.ok()) {  // nothing half-written stays
      fs::remove_all(temp, ec);
      return s;
    }
    fs::rename(temp, out_dir, ec);
    if (ec) return IoError("export: rename " + temp + " to " + out_dir + ": " + ec.message());
    return Status::Ok();
  });
}

Result<std::string> Run::Predict(const PredictRequest& request, const std::string& checkpoint) {
  return Guard("predict", [&]() -> Result<std::string> {
    SLUICE_RETURN_IF_ERROR(OpenCheckpoint(checkpoint));
    return impl_->Predict(request);
  });
}

std::string ConfigReference() {
  std::string text =
      "# Configuration reference\n\n"
      "Generated from the config structs by `sluice config-reference` (the build writes it to "
      "`build/<preset>/docs/configuration.md`; a test checks that this copy matches). Every key "
      "can be set in the YAML file or with `--set key=value`; an unknown key, a value of the "
      "wrong type or out of range is refused in one line naming the file and line. The `task` "
      "key picks the table.\n";
  for (const TaskEntry& e : kTasks) {
    text += std::string("\n## task: ") + e.name + "\n\n" + e.reference();
  }
  return text;
}

Result<DatasetInfo> OpenDataset(const std::string& dir, bool verify) {
  SLUICE_ASSIGN_OR_RETURN(Dataset dataset, Dataset::Open(dir));
  Dataset::VerifyReport report;
  if (verify) {
    SLUICE_ASSIGN_OR_RETURN(report, dataset.Verify());
  }
  const Manifest& m = dataset.manifest();
  DatasetInfo info;
  info.verified_id_arrays = report.id_arrays;
  info.verified_float_arrays = report.float_arrays;
  info.dir = dir;
  info.task = TaskKindName(m.task);
  info.name = m.name;
  info.nodes = m.num_nodes;
  info.relations = m.num_relations;
  info.partitions = m.num_partitions();
  info.feature_dim = m.feature_dim;
  info.classes = m.num_classes;
  info.edges = m.edges;
  info.samples = m.samples;
  info.dense_features = m.record.dense;
  info.sparse_features = m.record.sparse;
  info.files = m.files.size();
  info.summary = dataset.Summary();
  return info;
}

}  // namespace sluice
