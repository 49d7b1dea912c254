#include "train/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "common/crash_point.h"
#include "common/json.h"
#include "common/units.h"
#include "storage/file.h"
#include "train/allocator.h"
#include "train/data_parallel.h"
#include "train/dist.h"
#include "train/fingerprint.h"
#include "train/interrupt.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Clock = SteadyClock;

// Processes of the run on this machine (torchrun's LOCAL_WORLD_SIZE; 1 without it): each gets
// its share of the cores.
int LocalRanks() {
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  const int n = v != nullptr ? std::atoi(v) : 1;
  return std::max(1, n);
}

std::string ThreadsCondition(const ThreadPlan& p) {
  return "total " + std::to_string(p.total) + ", compute " + std::to_string(p.compute_threads) +
         ", blas " + std::to_string(p.blas_threads) + ", tbb " + std::to_string(p.tbb_threads);
}

bool Better(double score, double best) {
  return std::isfinite(score) && (!std::isfinite(best) || score > best);
}

// A scalar as compared and shown: numbers in their shortest form (0.3, not 0.29999999999999999).
std::string Normalized(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return text;
  return ShortestValue(v);
}

// "path: value" of every scalar under `node` whose path is fingerprinted (lists as one value).
void FingerprintedScalars(const ConfigNode& node, const std::string& path,
                          std::map<std::string, std::string>& out) {
  if (node.kind == ConfigNode::Kind::kMap) {
    for (const auto& [key, child] : node.entries) {
      FingerprintedScalars(child, path.empty() ? key : path + "." + key, out);
    }
  } else if (node.kind == ConfigNode::Kind::kSequence) {
    std::string text;
    for (const ConfigNode& item : node.items) text += (text.empty() ? "" : ", ") + item.scalar;
    if (InConfigFingerprint(path)) out[path] = "[" + text + "]";
  } else if (InConfigFingerprint(path)) {
    out[path] = Normalized(node.scalar);
  }
}

// Which fingerprinted keys differ between the run's config.yaml and this run's config:
// " (model.dim: 12 here, 8 in <run>/config.yaml)", or "" when that cannot be told.
std::string ConfigDifference(const std::string& run_dir, const std::string& config_yaml) {
  const std::string stored_path = run_dir + "/config.yaml";
  Result<std::string> stored_text = ReadFileToString(stored_path);
  if (!stored_text.ok()) return "";
  Result<ConfigNode> stored = ParseConfigText(*stored_text, stored_path);
  Result<ConfigNode> current = ParseConfigText(config_yaml, "this run's config");
  if (!stored.ok() || !current.ok()) return "";
  std::map<std::string, std::string> theirs, ours;
  FingerprintedScalars(*stored, "", theirs);
  FingerprintedScalars(*current, "", ours);
  std::vector<std::string> differ;
  for (const auto& [key, value] : ours) {
    auto it = theirs.find(key);
    const std::string old = it == theirs.end() ? "not set" : it->second;
    if (old != value) differ.push_back(key + " " + value + " (the run's: " + old + ")");
  }
  for (const auto& [key, value] : theirs) {
    if (!ours.count(key)) differ.push_back(key + " not set (the run's: " + value + ")");
  }
  if (differ.empty()) return "";
  std::string diff;
  for (size_t i = 0; i < differ.size() && i < 3; ++i) diff += (i ? "; " : "") + differ[i];
  if (differ.size() > 3) diff += "; " + std::to_string(differ.size() - 3) + " more";
  return " (" + diff + "; the run's config: " + stored_path + ")";
}

// The resume rule (train/fingerprint.h) for a checkpoint about to be resumed or read.
Status CheckCheckpointFits(const CheckpointReader& r, const std::string& task,
                           const std::string& config_fp, const std::string& dataset_fp,
                           const std::string& dataset, const std::string& config_yaml) {
  const CheckpointState& s = r.state();
  if (s.task != task) {
    return InvalidArgument(r.dir() + ": checkpoint of another task (" + s.task + ", not " + task +
                           "); start over with --overwrite or use another run_dir");
  }
  if (s.dataset_fingerprint != dataset_fp) {
    return InvalidArgument(r.dir() + ": checkpoint of another dataset (its manifest differs from " +
                           dataset + "/manifest.json); resume on the dataset it was trained on, "
                           "or start over with --overwrite");
  }
  // A user's model and encoder (Run::SetModel, Run::SetEncoder) end the fingerprint with
  // " model=NAME" and " encoder=NAME", in that order.
  const auto user_parts = [](std::string fp) {
    std::string parts[2];
    const char* tags[2] = {" encoder=", " model="};
    for (int i = 0; i < 2; ++i) {
      const size_t at = fp.rfind(tags[i]);
      if (at == std::string::npos || fp.find('\n', at) != std::string::npos) continue;
      parts[i] = fp.substr(at + std::string(tags[i]).size());
      fp.resize(at);
    }
    return std::pair<std::string, std::string>{parts[1], parts[0]};  // model, encoder
  };
  const auto theirs = user_parts(s.config_fingerprint), ours = user_parts(config_fp);
  if (theirs != ours) {
    const auto name = [](const std::pair<std::string, std::string>& m) {
      std::string text = m.first.empty() ? "the built-in model" : "the user's model '" + m.first + "'";
      return m.second.empty() ? text : text + " behind the user's encoder '" + m.second + "'";
    };
    const bool user = !theirs.first.empty() || !theirs.second.empty();
    return InvalidArgument(r.dir() + ": checkpoint trained with " + name(theirs) + ", not " + name(ours) +
                           (user ? " (open it from the program that trained it, after Run::SetModel or "
                                   "Run::SetEncoder with those names)" : "") +
                           "; or start over with --overwrite");
  }
  if (s.config_fingerprint != config_fp) {
    const std::string run_dir = r.dir().substr(0, r.dir().rfind("/checkpoints/"));
    std::string diff = ConfigDifference(run_dir, config_yaml);
    if (diff.empty()) {
      diff = " (a model.* or train.* setting other than train.epochs and train.max_minutes "
             "differs from this run's, or a key this version added)";
    }
    return InvalidArgument(r.dir() + ": checkpoint of another config" + diff +
                           "; resume with the run's config.yaml, or start over with --overwrite");
  }
  return Status::Ok();
}

