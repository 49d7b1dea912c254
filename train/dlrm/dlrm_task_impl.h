#pragma once
// The DLRM task's class, shared by its two source files (dlrm_task.cc: set-up, training,
// evaluation; dlrm_task_io.cc: checkpoints, export, summary). Not a public header.

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/row_cache.h"
#include "common/aligned_buffer.h"
#include "prefetch/lookahead_choice.h"
#include "prefetch/memory_plan.h"
#include "prefetch/record_source.h"
#include "prefetch/row_backings.h"
#include "prefetch/row_pipeline.h"
#include "prefetch/row_prefetcher.h"
#include "storage/dataset.h"
#include "storage/file.h"
#include "storage/kv_table.h"
#include "storage/row_file.h"
#include "train/dlrm/dlrm_config.h"
#include "train/dlrm/dlrm_metrics.h"
#include "train/dlrm/dlrm_model.h"
#include "train/dlrm/dlrm_tables.h"
#include "train/accelerator.h"
#include "train/data_parallel.h"
#include "train/device_rows.h"
#include "train/model_step.h"
#include "train/sharded_rows.h"
#include "train/task.h"

namespace sluice {

class DlrmTask : public Task {
 public:
  explicit DlrmTask(DlrmConfig config);

  const RunSettings& settings() const override { return settings_; }
  const char* unit() const override { return "samples"; }
  std::string ConfigYaml() override;
  std::string ConfigFingerprint() override;
  Status Open(Purpose purpose) override;
  Status LoadState(const CheckpointReader& checkpoint) override;
  Status PrepareTraining(const CheckpointReader* resumed) override;
  Status PrepareReading(const CheckpointReader& checkpoint) override;
  std::string Describe() const override;
  std::string MemoryPlan() const override { return memory_plan_; }
  uint64_t EpochUnits() const override;
  // The sampler stage and the row prefetcher (and RocksDB's background thread).
  int PipelineThreads() const override { return rocksdb_ ? 3 : 2; }
  void SetLearningRateScale(double scale) override;
  Result<EpochOutcome> TrainEpoch(uint64_t epoch, uint64_t first_step, StepSink& sink) override;
  std::string ValidationSplit() const override;
  Result<Metrics> Evaluate(const std::string& split) override;
  Status Save(CheckpointWriter& writer) override;
  void Summarize(RunSummary& summary) const override;
  uint64_t PredictedPeakBytes() const override { return plan_.predicted_bytes; }
  std::string MemorySummary() const override { return memory_plan_; }
  Status Export(const std::string& dir) override;
  Result<std::string> Predict(const PredictRequest& request) override;
  Status SetModelFactory(const std::string& name, ModelFactory factory) override;
  Status SetEncoderFactory(const std::string& name, EncoderFactory factory) override;
  Status SetDistGroup(DistGroup* group) override {
    group_ = group;
    return Status::Ok();
  }
  DataParallel* data_parallel() override { return dp_.get(); }

