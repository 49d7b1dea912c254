#pragma once
// The node-classification task's class, shared by its source files (nc_task.cc: set-up and
// training; nc_task_io.cc: evaluation, checkpoints, export, summary). Not a public header.

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cache/row_cache.h"
#include "common/aligned_buffer.h"
#include "prefetch/memory_plan.h"
#include "prefetch/row_backings.h"
#include "prefetch/row_pipeline.h"
#include "prefetch/spill_backing.h"
#include "sampler/csr_graph.h"
#include "sampler/khop_nodes.h"
#include "sampler/khop_sampler.h"
#include "storage/dataset.h"
#include "train/accelerator.h"
#include "train/data_parallel.h"
#include "train/device_rows.h"
#include "train/row_checkpoint.h"
#include "train/sharded_rows.h"
#include "train/nc/nc_config.h"
#include "train/nc/nc_model.h"
#include "train/nc/node_logits.h"
#include "train/task.h"

namespace sluice {

class NcTask : public Task {
 public:
  explicit NcTask(NcConfig config);

  const RunSettings& settings() const override { return settings_; }
  const char* unit() const override { return "nodes"; }
  std::string ConfigYaml() override;
  std::string ConfigFingerprint() override;
  Status Open(Purpose purpose) override;
  Status LoadState(const CheckpointReader& checkpoint) override;
  Status PrepareTraining(const CheckpointReader* resumed) override;
  Status PrepareReading(const CheckpointReader& checkpoint) override;
  std::string Describe() const override;
  std::string MemoryPlan() const override { return memory_plan_; }
  // The sampler stage and the row prefetcher.
  int PipelineThreads() const override { return 2; }
  uint64_t EpochUnits() const override { return Split("train").size(); }
  void SetLearningRateScale(double scale) override;
  Result<EpochOutcome> TrainEpoch(uint64_t epoch, uint64_t first_step, StepSink& sink) override;
  std::string ValidationSplit() const override;
  Result<Metrics> Evaluate(const std::string& split) override;
  Status Save(CheckpointWriter& writer) override;
  void Summarize(RunSummary& summary) const override;
  void SummarizeSpill(RunSummary& s, double steps) const;
  std::string MemorySummary() const override { return memory_plan_; }
  uint64_t PredictedPeakBytes() const override { return plan_.predicted_bytes; }
  Status Export(const std::string& dir) override;
  Result<std::string> Predict(const PredictRequest& request) override;
  Status SetModelFactory(const std::string& name, ModelFactory factory) override {
    model_name_ = name;
    factory_ = std::move(factory);
    return Status::Ok();
  }
  Status SetEncoderFactory(const std::string& name, EncoderFactory factory) override {
    encoder_name_ = name;
    encoder_factory_ = std::move(factory);
    return Status::Ok();
  }
  Status SetDistGroup(DistGroup* group) override {
    group_ = group;
    return Status::Ok();
  }
  Status SaveShard(const std::string& checkpoint_dir) override;
  DataParallel* data_parallel() override { return dp_.get(); }