// " (tables: 3 of 4 copies incremental, 1.2 GB written for 32 GB)", or "" without table copies.
std::string CopySummary(const CheckpointCopyStats& c) {
  if (c.full + c.incremental == 0) return "";
  return " (tables: " + std::to_string(c.incremental) + " of " + std::to_string(c.full + c.incremental) +
         " copies incremental, " + FormatBytes(c.bytes_written) + " written for " +
         FormatBytes(c.table_bytes) + ")";
}

class Runner : public StepSink {
 public:
  // A run across processes: `group` joined, `checkpoints_of` rank 0's run directory (whose
  // checkpoints every rank resumes from; only rank 0 writes them, its metrics and summary).
  Runner(Task& task, const TrainOptions& options, DistGroup* group = nullptr, const std::string& checkpoints_of = "")
      : task_(task), s_(task.settings()), options_(options), group_(group),
        leader_(group == nullptr || group->rank() == 0),
        store_(checkpoints_of.empty() ? s_.run_dir : checkpoints_of),
        progress_(s_.progress && leader_, task.unit(), s_.epochs) {
    store_.set_incremental(s_.checkpoint_incremental);
  }

  Status Run();
  // Everything before the first step: the run directory, the task, the checkpoint to resume.
  Result<std::optional<CheckpointReader>> OpenRun();
  void EpochStart(uint64_t units_before) override;
  bool StepDone(uint64_t units, double loss_sum, bool last) override;

 private:
  Status PrepareRunDir();
  Status PrepareFollowerDir();
  Status StartOver();
  Result<std::optional<CheckpointReader>> FindResume();
  Result<std::optional<CheckpointReader>> FindOwnResume();
  void WarnConditions(const CheckpointState& old) const;
  std::map<std::string, std::string> Conditions() const;
  void PrintHeader() const;
  Status RunEpochs();
  Status RunEpoch(uint64_t epoch, bool& done);
  Status Validate(uint64_t epoch, bool last, JsonObject& line, bool& stop);
  bool OutOfTime(double epoch_s) const;
  Status Checkpoint(uint64_t epoch, uint64_t step, bool best);
  bool StopRequested() const;
  void LogStep(uint64_t step, uint64_t units, double loss_sum);
  Status Finish();

  Task& task_;
  const RunSettings& s_;
  TrainOptions options_;
  DistGroup* group_;
  bool leader_;  // rank 0, or one process: writes checkpoints, metrics, summary, progress
  DataParallel* dp_ = nullptr;
  CheckpointStore store_;
  ProgressBar progress_;
  RunDirLock lock_;
  ThreadPlan plan_;
  std::unique_ptr<ThreadPlanHandle> threads_;
  std::string config_fp_, dataset_fp_;
  Clock::time_point start_ = Clock::now();
  uint64_t start_epoch_ = 0, start_step_ = 0;
  uint64_t epoch_ = 0, step_ = 0;  // the step being trained (errors)
  int64_t steps_run_ = 0;
  Status diverged_;
  double best_score_ = std::numeric_limits<double>::quiet_NaN();
  std::string best_name_;
  uint32_t since_best_ = 0;
  double lr_scale_ = 1;       // train.lr_decay applied so far
  uint32_t since_decay_ = 0;  // validations without a better score since the last decay
  std::string latest_;  // the last checkpoint this run wrote
  bool interrupted_ = false, early_stopped_ = false, out_of_time_ = false;
  bool holds_lock_ = false;  // this process took the run directory's lock
  bool resumed_ = false;     // this run goes on from a checkpoint
  double overhead_s_ = 0;  // the last epoch's validation and checkpoint seconds
  uint64_t units_ = 0, epochs_trained_ = 0;
  uint64_t epoch_units_ = 0;  // of the epoch being trained, skipped steps' included
  uint64_t next_within_ = 0;  // checkpoint_every below 1: the units of the next checkpoint
  bool within_due_ = false;   // StepDone stopped the epoch for a checkpoint within it
  std::string checkpoints_;  // this run's checkpoints as JSON objects, comma-separated
  double train_s_ = 0, checkpoint_s_ = 0, eval_s_ = 0;
  Clock::time_point step_start_ = Clock::now();
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> step_log_;
};