 private:
  // The model: the factory's (Run::SetModel) or the built-in DLRM network.
  Status BuildModel();
  struct TimeSplit {
    double wait_s = 0, gather_s = 0, compute_s = 0, update_s = 0;
  };
  uint64_t NumSamples(const std::string& split) const;
  uint64_t StepsPerEpoch() const;
  // The checkpoint file (or directory) holding the tables for this storage.
  std::string TableFileName() const;
  RowInit Init() const;
  // Storage for training (fresh: tables from their initial values) or reading (rows_from: a
  // checkpoint directory whose tables are read, never written).
  Status SetUpStorage(bool fresh, const std::string& rows_from);
  Status SetUpInMemory(const std::string& rows_from);
  Result<RowPlanInput> PlanInput();
  Status OpenBacking(bool fresh, const std::string& rows_from);
  // storage.planner: auto: the cost model's choice of planner and read-ahead, written into `in`
  // (prefetch/lookahead_choice.h); creates the row file it probes.
  Status ChoosePlanner(bool fresh, const std::string& rows_from, RowPlanInput& in);
  static constexpr uint32_t kShortestWindow = 2;  // the oracle's, storage.window 0
  // storage.window 0: the oracle's window from the budget and the first steps (ChooseWindow in
  // prefetch/lookahead_choice.h); sets in.window.
  Status SizeWindow(RowPlanInput& in);
  // io.queue_depth 0: the io rings' depth from a probe of the row file at depths of 4 up to what
  // 2% of the budget stages (ChooseQueueDepth, storage/disk_probe.h); creates the row file.
  Status SizeQueueDepth(bool fresh, const std::string& rows_from);
  // The first steps' distinct rows, for the cost model.
  // (Those in the 1-in-sample_every sample of rows: prefetch/lookahead_choice.h.)
  Result<std::vector<std::vector<RowKey>>> FirstStepsRows(uint64_t steps, uint32_t sample_every);
  // Reads the training split's first `steps` steps (the rank's own rows, deduplicated) into
  // `each` until it returns false; returns the pass's step count.
  Result<uint64_t> ForFirstSteps(uint64_t steps, const std::function<bool(const RowBatch&)>& each);
  // storage.carry_rows: whether this run keeps the first steps' rows.
  bool KeepsFirstRows(bool oracle) const;
  // Marks the rows of as many first steps as fit `most` rows in kept_; none when fewer than
  // kMinKeptSteps steps fit.
  static constexpr uint64_t kMinKeptSteps = 16;
  Status ChooseKeptRows(uint64_t most);
  std::string DescribePlan() const;
  // What evaluating the largest split holds per sample (scores, labels, the ranking), for the
  // memory plan.
  uint64_t EvaluationBytes() const;
  // A step's tensors (the model's estimate) and, in shards, what the rows' exchange holds
  // (ShardedRows::StepBytes), for the memory plan.
  uint64_t StepBytes() const;
  Status RestoreTables(const std::string& checkpoint_dir);
  Result<uint64_t> SampleDistinctRowsPerStep();
  Result<RecordSource> Source(const std::string& split, uint64_t max_records) const;
  using Pipeline = RowPipeline<RowBatch>;
  // `next_steps`: after the source's last step, that many steps of the next pass (from step 0)
  // as lookahead-only steps for the oracle's window (RowBatch::lookahead_only).
  std::unique_ptr<Pipeline> MakePipeline(const RecordSource* source, uint64_t first_step, bool writes,
                                         uint64_t next_steps = 0);
  // Steps of the next epoch the window sees at the end of epoch `epoch` (storage.carry_over).
  uint64_t CarriedWindow(uint64_t epoch) const;
  void StartPreload(const RecordSource* source, uint64_t first_step);
  Status FinishPass(Pipeline& p);
  Status ReadBatch(const RowBatch& b, const std::string& split, torch::Tensor& dense,
                   torch::Tensor& labels) const;
  // The model input of a step: its dense features, labels and every use's row.
  Result<ModelInput> StepInput(const RowBatch& b, const std::string& split, bool training);
  Result<double> TrainStep(RowBatch& b);
  // train.virtual_shards: the step computed shard by shard (this rank's shards), the shards'
  // gradients exchanged and summed in a fixed order (train/data_parallel.h).
  Status SetUpDataParallel();
  // Sharded tables: keeps this rank's rows in b.keys (every use's in b.all_keys).
  void KeepOwnedKeys(RowBatch& b) const;
  // The step's rows from their owners (step_rows_, all-to-all): the rows this rank's shards use,
  // or (every_row) every distinct row of b.all_keys.
  Status GatherStepRows(const RowBatch& b, bool every_row);
  // Training: step b's rows, and the next step's (dist.prefetch_rows; null: none) sent ahead.
  Status GatherTrainingRows(const RowBatch& b, const RowBatch* next);
  int OwnerOf(uint64_t global_row) const { return sharded_->OwnerOf(global_row); }
  RowKey KeyOf(uint64_t global_row) const;
  // Global rows [first, first + count) of this process's tables (synced), as row_bytes each.
  Status ReadGlobalRows(IoSession& io, uint64_t first, uint64_t count, std::byte* out);
  Status WriteGlobalRows(IoSession& io, uint64_t first, uint64_t count, const std::byte* rows);
  // Checkpoints of sharded tables, in two phases (SendRowShard on the others, CollectRowShards
  // on rank 0; train/data_parallel.h).
  Status SaveShard(const std::string& checkpoint_dir) override;
  // `use` given a reader of this process's global rows (synced).
  Status WithGlobalRows(const std::function<Status(const RowRangeReader&)>& use);
  // The rows a checkpoint's tables give this process: its own when sharded, else all.
  std::pair<uint64_t, uint64_t> RowsToLoad() const;
  Result<double> TrainShardedStep(RowBatch& b, const RowBatch* next);
  // This rank's shards of step `b`: their losses and dense gradients into `grads`, the uses'
  // gradients into sharded_->use_grads().
  Status ComputeShards(const RowBatch& b, const torch::Tensor& dense, const torch::Tensor& labels,
                       ShardGradients& grads);
  Result<DlrmMetrics> EvaluateSamples(const std::string& split, uint64_t max_samples,
                                      std::vector<float>* scores, std::vector<float>* labels);
  // An evaluation pass's steps, each scored into `scores` and `labels` (ScoreStep): in one
  // process every step; across processes (ScoreRounds) rank r computes steps r, r + N, ..., while
  // every rank loads its rows of every step and sends them to the step's rank (EvalRound, one
  // all-to-all a round of N steps), and GatherScores puts every rank's scores in step order.
  Status ScoreSteps(Pipeline& p, const RecordSource& source, const std::string& split,
                    std::vector<float>& scores, std::vector<float>& labels);
  Status ScoreRounds(Pipeline& p, const RecordSource& source, const std::string& split,
                     std::vector<float>& scores, std::vector<float>& labels);
  Status ScoreStep(const ModelInput& in, const std::string& split, std::vector<float>& scores,
                   std::vector<float>& labels);
  Status GatherScores(const RecordSource& source, std::vector<float>& scores, std::vector<float>& labels);
  bool SplitsEvaluation() const { return dp_ != nullptr && dp_->group() != nullptr; }
  EvalSteps eval_steps_;
  Status SyncTables();
  Status WriteMemoryRows(const std::string& path);
  Status LoadMemoryRows(const std::string& dir);
  Status ExportTable(uint32_t t, const std::string& dir);
  Status ExportRawTables(const std::string& dir);
  void SummarizeCache(RunSummary& s) const;
  void SummarizeLookahead(RunSummary& s) const;
  // The device path (dlrm_task_device.cc): the accelerator and the model on it (training only;
  // reading runs on the CPU), the device rows, and a pass whose steps are staged while the
  // previous one computes.
  Status SetUpDevice();
  Status SetUpDeviceRows();
  DeviceRowsOptions DeviceOptions() const;
  Result<DevicePlan> PlanDeviceRows() const;
  // Host memory the device path takes: page-locked staging and the device cache's index.
  uint64_t DeviceHostBytes() const;
  Status StageStep(RowBatch& b);
  Status LaunchStep(const RowBatch& b);
  Result<EpochOutcome> TrainEpochOnDevice(uint64_t first, StepSink& sink);