 private:
  // A step: its sampled subgraph and its rows (one key per node of the sample, layer order).
  struct Batch {
    RowBatch rows;
    SampledSubgraph sub;
    // Learnable embeddings in virtual shards (Pass::whole_steps): every shard's sample (`sub`
    // unused), the step's distinct nodes in first-occurrence order, each shard's uses of them
    // end to end, and where shard v's begin (shards + 1 entries); `rows` loads this rank's rows
    // among them, in that order.
    std::vector<SampledSubgraph> parts;
    std::vector<uint64_t> step_rows;
    std::vector<int64_t> uses;
    std::vector<uint64_t> part_uses;
  };
  using Pipeline = RowPipeline<Batch>;
  static RowBatch& RowsOf(Batch& b) { return b.rows; }
  // A pass: nodes in order, `batch` per step, sampled with `sampler` keyed on (seed, epoch).
  struct Pass {
    const std::vector<int64_t>* nodes = nullptr;
    KHopSampler* sampler = nullptr;
    const KHopOptions* options = nullptr;  // the pass's fanouts
    uint64_t seed = 0, epoch = 0, first_step = 0, batch = 1;
    uint64_t max_rows = 0;  // an evaluation step's largest sample (0: no limit)
    bool unpin = false;  // FitEvalPass's: the static planner's pinned rows may be evicted
    uint32_t run_ahead = 0, group = 1;  // steps of io ahead of compute, steps per io group
    // Set when training samples on the GPU (train.sampler): the CUDA sampler, the same samples.
    std::function<Result<SampledSubgraph>(std::span<const int64_t>, const SampleKey&)> sample_on_device = nullptr;
    bool writes = false;    // training learnable embeddings: rows become dirty
    bool spill = false;     // training through the spill backing (storage.spill_steps)
    // Spilling: the pass that follows this one (the next epoch's, listed during this pass's last
    // steps) and whether this pass is the one the pass before named so.
    const Pass* spill_next = nullptr;
    bool spill_continues = false;
    // Training in virtual shards (train.virtual_shards): the pipeline's units are this rank's
    // shards of each step that hold seeds, (step, shard) in order from first_step; else a unit
    // is a step.
    const std::vector<std::pair<uint64_t, int>>* units = nullptr;
    int shards = 0;
    // Learnable embeddings in virtual shards: a unit is a step, every shard of it sampled
    // (SampleWholeStep), its keys the rows of [own_begin, own_end) it uses.
    bool whole_steps = false;
    uint64_t own_begin = 0, own_end = 0;
    // Sampled evaluation across processes: the keys are the rows of [own_begin, own_end) a step
    // samples; the others come from their owners (FetchedStepInput).
    bool own_keys = false;
    // Evaluation split across processes: steps from end_step on are other ranks'.
    uint64_t end_step = ~uint64_t{0};
    uint64_t steps() const { return (nodes->size() + batch - 1) / batch; }
    // Step `step`'s seeds (empty past the pass's end).
    std::span<const int64_t> Seeds(uint64_t step) const {
      const uint64_t begin = step * batch;
      if (begin >= nodes->size() || step >= end_step) return {};
      return {nodes->data() + begin, std::min<uint64_t>(batch, nodes->size() - begin)};
    }
    // The pipeline's unit t (counted from first_step): its seeds (empty past the end) and the
    // key its sample and dropout draw from (a shard's: step x shards + shard, whatever the
    // world size).
    std::span<const int64_t> UnitSeeds(uint64_t t) const {
      if (units == nullptr) return Seeds(first_step + t);
      if (t >= units->size()) return {};
      const auto [step, v] = (*units)[t];
      const std::span<const int64_t> all = Seeds(step);
      const auto [lo, hi] = DataParallel::ShardSamples(v, shards, all.size());
      return all.subspan(lo, hi - lo);
    }
    SampleKey UnitKey(uint64_t t) const {
      if (units == nullptr) return {seed, epoch, first_step + t};
      const auto [step, v] = (*units)[t];
      return {seed, epoch, step * static_cast<uint64_t>(shards) + static_cast<uint64_t>(v)};
    }
  };

  // Where a pass's rows come from: RAM, or a cache over a backing (feature rows, or a layer's
  // outputs during layer-wise inference). `half`: float16 rows; `features`: the dataset's rows
  // (normalised as configured, checked for non-finite values).
  struct RowSource {
    MemoryRows* memory = nullptr;
    RowCache* cache = nullptr;
    std::byte* arena = nullptr;
    RowBacking* backing = nullptr;
    uint32_t row_bytes = 0;
    int64_t dim = 0;
    bool half = false, features = true;
  };