// A rank other than 0 works in a directory of its own (its tables) and writes no checkpoints.
Status Runner::PrepareFollowerDir() {
  SLUICE_ASSIGN_OR_RETURN(lock_, RunDirLock::Acquire(s_.run_dir));
  holds_lock_ = true;
  std::error_code ec;
  fs::remove_all(s_.run_dir + "/tables", ec);
  if (ec) return IoError("remove " + s_.run_dir + "/tables: " + ec.message());
  return Status::Ok();
}

Status Runner::PrepareRunDir() {
  if (!leader_) return PrepareFollowerDir();
  SLUICE_ASSIGN_OR_RETURN(lock_, RunDirLock::Acquire(s_.run_dir));
  holds_lock_ = true;
  std::error_code ec;
  fs::create_directories(store_.dir(), ec);
  if (ec) return IoError("create " + store_.dir() + ": " + ec.message());
  SLUICE_RETURN_IF_ERROR(store_.RemoveTemporaries());
  if (options_.overwrite) return StartOver();
  if (!options_.resume && !store_.Empty()) {
    return InvalidArgument("run directory " + s_.run_dir + " holds checkpoints of an earlier run "
                           "(latest " + store_.Latest().value() + "): pass --resume to continue it "
                           "or --overwrite to start over");
  }
  return Status::Ok();
}

// --overwrite: what an earlier run left (checkpoints, tables, metrics, summary, config) goes.
Status Runner::StartOver() {
  SLUICE_RETURN_IF_ERROR(store_.RemoveAll());
  std::error_code ec;
  for (const char* name : {"tables", "metrics.jsonl", "summary.txt", "summary.json", "config.yaml"}) {
    fs::remove_all(s_.run_dir + "/" + name, ec);
    if (ec) return IoError("--overwrite: remove " + s_.run_dir + "/" + name + ": " + ec.message());
  }
  fs::create_directories(store_.dir(), ec);
  if (ec) return IoError("create " + store_.dir() + ": " + ec.message());
  return Status::Ok();
}

// A run across processes: every rank resumes the checkpoint rank 0 resumes (or starts fresh
// with it); rank 0's refusal stops every rank with its reason.
Result<std::optional<CheckpointReader>> Runner::FindResume() {
  if (group_ == nullptr) return FindOwnResume();
  if (leader_) {
    Result<std::optional<CheckpointReader>> r = FindOwnResume();
    const std::string said = !r.ok() ? "!" + r.status().message()
                             : *r    ? fs::path((*r)->dir()).filename().string()
                                     : std::string();
    SLUICE_RETURN_IF_ERROR(group_->Share("resume", said).status());
    return r;
  }
  SLUICE_ASSIGN_OR_RETURN(const std::string name, group_->Share("resume", ""));
  if (name.starts_with("!")) return FailedPrecondition("rank 0 could not start: " + name.substr(1));
  if (name.empty()) return std::optional<CheckpointReader>();
  SLUICE_ASSIGN_OR_RETURN(CheckpointReader r, store_.Open(name));
  SLUICE_RETURN_IF_ERROR(CheckCheckpointFits(r, s_.task, config_fp_, dataset_fp_, s_.dataset, task_.ConfigYaml()));
  return std::optional<CheckpointReader>(std::move(r));
}

Result<std::optional<CheckpointReader>> Runner::FindOwnResume() {
  if (!options_.resume) return std::optional<CheckpointReader>();
  Result<std::string> latest = store_.Latest();
  if (!latest.ok()) {
    // Nothing was ever checkpointed: --resume starts the run. But folders that are not complete
    // checkpoints (no state.json) are someone's data: never train over them.
    if (std::string stray = store_.StrayEntry(); !stray.empty()) {
      return FailedPrecondition("--resume: " + store_.dir() + "/" + stray + " is not a complete "
                                "checkpoint (no state.json) and there is no other; move it away, or "
                                "start over with --overwrite");
    }
    std::printf("resume: %s; starting from the beginning\n", latest.status().message().c_str());
    return std::optional<CheckpointReader>();
  }
  SLUICE_ASSIGN_OR_RETURN(CheckpointReader r, store_.Open(*latest));
  SLUICE_RETURN_IF_ERROR(
      CheckCheckpointFits(r, s_.task, config_fp_, dataset_fp_, s_.dataset, task_.ConfigYaml()));
  return std::optional<CheckpointReader>(std::move(r));
}

std::map<std::string, std::string> Runner::Conditions() const {
  std::map<std::string, std::string> c = task_.Conditions();
  c["threads"] = ThreadsCondition(plan_);
  return c;
}

void Runner::WarnConditions(const CheckpointState& old) const {
  for (const auto& [key, value] : Conditions()) {
    auto it = old.conditions.find(key);
    if (it == old.conditions.end() || it->second == value) continue;
    std::printf("warning: resuming with %s %s where the checkpoint had %s: the run goes on, but it "
                "is no longer bitwise equal to an uninterrupted one\n",
                key.c_str(), value.c_str(), it->second.c_str());
  }
}