  DlrmConfig cfg_;
  RunSettings settings_;
  Purpose purpose_ = Purpose::kTrain;
  Dataset dataset_;
  RecordLayout rec_;
  std::optional<DlrmTables> tables_;
  bool in_memory_ = false, rocksdb_ = false;
  std::string tables_dir_;
  // Storage.
  std::unique_ptr<MemoryRows> memory_;
  std::unique_ptr<RowFile> row_file_;
  std::unique_ptr<KvTable> kv_;
  std::unique_ptr<RowBacking> backing_;
  std::unique_ptr<RowCache> cache_;
  AlignedBuffer arena_;
  RowMemoryPlan plan_;
  std::optional<RecordSource> train_source_;  // while training
  std::vector<int64_t> inverse_;              // the step's uses, widened for the seam
  uint32_t run_ahead_ = 0;
  std::string memory_plan_;
  PlannerKind planner_ = PlannerKind::kOracle;  // storage.planner, auto resolved
  std::string lookahead_;                       // why (the summary's lookahead line)
  std::optional<LookaheadChoice> choice_;       // auto's figures
  double choice_s_ = 0;                         // and the time it took
  std::optional<WindowChoice> window_choice_;   // storage.window 0: the window's figures
  std::string window_line_;                     // and why (the summary's line)
  std::optional<DepthChoice> depth_choice_;     // io.queue_depth 0: the probe's figures
  // storage.carry_rows: the rows of the epoch's first kept_steps_ steps, a bitmap by global row.
  std::vector<uint64_t> kept_;
  uint64_t kept_rows_ = 0, kept_steps_ = 0;
  bool created_table_ = false;                  // ChoosePlanner made the fresh row file
  std::string resume_dir_;  // the checkpoint LoadState read (training resumes from it)
  // Model.
  std::shared_ptr<Model> net_;
  std::string model_name_;  // a user's model ("" = the built-in DLRM)
  ModelFactory factory_;
  std::string encoder_name_;  // Run::SetEncoder
  EncoderFactory encoder_factory_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  double lr_scale_ = 1;  // train.lr_decay so far: every learning rate is the config's times this
  // Data parallel: the process group (null: one process) and the shards' exchange.
  DistGroup* group_ = nullptr;
  std::unique_ptr<DataParallel> dp_;
  std::vector<uint64_t> owner_bounds_;  // rank r owns global rows [bounds[r], bounds[r + 1])
  uint64_t own_begin_ = 0, own_end_ = 0;
  std::unique_ptr<ShardedRows> sharded_;  // the step's rows across their owners
  struct StepRows {
    uint64_t step = ~uint64_t{0};     // the batch's step (a pass's)
    RowBatch all;                     // keys: every use's row; unique, inverse: deduplicated
    std::vector<uint64_t> rows;       // per distinct row: its global row number
    std::vector<uint64_t> own_rows;   // this rank's loaded rows' numbers (b.unique's)
    std::vector<int64_t> inverse;     // per use: its row in `all.unique`
    std::vector<uint64_t> use_begin;  // rank q's shards' uses: [use_begin[q], use_begin[q + 1])
  } step_rows_, next_rows_;  // next_rows_: the next step's, sent ahead
  void MakeStepRows(const RowBatch& b, StepRows& s);
  RowDeduper all_dedupe_;
  // Device.
  std::unique_ptr<Accelerator> acc_;
  std::unique_ptr<DeviceRows> device_rows_;
  torch::Tensor device_loss_;  // the running step's loss, on the device
  double device_wall_s_ = 0;   // wall time of the passes on the device
  // Bookkeeping.
  TimeSplit time_;
  StageTime read_time_, plan_time_, io_time_;
  uint64_t rows_loaded_ = 0, rows_written_ = 0;
  std::vector<uint64_t> epoch_start_loads_;  // per epoch trained from its start
  uint64_t io_requests_ = 0, io_bytes_ = 0;  // the prefetcher's disk requests (loads, write-backs)
};

}  // namespace sluice