  const std::vector<int64_t>& Split(const std::string& name) const;
  RowSource FeatureSource() const;
  void FitEvalPass(Pass& pass, const RowCache* cache) const;
  Status OpenGraph();
  Status CheckLabelsAndSplits();
  Status BuildModel();
  Status MakeModel(const GnnShape& shape);
  Status OpenFeatures();
  RowInit Init() const;  // a learnable embedding's initial row
  // rows_from: a checkpoint directory whose embeddings are read, never written ("": the run's).
  Status SetUpStorage(bool fresh, const std::string& rows_from);
  bool Spilling() const;
  SpillOptions SpillOpts() const;
  uint64_t SpillStepRows() const;
  uint32_t SpillUnitsPerStep() const;
  Status OpenSpill();
  Status OpenEmbeddingFile(bool fresh, const std::string& rows_from);
  Status LoadFeaturesInMemory();
  std::vector<uint64_t> HottestRows(uint64_t rows) const;
  void PinHottest(uint64_t rows);
  bool Layerwise() const;
  void AddToShape(const SampledSubgraph& s, GnnShape& shape, bool training) const;
  void EpochTrainNodes(uint64_t epoch, std::vector<int64_t>& out) const;
  Pass TrainPass(uint64_t epoch, uint64_t first, std::vector<int64_t>& nodes) const;
  static uint64_t SlotWords(const SampledSubgraph& s);
  void ProbeUnions(const std::vector<std::vector<int64_t>>& steps);
  static constexpr uint64_t kProbeSteps = 16;  // training steps sampled at set-up for the plans
  uint64_t GraphBytes() const;
  // What evaluating the largest split holds per node (its scores), for the memory plan.
  uint64_t EvaluationBytes() const;
  // Writes the cache's dirty embedding rows back (before a checkpoint, or before layer-wise
  // inference reuses the arena).
  Status SyncRows();
  Result<RowPlanInput> PlanInput();
  std::string DescribePlan() const;
  void SpillPasses(Pass& pass, Pass& next);
  std::unique_ptr<Pipeline> MakePipeline(const Pass& pass, const RowSource& source);
  Status FinishPass(Pipeline& p);
  Status GatherRows(const RowBatch& rows, const RowSource& source, torch::Tensor& out) const;
  Result<ModelInput> StepInput(const Batch& b, const Pass& pass, uint64_t step, bool training,
                               const RowSource& source);
  Result<double> TrainStep(const Batch& b, const Pass& pass, uint64_t step);
  // train.virtual_shards: checks, and the exchange (train/data_parallel.h).
  Status SetUpDataParallel();
  // The units of a sharded pass from its first step: this rank's shards that hold seeds.
  std::vector<std::pair<uint64_t, int>> ShardUnits(const Pass& pass) const;
  // Step `step` in virtual shards: this rank's from the pipeline (units from `unit` on, which
  // it advances), every shard's loss and gradients exchanged and added in shard order, then the
  // optimizer. Returns the batch's mean loss.
  Result<double> TrainShardedStep(Pipeline& p, const Pass& pass, uint64_t step, uint64_t& unit);
  // Learnable embeddings in virtual shards (sharded by row range, train/sharded_rows.h): step
  // `step` of a whole-step pass; the step's rows from their owners, this rank's shards computed,
  // losses and dense gradients exchanged, each of this rank's rows updated with every rank's
  // uses' gradients added in global use order.
  // `next`: the next step (its rows that this one does not use travel while it computes), or null.
  Result<double> TrainRowShardedStep(const Batch& b, const Pass& pass, uint64_t step, const Batch* next);
  static void SampleWholeStep(const Pass& pass, uint64_t step, Batch& b);
  // Evaluation across processes is split between the ranks (nc_task_dist.cc): of a pass of S
  // steps rank r computes [S r / N, S (r + 1) / N); the N + 1 bounds (one process: {0, S}).
  std::vector<uint64_t> EvalStepBounds(uint64_t steps) const;
  // The rank whose part holds `step` (bounds: EvalStepBounds's).
  static int EvalStepOwner(const std::vector<uint64_t>& bounds, uint64_t step) {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), step) - bounds.begin()) - 1;
  }
  // Makes `pass` this rank's part: its steps (first_step, end_step); or, reading learnable
  // embeddings across processes, every step in rounds of one step of each rank's part
  // (`rounds`, the pass's units), this rank's rows of each loaded to go to the step's rank.
  void SplitEvalPass(Pass& pass, std::vector<std::pair<uint64_t, int>>& rounds) const;
  // Runs this rank's steps of an evaluation pass made by SplitEvalPass, each through `compute`
  // (its step, input and sample).
  using EvalCompute = std::function<Status(uint64_t, const ModelInput&, const SampledSubgraph&)>;
  Status RunEvalPass(Pipeline& p, const Pass& pass, const RowSource& source, const EvalCompute& compute);
  // The rounds: every step's rows this rank owns go to the step's rank (one all-to-all a round).
  Status RunEvalRounds(Pipeline& p, const Pass& pass, const EvalCompute& compute);
  // What `sink` keeps of n wanted nodes, from the rank that took each (`owner`) to every rank.
  Status ShareLogits(LogitSink& sink, uint64_t n, const std::function<int(uint64_t)>& owner);
  // Layer-wise inference split: the nodes of a layer's outputs the other ranks computed (steps
  // of `batch` nodes) into this rank's `memory` or `file`.
  Status ShareLayer(uint32_t width, uint64_t batch, MemoryRows* memory, RowFile* file, IoSession* io);
  // The plans' probe (BuildModel's) again for whole steps: this rank's rows a step.
  void ProbeWholeSteps();
  void ProbeShardUnits();
  // The sample's blocks, node ids and seeds' labels.
  void AddSample(const SampledSubgraph& s, ModelInput& in) const;
  bool across_processes() const { return dp_ != nullptr && dp_->group() != nullptr; }
  // The rows this process holds: across processes its own embedding rows, else every row (and
  // every feature row: each rank reads its own copy of the features).
  std::pair<uint64_t, uint64_t> RowsToLoad() const;
  // Rows [lo, hi) of a checkpoint's embeddings (whole or in shards) into memory_.
  Status LoadMemoryRows(const std::string& dir, uint64_t lo, uint64_t hi);
  // ... or into the run's row file (tables/nodes.bin; the other rows zero, never read here).
  Status RestoreRows(const std::string& dir, uint64_t lo, uint64_t hi);
  // This process's embedding rows by global number (out of core synced first, at the first read).
  RowRangeReader HeldRowsReader();
  // `nodes`' logits to `sink` (node i's at i), with the evaluation sampler (no dropout); across
  // processes every rank's sink ends holding every node's.
  Status Infer(const std::vector<int64_t>& nodes, LogitSink* sink);
  // ... with every neighbour, layer by layer over every node (nc_layerwise.cc).
  Status InferLayerwise(const std::vector<int64_t>& nodes, LogitSink* sink);
  // ... the way the config says full-neighbourhood inference runs.
  Status InferNodes(const std::vector<int64_t>& nodes, bool full_neighbourhood, LogitSink* sink);
  // One layer over every node: reads `in`, writes Apply(l)'s rows to `out_memory`, `out_file`
  // or `logits`' sink (the last layer).
  Status LayerPass(int l, const RowSource& in, MemoryRows* out_memory, RowFile* out_file,
                   const NodeLogits* logits);
  // The feature (or embedding) cache: its stats kept and it gone, or a fresh one in its place.
  void ReleaseFeatureCache();
  void ResetFeatureCache();
  // The device path (nc_task_device.cc): the model on a GPU (or the emulated device), a step's
  // feature or embedding rows staged through DeviceRows with its blocks, seeds' labels and node
  // ids while the previous step computes.
  Status SetUpDevice();
  DeviceRowsOptions DeviceOptions() const;
  uint64_t DeviceStepRows() const;  // a step's rows the device plans for
  Result<DevicePlan> PlanDeviceRows() const;
  uint64_t DeviceHostBytes() const;  // page-locked staging and the device cache's index
  Status SetUpDeviceRows();
  Status StageStep(Batch& b);
  Status LaunchStep(const Batch& b, const Pass& pass, uint64_t step);
  Result<double> FinishStep(const Batch& b);
  torch::Tensor DeviceFeatures(torch::Tensor uses);  // float32, normalised; flags non-finite values
  Result<EpochOutcome> TrainEpochOnDevice(Pass& pass, StepSink& sink);
  // train.sampler: where training samples; with auto on a GPU run, the faster sampler on the
  // first steps' seeds (at full and at a quarter batch: the crossover in sampled edges a step).
  Status SetUpSampler();
  Status CalibrateSampler();
  // The CUDA sampler's sample (`sampler` is cuda_sampler_'s); an error without a CUDA build.
  static Result<SampledSubgraph> SampleWithCuda(void* sampler, std::span<const int64_t> seeds, const SampleKey& key);

  NcConfig cfg_;
  RunSettings settings_;
  Purpose purpose_ = Purpose::kTrain;
  Dataset dataset_;
  CsrGraph graph_;  // in-neighbours
  torch::Tensor in_degree_;
  std::vector<int32_t> labels_;
  std::map<std::string, std::vector<int64_t>> splits_;
  uint64_t num_nodes_ = 0;
  int64_t feature_dim_ = 0, classes_ = 0;
  std::string feature_path_;
  MappedFile mapped_;  // storage.mmap: the feature file
  std::vector<uint64_t> pinned_;  // storage.planner static: the pinned rows, a bitmap
  uint64_t pinned_rows_ = 0;
  // Storage of the feature rows.
  std::unique_ptr<ArrayBacking> features_;
  std::unique_ptr<SpillBacking> spill_;  // storage.spill_steps: training's feature reads
  std::unique_ptr<KHopNodeSet> spill_nodes_;  // the spill's listing: the steps' node sets
  // Learnable node embeddings (model.embedding_dim > 0) instead of features: a row file in
  // tables/ (out of core) or RAM, each row the embedding then its optimizer state.
  bool embeddings_ = false;
  std::string tables_dir_;
  std::vector<uint64_t> offsets_;  // {0, nodes}: one table
  std::unique_ptr<RowFile> row_file_;
  std::unique_ptr<RowFileBacking> embedding_backing_;
  RowBacking* backing_ = nullptr;  // the features' or the embeddings'
  uint32_t row_bytes_ = 0;
  std::vector<int64_t> inverse_;  // the step's uses, widened for the seam
  std::unique_ptr<MemoryRows> memory_;
  std::unique_ptr<RowCache> cache_;
  RowCacheOptions cache_options_;
  RowCacheStats earlier_cache_stats_;  // of the feature caches layer-wise inference replaced
  AlignedBuffer arena_;
  RowMemoryPlan plan_;
  std::string memory_plan_;
  uint32_t run_ahead_ = 0;
  // The largest sample of the first training steps: its nodes, and its blocks' index words.
  uint64_t probe_nodes_ = 0, probe_slot_words_ = 0, probe_eval_nodes_ = 0;
  std::vector<uint64_t> probe_union_;  // [w]: the most distinct nodes of w consecutive probe steps
  // Sampling.
  // One sampler (its per-node table is 16 bytes a node) for training, evaluation and
  // layer-wise inference, each with its own fanouts.
  std::unique_ptr<KHopSampler> sampler_;
  KHopOptions train_options_, eval_options_;
  const KHopOptions one_hop_options_{{-1}, false};
  std::vector<int64_t> epoch_nodes_;  // the epoch's training nodes in order
  // Spilling: the next epoch's training nodes in order (the spill lists its first steps ahead)
  // and that epoch's number (~0: none named).
  std::vector<int64_t> next_epoch_nodes_;
  uint64_t spill_next_epoch_ = ~uint64_t{0};
  // Model.
  std::shared_ptr<Model> net_;  // the model the seam runs: gnn_, or the user's
  GnnModel gnn_{nullptr};       // the built-in GNN (null with a user's model)
  std::string model_name_;      // a user's model ("" = the built-in GNN)
  ModelFactory factory_;
  std::string encoder_name_;  // Run::SetEncoder
  EncoderFactory encoder_factory_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  double lr_scale_ = 1;  // train.lr_decay so far: every learning rate is the config's times this
  // The device (device.type cuda or emulated, training only).
  std::unique_ptr<Accelerator> acc_;
  std::unique_ptr<DeviceRows> device_rows_;
  std::vector<uint64_t> device_pinned_;  // device.planner static: the rows that stay on the device
  torch::Tensor device_loss_, device_nonfinite_;  // the running step's, on the device
  double device_wall_s_ = 0;
  std::shared_ptr<void> cuda_sampler_;  // a CudaKHopSampler (CUDA builds), shared by training passes
  bool sample_on_device_ = false;
  std::string sampler_line_ = "sampler: cpu";  // the summary's
  double sampler_cpu_ms_ = 0, sampler_cuda_ms_ = 0, sampler_crossover_edges_ = 0;
  // Across processes (train.virtual_shards; docs/distributed.md): features are each rank's own
  // copy of the dataset, the dense gradients are exchanged.
  DistGroup* group_ = nullptr;
  std::unique_ptr<DataParallel> dp_;
  std::vector<std::pair<uint64_t, int>> units_;  // the sharded pass's (step, shard) units
  std::vector<std::pair<uint64_t, int>> next_units_;  // spilling in shards: the next epoch's units
  // Learnable embeddings: sharded by row range, this rank owning [own_begin_, own_end_).
  std::unique_ptr<ShardedRows> sharded_;
  uint64_t own_begin_ = 0, own_end_ = 0;
  std::vector<uint64_t> own_rows_;  // the step's (global numbers)
  // Bookkeeping.
  double gather_s_ = 0, compute_s_ = 0, wait_s_ = 0;
  StageTime sample_time_, plan_time_, io_time_;
  uint64_t rows_loaded_ = 0;
  EvalSteps eval_steps_;  // evaluation's (layer-wise: every layer's)
  uint64_t io_requests_ = 0, io_bytes_ = 0;  // disk requests and bytes of training and evaluation
};

}  // namespace sluice