void Runner::PrintHeader() const {
  std::printf("%s\n  %s\n  memory: %s\n", task_.Describe().c_str(), plan_.ToString().c_str(),
              task_.MemoryPlan().c_str());
  std::fflush(stdout);
}

namespace {

// A dataset is read-only to training: a run directory inside it (or the dataset directory
// itself) would put tables and checkpoints among its files.
Status CheckRunDirOutsideDataset(const std::string& run_dir, const std::string& dataset) {
  if (run_dir.empty() || dataset.empty()) return Status::Ok();
  std::error_code ec;
  const fs::path run = fs::weakly_canonical(run_dir, ec);
  const fs::path data = fs::weakly_canonical(dataset, ec);
  if (ec) return Status::Ok();  // an unreadable dataset is reported where it is opened
  const auto [d, r] = std::mismatch(data.begin(), data.end(), run.begin(), run.end());
  if (d != data.end()) return Status::Ok();
  return InvalidArgument("run_dir " + run_dir + " is inside the dataset " + dataset +
                         ": a run writes tables and checkpoints into its run directory and a "
                         "dataset stays read-only; choose a folder outside it");
}

}  // namespace

Status Runner::Run() {
  SLUICE_RETURN_IF_ERROR(CheckRunDirOutsideDataset(s_.run_dir, s_.dataset));
  if (s_.lr_decay_restore && (s_.checkpoint_every < 0 || group_ != nullptr)) {
    return InvalidArgument(std::string("train.lr_decay_restore: ") +
                           (group_ != nullptr ? "runs in one process only (dist.world_size is above 1)"
                                              : "needs checkpoints to restore (checkpoint_every is -1)"));
  }
  // A run directory this run created holds nothing of value until the run is accepted: a
  // refusal (a damaged dataset, say) removes it rather than leave an empty skeleton behind.
  std::error_code ec;
  const bool existed = fs::exists(s_.run_dir, ec);
  Result<std::optional<CheckpointReader>> opened = OpenRun();
  if (!opened.ok()) {
    if (!existed && holds_lock_) {  // never another trainer's directory
      lock_ = RunDirLock();
      fs::remove_all(s_.run_dir, ec);
    }
    return opened.status();
  }
  std::optional<CheckpointReader>& resumed = *opened;
  SLUICE_RETURN_IF_ERROR(task_.PrepareTraining(resumed ? &*resumed : nullptr));
  task_.SetLearningRateScale(lr_scale_);  // a resumed run's decay so far
  if (resumed) WarnConditions(resumed->state());
  plan_.pipeline_threads = task_.PipelineThreads();
  PrintHeader();
  InterruptScope interrupts;
  SLUICE_RETURN_IF_ERROR(RunEpochs());
  return Finish();
}

Result<std::optional<CheckpointReader>> Runner::OpenRun() {
  SLUICE_RETURN_IF_ERROR(PrepareRunDir());
  plan_ = MakeThreadPlan(s_.threads, std::max(1, OnlineCores() / LocalRanks()));
  threads_ = ApplyThreadPlan(plan_);
  ApplyTorchThreads(plan_);
  if (group_ != nullptr) SLUICE_RETURN_IF_ERROR(task_.SetDistGroup(group_));
  SLUICE_RETURN_IF_ERROR(task_.Open(Task::Purpose::kTrain));
  dp_ = task_.data_parallel();
  if (dp_ != nullptr) {  // asked during a step, before StepDone counts it
    dp_->set_stop_probe([this] {
      return InterruptScope::Received() != 0 ||
             (options_.stop_after_steps >= 0 && steps_run_ + 1 >= options_.stop_after_steps);
    });
  }
  config_fp_ = task_.ConfigFingerprint();
  SLUICE_ASSIGN_OR_RETURN(dataset_fp_, DatasetFingerprint(s_.dataset));
  SLUICE_ASSIGN_OR_RETURN(std::optional<CheckpointReader> resumed, FindResume());
  resumed_ = resumed.has_value();
  if (resumed) {
    SLUICE_RETURN_IF_ERROR(task_.LoadState(*resumed));
    const CheckpointState& st = resumed->state();
    start_epoch_ = st.epoch, start_step_ = st.step;
    best_score_ = st.best_score, best_name_ = st.best_checkpoint, since_best_ = st.since_best;
    lr_scale_ = st.lr_scale, since_decay_ = st.since_decay;
  } else {
    std::error_code ec;  // a fresh run: no metrics or checkpoint pointers of an earlier one
    for (const char* name : {"metrics.jsonl", "checkpoints/latest", "checkpoints/best"}) {
      fs::remove(s_.run_dir + "/" + name, ec);
    }
  }
  // Written once the checkpoint (if any) is known to belong to this config: a refused resume
  // leaves the run directory as it was.
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(s_.run_dir + "/config.yaml", task_.ConfigYaml()));
  return resumed;
}

