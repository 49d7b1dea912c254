#pragma once
// The task interface: what a workload (link prediction, DLRM, ...) gives the runner, which owns
// everything else about a run: the run directory and its lock, the checkpoint store and the
// resume rule, the epoch loop, validation cadence, the best checkpoint and early stopping,
// Ctrl-C, progress, metrics.jsonl and the summary (train/runner.h).
//
// Lifecycle, training:  Open(kTrain) -> [LoadState(resumed)] -> PrepareTraining(resumed?)
//                       -> TrainEpoch ... Evaluate ... Save ... -> Summarize
// Lifecycle, reading:   Open(kRead) -> LoadState(checkpoint) -> PrepareReading(checkpoint)
//                       -> Evaluate | Export | Predict
// A task is used from one thread (its pipeline's threads are its own business).

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "sluice/model_factory.h"
#include "sluice/run.h"
#include "common/thread_plan.h"
#include "train/checkpoint_store.h"
#include "train/run_settings.h"
#include "train/run_summary.h"

namespace sluice {

class DataParallel;
class DistGroup;

// Metrics, PredictRequest and TrainOptions are public types (sluice/run.h).

// The runner's side of a training epoch; the task calls it once per step.
class StepSink {
 public:
  virtual ~StepSink() = default;
  // Before the first step: how many units the skipped steps of a resumed epoch held.
  virtual void EpochStart(uint64_t units_before) = 0;
  // After a step's updates are in place: the units (edges, samples) it trained, their summed
  // loss, and whether it was the epoch's last step. Returns true when training must stop after
  // this step (Ctrl-C, SIGTERM, a non-finite loss, the tests' stop hook): the task then stops
  // its pipeline (tables consistent, ready to Save) and returns.
  virtual bool StepDone(uint64_t units, double loss_sum, bool last) = 0;
};

struct EpochOutcome {
  bool stopped = false;    // left before the epoch's end (StepDone returned true)
  uint64_t next_step = 0;  // when stopped: the first step not trained
};

class Task {
 public:
  enum class Purpose { kTrain, kRead };
  virtual ~Task() = default;

  virtual const RunSettings& settings() const = 0;
  // Replaces the task's built-in model by the factory's (before Open); `name` joins the config
  // fingerprint. Tasks that take no user's model yet refuse.
  virtual Status SetModelFactory(const std::string& /*name*/, ModelFactory /*factory*/) {
    return FailedPrecondition("task " + settings().task + " does not take a user's model yet "
                              "(recommendation and node classification do)");
  }
  // Puts a user's encoder in front of the task's model (before Open); `name` joins the config
  // fingerprint. Tasks that take no encoder refuse.
  virtual Status SetEncoderFactory(const std::string& /*name*/, EncoderFactory /*factory*/) {
    return FailedPrecondition("task " + settings().task + " does not take an encoder (recommendation and "
                              "node classification do; link prediction takes a user's decoder)");
  }
  // Trains data-parallel across the processes of `group` (train/data_parallel.h; before Open).
  // Tasks that do not train data-parallel yet refuse.
  virtual Status SetDistGroup(DistGroup* /*group*/) {
    return FailedPrecondition("task " + settings().task + " does not train across processes yet "
                              "(recommendation and node classification do; docs/distributed.md)");
  }
  // The task's data-parallel exchange when it trains in virtual shards (after Open), else null.
  virtual DataParallel* data_parallel() { return nullptr; }
  // A rank other than 0's part of a checkpoint rank 0 writes (called where rank 0 calls Save):
  // its files go into `checkpoint_dir`, the checkpoint's temporary directory, which rank 0
  // creates before the ranks' first collective in Save.
  virtual Status SaveShard(const std::string& /*checkpoint_dir*/) { return Status::Ok(); }
  // What a step trains, plural: "edges", "samples" (progress, metrics and summary say it).
  virtual const char* unit() const = 0;
  // The effective config as YAML (config.yaml) and its fingerprint (train/fingerprint.h).
  virtual std::string ConfigYaml() = 0;
  virtual std::string ConfigFingerprint() = 0;

  // Opens the dataset and checks the config against it. Changes nothing on disk.
  virtual Status Open(Purpose purpose) = 0;
  // Loads a verified checkpoint's dense state (parameters, optimizer state) and checks that its
  // tables fit this config. Changes nothing on disk, so a refused resume leaves the run as it was.
  virtual Status LoadState(const CheckpointReader& checkpoint) = 0;
  // The run directory's tables for training: from their initial values, or (resumed != null)
  // restored from the checkpoint LoadState read; then storage, cache and memory plan.
  virtual Status PrepareTraining(const CheckpointReader* resumed) = 0;
  // Read-only storage over a checkpoint's tables (eval, export, predict). Never writes a row.
  virtual Status PrepareReading(const CheckpointReader& checkpoint) = 0;
  // Between epochs of a training run: the model, optimizer state and tables become the
  // checkpoint's (train.lr_decay_restore); the learning rates are set again afterwards.
  virtual Status RestoreTraining(const CheckpointReader& checkpoint) {
    return FailedPrecondition(checkpoint.dir() + ": this task cannot restore a checkpoint during a run");
  }

  // Settings outside the config fingerprint that shape the trajectory (after PrepareTraining),
  // e.g. the resident partition count; a resume with other values is warned about.
  virtual std::map<std::string, std::string> Conditions() const { return {}; }
  // The first line printed when training starts, and the memory plan's line.
  virtual std::string Describe() const = 0;
  virtual std::string MemoryPlan() const = 0;
  // Threads the task's pipeline runs besides compute (after PrepareTraining; the thread plan).
  virtual int PipelineThreads() const = 0;
  // Units (edges, samples) of one epoch, for the progress bar.
  virtual uint64_t EpochUnits() const = 0;

  // Every learning rate of the run (rows, dense parameters) is `scale` times the config's from
  // the next step on (train.lr_decay). Called before training starts and on each decay.
  virtual void SetLearningRateScale(double scale) = 0;
  // Trains epoch `epoch` from step `first_step` (non-zero when resuming mid-epoch).
  virtual Result<EpochOutcome> TrainEpoch(uint64_t epoch, uint64_t first_step, StepSink& sink) = 0;
  // The split validated during training; "" when the dataset has none.
  virtual std::string ValidationSplit() const = 0;
  // Evaluates the current model on `split` (during training: the live tables).
  virtual Result<Metrics> Evaluate(const std::string& split) = 0;
  // Writes the model into a checkpoint: tables brought up to date first, then their files and
  // the dense state. The pipeline is stopped when this is called.
  virtual Status Save(CheckpointWriter& writer) = 0;

  // The task's part of the run summary: its stages, cache, memory (summary.txt and .json).
  virtual void Summarize(RunSummary& summary) const = 0;
  // The memory part of the summary's last line ("peak RSS" is appended by the runner).
  virtual std::string MemorySummary() const = 0;
  // What the memory plan predicts the process will peak at (0: no prediction); the summary
  // prints it beside the measured peak.
  virtual uint64_t PredictedPeakBytes() const { return 0; }

  // Writes the model's embeddings (.npy with the original-id maps) into `dir`, which exists
  // and is empty (the caller renames it into place).
  virtual Status Export(const std::string& dir) = 0;
  virtual Result<std::string> Predict(const PredictRequest& request) = 0;
};

}  // namespace sluice
