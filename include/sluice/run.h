#pragma once
// Public API. A training run, built from a YAML config exactly as `sluice train CONFIG` builds
// it (the executable is this class's first user): the dataset, storage (in memory or out of
// core), the cache and its planner, the sampler, the thread plan and the memory plan from one
// budget all come from the config (docs/configuration.md lists every key). A user's model
// replaces the task's built-in one through SetModel (sluice/model.h says what a model gets); a
// user's encoder goes in front of it through SetEncoder.
//
//   auto run = sluice::Run::FromConfig("my.yaml", {"train.epochs=3"});
//   if (!run.ok()) ...;                       // one line: what, where, why
//   run->SetModel("dcn", [](const sluice::ModelSpec& s) { return std::make_shared<Dcn>(s); });
//   sluice::Status st = run->Train();         // checkpoints, metrics.jsonl, summary.json
//
// Reading a trained run: Run::Open(RUN_DIR), then Evaluate / Export / Predict, each at a
// checkpoint ("default": the best by validation when there is one, else the latest). A run
// trained with a user's model is opened with the same SetModel first.
//
// Errors: every call returns a Status or Result and never throws; an exception thrown by a
// user's model or factory is returned as a Status naming the step. Bad input (malformed config,
// unknown key, missing or truncated dataset, wrong dimension) is one line and changes nothing
// on disk. Ctrl-C during Train finishes the step, writes a checkpoint and returns Aborted
// (InterruptExitCode() is the exit status the executable uses).
//
// Process-wide: the first FromConfig or Open tunes the malloc the process runs on
// (train/allocator.h). On jemalloc (linked, as `sluice` is, or preloaded) free pages stay with
// the process between steps unless MALLOC_CONF is set. On glibc it raises the mmap threshold to
// 512 MiB and the trim threshold to 1 GiB (mallopt), so the multi-megabyte tensors of every step
// stay in the heap instead of being mapped, zeroed and unmapped each time (8% of a DLRM run),
// and limits glibc to one malloc arena, so the resident set does not creep up epoch by epoch;
// glibc's MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ and MALLOC_ARENA_MAX in the
// environment win. Train hands the allocator's free pages back to the system after every epoch.
// libtorch's OpenMP workers spin after each parallel region unless OMP_WAIT_POLICY says
// otherwise, and libgomp reads it only when it is loaded: a program linking sluice should start
// with OMP_WAIT_POLICY=passive in its environment (`sluice train` restarts itself with it; on 2
// cores a node-classification step was 10-14% faster, docs/benchmarks.md).
//
// Ownership: a Run owns its task, its storage and the model; it is movable, not copyable.
// Thread safety: one thread uses a Run at a time; Train runs its pipeline on threads of its own
// and applies the config's thread plan (threads.*) for the run's duration. Train locks the
// run directory: a second trainer of the same directory, in any process, is refused.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/model_factory.h"
#include "sluice/status.h"

namespace sluice {

class Task;  // the engine's task (link prediction, recommendation, node classification)
class ThreadPlanHandle;

struct TrainOptions {
  bool resume = false;            // continue from the run directory's latest checkpoint
  bool overwrite = false;         // discard the run directory's checkpoints and start over
  int64_t stop_after_steps = -1;  // tests: stop as if interrupted after this many steps
  // Runs across processes (docs/distributed.md): this process's rank, the world size and the
  // master's ADDR[:PORT]; unset (0, -1, ""): from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
  // (as torchrun sets them), else one process.
  int world_size = 0;
  int rank = -1;
  std::string master;
};

// One evaluation's result.
struct Metrics {
  double score = 0;  // higher is better (MRR, AUC, accuracy); picks the best checkpoint
  std::string text;  // one line: "MRR 0.2534 Hits@1 ..."
  std::string json;  // one JSON object
};

struct PredictRequest {
  std::string head, relation;  // link prediction: a head and relation, original ids or names
  std::string split = "test";  // recommendation and node classification: the split to score
  uint64_t k = 10;             // how many tails or samples
};

class Run {
 public:
  // A run from a YAML config file plus overrides ("train.epochs=3", as `--set` takes them).
  // The config's `task` key picks the workload (link_prediction by default).
  static Result<Run> FromConfig(const std::string& config_path,
                                const std::vector<std::string>& overrides = {});
  // A trained run directory (its config.yaml), for Evaluate, Export and Predict. A run trained
  // in virtual shards is read by this one process: its storage.cache_rows (one rank's) is
  // ignored and the cache sized from storage.budget.
  static Result<Run> Open(const std::string& run_dir);

  Run(Run&&) noexcept;
  Run& operator=(Run&&) noexcept;
  ~Run();

  // The workload ("link_prediction", "recommendation", "node_classification").
  const std::string& task() const;
  // The run directory (the config's run_dir).
  const std::string& run_dir() const;
  // The effective config as YAML (what config.yaml of the run directory holds).
  std::string ConfigYaml() const;

  // Replaces the task's built-in model (link prediction: the decoder and its relations) by
  // `factory`'s. Call before Train or the first read. `name` joins the config fingerprint: a
  // checkpoint resumes and opens only with the model of the same name.
  Status SetModel(const std::string& name, ModelFactory factory);
  // Puts `factory`'s encoder in front of the task's built-in model (recommendation and node
  // classification; sluice/model.h, Encoder), or in front of the SetModel model. Call before
  // Train or the first read; `name` joins the config fingerprint as a model's does.
  Status SetEncoder(const std::string& name, EncoderFactory factory);

  // Trains as the config says (a FromConfig run; once).
  Status Train(const TrainOptions& options = {});

  // An Open run's checkpoint: the first of these calls opens and verifies it (CRC-32 of every
  // file, the config and dataset fingerprints); later calls must name the same checkpoint.
  Result<Metrics> Evaluate(const std::string& split, const std::string& checkpoint = "default");
  // Writes the embeddings (.npy with the original-id maps) into `out_dir`, which must not
  // exist; it appears complete or not at all (written under a temporary name, then renamed).
  Status Export(const std::string& out_dir, const std::string& checkpoint = "default");
  // Link prediction: the k best tails; recommendation: click probabilities of a split's first
  // k samples; node classification: class predictions. Text, one line per result.
  Result<std::string> Predict(const PredictRequest& request,
                              const std::string& checkpoint = "default");
  // The checkpoint an Open run reads ("" before the first read).
  const std::string& checkpoint() const { return opened_; }

 private:
  Run(std::string task, std::unique_ptr<Task> impl, bool trained);
  Status OpenCheckpoint(const std::string& checkpoint);

  std::string task_name_;
  std::unique_ptr<Task> impl_;
  std::unique_ptr<ThreadPlanHandle> threads_;
  bool read_only_ = false;  // from Open
  bool trained_ = false;    // Train ran (it runs once)
  std::string opened_;      // the checkpoint opened for reading
};

// Every task's config keys (type, default, what each does) as a Markdown document: what
// docs/configuration.md holds.
std::string ConfigReference();

// The exit status for an Aborted Train: 130 after SIGINT, 143 after SIGTERM.
int InterruptExitCode();

}  // namespace sluice