void Runner::EpochStart(uint64_t units_before) {
  progress_.BeginEpoch(epoch_, task_.EpochUnits(), units_before);
  step_start_ = Clock::now();
  epoch_units_ = units_before;
  next_within_ = 0;
  if (s_.checkpoint_every > 0 && s_.checkpoint_every < 1) {
    const uint64_t every = std::max<uint64_t>(
        1, static_cast<uint64_t>(s_.checkpoint_every * static_cast<double>(task_.EpochUnits())));
    next_within_ = (units_before / every + 1) * every;
  }
}

// One line per step (epoch, step, seconds since the previous step ended, units, mean loss),
// buffered and flushed at the epoch's end: for benchmarks that take per-step medians.
void Runner::LogStep(uint64_t step, uint64_t units, double loss_sum) {
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - step_start_).count();
  step_start_ = now;
  if (!s_.step_log) return;
  if (step_log_ == nullptr) {
    const std::string path = s_.run_dir + "/steps.tsv";
    const bool fresh = !fs::exists(path);
    step_log_.reset(std::fopen(path.c_str(), "a"));
    if (step_log_ == nullptr) return;  // a log is not worth failing a run for
    if (fresh) std::fputs("epoch\tstep\tseconds\tunits\tloss\n", step_log_.get());
  }
  std::fprintf(step_log_.get(), "%llu\t%llu\t%.6f\t%llu\t%.6g\n", static_cast<unsigned long long>(epoch_ + 1),
               static_cast<unsigned long long>(step), seconds, static_cast<unsigned long long>(units),
               loss_sum / std::max<double>(1.0, static_cast<double>(units)));
}

bool Runner::StepDone(uint64_t units, double loss_sum, bool last) {
  progress_.Step(units, loss_sum, last);
  CrashPoint("step");
  ++steps_run_;
  const uint64_t step = step_++;
  LogStep(step, units, loss_sum);
  if (!std::isfinite(loss_sum) && diverged_.ok()) {
    diverged_ = FailedPrecondition(
        "training diverged: the loss is " + std::string(std::isnan(loss_sum) ? "nan" : "infinite") +
        " at epoch " + std::to_string(epoch_ + 1) + ", step " + std::to_string(step) + " (" +
        (latest_.empty() ? "no checkpoint written by this run" : "last checkpoint " + latest_) +
        "); lower the learning rates or check the data for extreme values");
  }
  epoch_units_ += units;
  if (next_within_ > 0 && !last && epoch_units_ >= next_within_) within_due_ = true;
  return !diverged_.ok() || StopRequested() || within_due_;
}

bool Runner::StopRequested() const {
  // Training in virtual shards: every rank's wish travels with the step's exchange.
  if (dp_ != nullptr) return dp_->any_stop();
  return InterruptScope::Received() != 0 ||
         (options_.stop_after_steps >= 0 && steps_run_ >= options_.stop_after_steps);
}

Status Runner::RunEpochs() {
  for (uint64_t epoch = start_epoch_; epoch < static_cast<uint64_t>(s_.epochs); ++epoch) {
    bool done = false;
    SLUICE_RETURN_IF_ERROR(RunEpoch(epoch, done));
    if (done) break;
  }
  // A run that trained nothing (no epochs left) still leaves a checkpoint to evaluate.
  // (Across processes every rank decides alike, without looking at rank 0's store, which rank 0
  // may be writing: nothing was resumed and nothing written.)
  const bool none = group_ != nullptr ? latest_.empty() && !resumed_ : store_.Empty();
  if (!interrupted_ && none) return Checkpoint(start_epoch_, start_step_, false);
  return Status::Ok();
}

Status Runner::RunEpoch(uint64_t epoch, bool& done) {
  uint64_t first = epoch == start_epoch_ ? start_step_ : 0;
  epoch_ = epoch, step_ = first;
  const auto epoch_start = Clock::now();
  const double checkpoint_before = checkpoint_s_;
  progress_.BeginEpoch(epoch, task_.EpochUnits(), 0);
  uint64_t units = 0;
  double loss_sum = 0;
  EpochOutcome out;
  // checkpoint_every below 1: the epoch stops at each checkpoint within it and goes on from
  // the step after, as a resumed run would.
  for (;;) {
    within_due_ = false;
    SLUICE_ASSIGN_OR_RETURN(out, task_.TrainEpoch(epoch, first, *this));
    SLUICE_RETURN_IF_ERROR(diverged_);
    units += progress_.trained(), loss_sum += progress_.loss_sum();
    if (!out.stopped || !within_due_ || StopRequested()) break;
    SLUICE_RETURN_IF_ERROR(Checkpoint(epoch, out.next_step, false));
    first = out.next_step;
  }
  const double epoch_s = SecondsSince(epoch_start) - (checkpoint_s_ - checkpoint_before);
  train_s_ += epoch_s;
  if (step_log_) std::fflush(step_log_.get());
  units_ += units;
  if (out.stopped) {
    SLUICE_RETURN_IF_ERROR(Checkpoint(epoch, out.next_step, false));
    std::printf("interrupted in epoch %llu: checkpoint %s written; `--resume` continues\n",
                static_cast<unsigned long long>(epoch + 1), latest_.c_str());
    interrupted_ = done = true;
    return Status::Ok();
  }
  ++epochs_trained_;
  const double loss = loss_sum / std::max<double>(1.0, static_cast<double>(units));
  const double rate = static_cast<double>(units) / std::max(epoch_s, 1e-9);
  JsonObject line;
  line.Add("epoch", epoch + 1).Add("loss", loss).Add("epoch_s", epoch_s);
  line.Add(std::string(task_.unit()) + "_per_s", rate);
  std::printf("epoch %llu: loss %.4f, %.2f s, %s %s/s", static_cast<unsigned long long>(epoch + 1),
              loss, epoch_s, FormatCount(rate).c_str(), task_.unit());
  const bool final_epoch = epoch + 1 == static_cast<uint64_t>(s_.epochs);
  const bool out_of_time = !final_epoch && OutOfTime(epoch_s);
  const bool last = final_epoch || out_of_time;
  const double overhead_before = eval_s_ + checkpoint_s_;
  bool stop = false;
  SLUICE_RETURN_IF_ERROR(Validate(epoch, last, line, stop));
  std::printf("\n");
  std::fflush(stdout);
  ReleaseFreeHeap();  // once an epoch: what the epoch freed goes back, so RSS shows what is live
  line.Add("rss_bytes", CurrentRssBytes());  // after validation: what the soak test watches
  if (leader_) SLUICE_RETURN_IF_ERROR(AppendLine(s_.run_dir + "/metrics.jsonl", line.str()));
  const bool more = !last && !stop;
  const bool interrupt = more && StopRequested();
  const bool within = s_.checkpoint_every > 0 && s_.checkpoint_every < 1;  // and at every end
  const bool cadence = within || (s_.checkpoint_every >= 1 &&
                                  (epoch + 1) % static_cast<uint64_t>(s_.checkpoint_every) == 0);
  if (latest_ != CheckpointName(epoch + 1, 0) && (!more || interrupt || cadence)) {
    SLUICE_RETURN_IF_ERROR(Checkpoint(epoch + 1, 0, false));
  }
  overhead_s_ = eval_s_ + checkpoint_s_ - overhead_before;
  if (stop) {
    std::printf("early stop: %d validations without a better score\n", s_.patience);
    early_stopped_ = done = true;
  } else if (out_of_time) {
    std::printf("time budget: %.1f of train.max_minutes %g used; another epoch would end past it\n",
                SecondsSince(start_) / 60.0, s_.max_minutes);
    out_of_time_ = done = true;
  } else if (interrupt) {
    std::printf("interrupted after epoch %llu: checkpoint %s written; `--resume` continues\n",
                static_cast<unsigned long long>(epoch + 1), latest_.c_str());
    interrupted_ = done = true;
  }
  return Status::Ok();
}

// Whether another epoch like the one that took `epoch_s` (plus the last validation and
// checkpoint, twice: this epoch's, still to come, and the next one's) would end past
// train.max_minutes of wall time since the run started.
bool Runner::OutOfTime(double epoch_s) const {
  if (s_.max_minutes <= 0) return false;
  return SecondsSince(start_) + epoch_s + 2 * overhead_s_ > s_.max_minutes * 60.0;
}

Status Runner::Validate(uint64_t epoch, bool last, JsonObject& line, bool& stop) {
  const std::string split = task_.ValidationSplit();
  if (s_.eval_every <= 0 || split.empty()) return Status::Ok();
  // Every eval.every epochs, after each of the first eval.first_epochs, and after the last.
  const bool due = (epoch + 1) % s_.eval_every == 0 ||
                   epoch < static_cast<uint64_t>(s_.eval_first_epochs) || last;
  if (!due) return Status::Ok();
  const auto start = Clock::now();
  SLUICE_ASSIGN_OR_RETURN(Metrics m, task_.Evaluate(split));
  eval_s_ += SecondsSince(start);
  line.AddRaw(split, m.json);
  std::printf(", %s %s", split.c_str(), m.text.c_str());
  // SLUICE_TEST_STALL (tests of train.lr_decay): no validation after the first is better.
  static const bool stall = std::getenv("SLUICE_TEST_STALL") != nullptr;
  if (Better(m.score, best_score_) && !(stall && !std::isnan(best_score_))) {
    best_score_ = m.score;
    since_best_ = since_decay_ = 0;
    return Checkpoint(epoch + 1, 0, /*best=*/true);
  }
  stop = s_.patience > 0 && ++since_best_ >= static_cast<uint32_t>(s_.patience);
  if (!stop && !last && s_.lr_decay < 1 &&
      ++since_decay_ >= static_cast<uint32_t>(s_.lr_decay_patience)) {
    since_decay_ = 0;
    lr_scale_ *= s_.lr_decay;
    if (s_.lr_decay_restore && !best_name_.empty()) {  // back to the best model first
      SLUICE_ASSIGN_OR_RETURN(CheckpointReader best, store_.Open(best_name_));
      SLUICE_RETURN_IF_ERROR(task_.RestoreTraining(best).WithContext("train.lr_decay_restore"));
      std::printf("; restored %s", best_name_.c_str());
      line.Add("restored", best_name_);
    }
    task_.SetLearningRateScale(lr_scale_);
    std::printf("; learning rates now x%.4g of the config's", lr_scale_);
    line.Add("lr_scale", lr_scale_);
  }
  return Status::Ok();
}

Status Runner::Checkpoint(uint64_t epoch, uint64_t step, bool best) {
  if (s_.checkpoint_every < 0) return Status::Ok();  // never (benchmarks)
  const auto start = Clock::now();
  const std::string name = CheckpointName(epoch, step);
  if (!leader_) {  // rank 0 writes the run's checkpoint; this rank its shard of the tables in it
    if (best) best_name_ = name;
    latest_ = name;
    SLUICE_RETURN_IF_ERROR(task_.SaveShard(store_.dir() + "/" + name + ".tmp"));
    checkpoint_s_ += SecondsSince(start);
    return Status::Ok();
  }
  const uint64_t written_before = store_.copy_stats().bytes_written;
  if (best) best_name_ = name;
  CheckpointState st;
  st.task = s_.task;
  st.epoch = epoch, st.step = step, st.seed = s_.seed;
  st.config_fingerprint = config_fp_, st.dataset_fingerprint = dataset_fp_;
  st.conditions = Conditions();
  st.best_score = best_score_, st.best_checkpoint = best_name_, st.since_best = since_best_;
  st.lr_scale = lr_scale_, st.since_decay = since_decay_;
  SLUICE_RETURN_IF_ERROR(store_.Write(
      name, st, [this](CheckpointWriter& w) { return task_.Save(w); }, best));
  latest_ = name;
  const double seconds = SecondsSince(start);
  checkpoint_s_ += seconds;
  const uint64_t written = store_.copy_stats().bytes_written - written_before;
  JsonObject each;
  each.Add("name", name).Add("s", seconds).Add("table_bytes_written", written);
  checkpoints_ += (checkpoints_.empty() ? "" : ", ") + each.str();
  if (step > 0) {  // within an epoch: its line would otherwise say nothing until the epoch ends
    std::printf("checkpoint %s: %.2f s, %s of tables written\n", name.c_str(), seconds,
                FormatBytes(written).c_str());
    std::fflush(stdout);
  }
  return Status::Ok();
}

Status Runner::Finish() {
  if (!leader_) {
    // Its memory against its own plan (each rank keeps its shard within its own storage.budget).
    const uint64_t predicted = task_.PredictedPeakBytes();
    const std::string memory = ", peak RSS " + FormatBytes(PeakRssBytes()) +
                               (predicted ? " (its plan predicted " + FormatBytes(predicted) + ")" : "");
    std::printf("rank %d: trained %llu %s in %s s%s; rank 0 wrote the checkpoints, metrics and summary\n",
                group_->rank(), static_cast<unsigned long long>(units_), task_.unit(),
                FormatSeconds(train_s_).c_str(), memory.c_str());
    if (interrupted_) return Aborted("interrupted: rank 0 wrote checkpoint " + latest_);
    return Status::Ok();
  }
  RunSummary sum;
  const std::string unit = task_.unit();
  const double rate = static_cast<double>(units_) / std::max(train_s_, 1e-9);
  sum.Line("run " + s_.run_dir);
  sum.Line("trained " + std::to_string(units_) + " " + unit + " in " + FormatSeconds(train_s_) +
           " s (" + FormatCount(rate) + " " + unit + "/s)");
  task_.Summarize(sum);
  sum.Line("checkpoints " + FormatSeconds(checkpoint_s_) + " s" + CopySummary(store_.copy_stats()) +
           ", evaluation " + FormatSeconds(eval_s_) + " s, wall " + FormatSeconds(SecondsSince(start_)) + " s");
  const CheckpointCopyStats& copies = store_.copy_stats();
  sum.Set("checkpoints", "table_copies_full", copies.full);
  sum.Set("checkpoints", "table_copies_incremental", copies.incremental);
  sum.Set("checkpoints", "table_bytes", copies.table_bytes);
  sum.Set("checkpoints", "table_bytes_written", copies.bytes_written);
  sum.SetRaw("checkpoints", "each", "[" + checkpoints_ + "]");
  if (!best_name_.empty()) {
    char score[32];
    std::snprintf(score, sizeof score, "%.4f", best_score_);
    sum.Line("best checkpoint " + best_name_ + " (validation score " + score + ")" +
             (early_stopped_ ? "; stopped early" : "") + (out_of_time_ ? "; stopped by train.max_minutes" : ""));
    // "epoch-E-step-S": the epochs trained when the best model was saved.
    const uint64_t best_epoch = std::stoull(best_name_.substr(best_name_.find('-') + 1));
    sum.Set("", "best_epoch", best_epoch);
  }
  sum.Line(plan_.ToString());
  const uint64_t predicted = task_.PredictedPeakBytes();
  sum.Line("memory: " + task_.MemorySummary() + ", peak RSS " + FormatBytes(PeakRssBytes()) +
           (predicted ? " (the plan predicted " + FormatBytes(predicted) + ")" : "") + "; malloc " + AllocatorName());
  sum.Set("", "predicted_peak_bytes", predicted), sum.Set("", "allocator", AllocatorName());
  sum.Set("", "task", s_.task), sum.Set("", "run_dir", s_.run_dir), sum.Set("", "unit", unit);
  sum.Set("", "units_trained", units_), sum.Set("", "epochs_trained", epochs_trained_);
  sum.Set("", "train_s", train_s_), sum.Set("", "units_per_s", rate);
  sum.Set("", "checkpoint_s", checkpoint_s_), sum.Set("", "eval_s", eval_s_);
  sum.Set("", "wall_s", SecondsSince(start_)), sum.Set("", "peak_rss_bytes", PeakRssBytes());
  sum.Set("", "interrupted", interrupted_), sum.Set("", "early_stopped", early_stopped_);
  sum.Set("", "out_of_time", out_of_time_);
  sum.Set("", "latest_checkpoint", latest_), sum.Set("", "best_checkpoint", best_name_);
  sum.Set("", "best_score", best_score_), sum.Set("", "lr_scale", lr_scale_);
  sum.Set("threads", "cores", plan_.cores), sum.Set("threads", "total", plan_.total);
  sum.Set("threads", "compute", plan_.compute_threads), sum.Set("threads", "blas", plan_.blas_threads);
  sum.Set("threads", "tbb", plan_.tbb_threads);
  // How libtorch's OpenMP workers wait (the executable makes them sleep unless told otherwise).
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  sum.Set("threads", "omp_wait_policy", std::string(policy != nullptr ? policy : "unset (spin, then sleep)"));
  std::printf("%s", sum.Text().c_str());
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(s_.run_dir + "/summary.txt", sum.Text()));
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(s_.run_dir + "/summary.json", sum.Json()));
  if (interrupted_) {
    return Aborted("interrupted: checkpoint " + latest_ + " written in " + s_.run_dir +
                   "; `sluice train ... --resume` continues");
  }
  return Status::Ok();
}

}  // namespace

// A run across processes: the ranks join, agree on the config and the dataset, and train
// data-parallel (train/data_parallel.h), rank 0 writing the checkpoints every rank resumes from.
Status TrainDistributed(Task& task, const DistPlace& place, const TrainOptions& options) {
  const RunSettings& s = task.settings();
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<DistGroup> group, DistGroup::Join(place, s.dist));
  std::printf("rank %d of %d joined at %s (%s)\n", place.rank, place.world_size, place.master().c_str(),
              group->Transport().c_str());
  std::fflush(stdout);
  SLUICE_RETURN_IF_ERROR(group->Agree("config", FingerprintLines(task.ConfigYaml()) +
                                                    "dist.prefetch_rows: " + std::string(EnumName(s.dist.prefetch_rows)) +
                                                    "\nfingerprint: " + task.ConfigFingerprint() + "\n"));
  SLUICE_ASSIGN_OR_RETURN(const std::string dataset_fp, DatasetFingerprint(s.dataset));
  SLUICE_RETURN_IF_ERROR(group->Agree("dataset", "manifest fingerprint: " + dataset_fp + "\n"));
  SLUICE_RETURN_IF_ERROR(group->Barrier());
  std::error_code ec;
  const std::string own = fs::absolute(s.run_dir, ec).lexically_normal().string();
  SLUICE_ASSIGN_OR_RETURN(const std::string leader_dir, group->Share("run_dir", own));
  Runner runner(task, options, group.get(), leader_dir);
  const Status ran = runner.Run();
  // No rank leaves while another still talks to it (a send completes only once its peer's
  // side has answered). A failed rank leaves at once: the others name it.
  if (ran.ok() || ran.code() == StatusCode::kAborted) {
    const Status together = group->Barrier();
    if (ran.ok()) return together;
  }
  return ran;
}

Status Train(Task& task, const TrainOptions& options) {
  if (options.resume && options.overwrite) {
    return InvalidArgument("train: --resume and --overwrite exclude each other");
  }
  SLUICE_ASSIGN_OR_RETURN(const DistPlace place,
                          ResolveDistPlace(options.world_size, options.rank, options.master,
                                           [](const char* name) { return std::getenv(name); }));
  if (place.distributed()) return TrainDistributed(task, place, options);
  Runner runner(task, options);
  return runner.Run();
}

int InterruptExitCode() {
  const int sig = InterruptScope::Received();
  return ExitCodeForSignal(sig != 0 ? sig : SIGINT);
}

Result<std::string> OpenTrained(Task& task, const std::string& which) {
  const RunSettings& s = task.settings();
  CheckpointStore store(s.run_dir);
  SLUICE_ASSIGN_OR_RETURN(std::string name, store.Resolve(which));
  SLUICE_RETURN_IF_ERROR(task.Open(Task::Purpose::kRead));
  SLUICE_ASSIGN_OR_RETURN(CheckpointReader r, store.Open(name));
  SLUICE_ASSIGN_OR_RETURN(std::string dataset_fp, DatasetFingerprint(s.dataset));
  SLUICE_RETURN_IF_ERROR(CheckCheckpointFits(r, s.task, task.ConfigFingerprint(), dataset_fp,
                                             s.dataset, task.ConfigYaml()));
  SLUICE_RETURN_IF_ERROR(task.LoadState(r));
  SLUICE_RETURN_IF_ERROR(task.PrepareReading(r));
  return name;
}

}  // namespace sluice
