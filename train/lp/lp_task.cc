#include "train/lp/lp_task.h"

#include <tbb/task_arena.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include "cache/block_cache.h"
#include "cache/row_cache.h"
#include "common/aligned_buffer.h"
#include "common/units.h"
#include "storage/dataset.h"
#include "storage/disk_probe.h"
#include "storage/file.h"
#include "storage/row_file.h"
#include "train/accelerator.h"
#include "train/data_parallel.h"
#include "train/device_rows.h"
#include "train/dist.h"
#include "train/row_checkpoint.h"
#include "train/sharded_rows.h"
#include "train/fingerprint.h"
#include "train/lp/lp_epoch.h"
#include "train/lp/lp_eval.h"
#include "train/lp/lp_step.h"
#include "prefetch/block_pipeline.h"
#include "prefetch/edge_schedule.h"
#include "prefetch/memory_plan.h"
#include "prefetch/row_backings.h"
#include "sampler/link_batch.h"
#include "train/lp/node_table.h"
#include "train/npy.h"
#include "train/run_dir.h"
#include "train/model_step.h"
#include "train/torch_io.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class LpTask : public Task {
 public:
  explicit LpTask(LpConfig config);

  const RunSettings& settings() const override { return settings_; }
  const char* unit() const override { return "edges"; }
  std::string ConfigYaml() override { return DumpConfig(cfg_); }
  std::string ConfigFingerprint() override {
    const std::string fp = sluice::ConfigFingerprint(cfg_);
    return model_name_.empty() ? fp : fp + " model=" + model_name_;
  }
  Status SetModelFactory(const std::string& name, ModelFactory factory) override {
    model_name_ = name;
    factory_ = std::move(factory);
    return Status::Ok();
  }
  Status Open(Purpose purpose) override;
  Status LoadState(const CheckpointReader& checkpoint) override;
  Status PrepareTraining(const CheckpointReader* resumed) override;
  Status RestoreTraining(const CheckpointReader& checkpoint) override;
  Status PrepareReading(const CheckpointReader& checkpoint) override;
  std::map<std::string, std::string> Conditions() const override;
  std::string Describe() const override;
  std::string MemoryPlan() const override;
  uint64_t EpochUnits() const override {
    const uint64_t all = schedule_.num_train_edges(), max_steps = cfg_.train.max_steps;
    return max_steps == 0 ? all : std::min(all, max_steps * static_cast<uint64_t>(cfg_.train.batch));
  }
  // The sampler stage, its edge reader, and (out of core) the block prefetcher.
  // The edge reader, and out of core the block prefetcher; the sampler stage runs as compute's
  // tasks (StageMode::kTask).
  int PipelineThreads() const override { return in_memory_ ? 1 : 2; }
  void SetLearningRateScale(double scale) override { stepper_->SetLrScale(scale); }
  Result<EpochOutcome> TrainEpoch(uint64_t epoch, uint64_t first_step, StepSink& sink) override;
  std::string ValidationSplit() const override {
    return dataset_.Has("edges.valid.src") ? "valid" : "";
  }
  Result<Metrics> Evaluate(const std::string& split) override;
  Status Save(CheckpointWriter& writer) override;
  void Summarize(RunSummary& summary) const override;
  uint64_t PredictedPeakBytes() const override { return plan_.predicted_bytes; }
  std::string MemorySummary() const override;
  Status Export(const std::string& dir) override;
  Result<std::string> Predict(const PredictRequest& request) override;
  Status SetDistGroup(DistGroup* group) override {
    group_ = group;
    return Status::Ok();
  }
  DataParallel* data_parallel() override { return dp_.get(); }
  Status SaveShard(const std::string& checkpoint_dir) override;

 private:
  uint32_t partitions() const { return layout_.num_blocks(); }
  uint64_t base_relations() const { return num_relations_ / (cfg_.model.reciprocal ? 2 : 1); }
  uint64_t table_bytes() const { return layout_.num_rows() * layout_.row_bytes; }
  Status SetUpStorage();
  PartitionPlanInput PlanInput() const;
  // Data parallel out of core: this process's rows through a row cache planned from the
  // budget (the partition buffer is the single-process schedule's).
  bool row_cached() const { return dp_ != nullptr && !in_memory_; }
  // Evaluation reads the rows from the memory table (in memory, this run's rows), not from a file.
  bool ReadsMemoryTable() const { return memory_table_.size() > 0 && rows_path_.empty(); }
  RowPlanInput RowPlanFor() const;
  // The first steps' rows this process owns, sampled as epoch 0 samples them: the most of one
  // step and of run_ahead + 1 consecutive steps (the row cache's plan).
  Result<std::pair<uint64_t, uint64_t>> ProbeOwnRows(uint32_t run_ahead) const;
  Status SetUpRowCache();
  std::string DescribeRowPlan() const;
  LinkBatchOptions BatchOptions() const;
  Status SyncTable();
  Result<torch::Tensor> AllNodeEmbeddings();
  // The embeddings of nodes [first, first + n) (this rank's, across processes) into `dst`
  // (n x dim floats), from memory or the table.
  Status ReadNodeRange(uint64_t first, uint64_t n, float* dst) const;
  // The rows of nodes `ids` (sorted): what a ranking against sampled nodes reads.
  Result<torch::Tensor> NodeEmbeddings(const std::vector<int64_t>& ids);
  // What evaluation during training holds (nothing when the run never evaluates).
  LpEvalBytes EvalBytes() const;
  // A plan's refusal, saying what evaluation takes of the budget when that is what outgrew it.
  Status WithEvaluationHint(const Status& refused) const;
  // model.encoder: every node encoded over its neighbours in the whole training graph.
  Result<torch::Tensor> EncodeAll(const torch::Tensor& rows);
  Status MakeStepper();
  Status CheckEvaluationEdges() const;
  // Scores rankings and predictions: the built-in decoder, or the user's model's Predict.
  std::unique_ptr<LpScorer> Scorer();

  LpConfig cfg_;
  RunSettings settings_;
  Purpose purpose_ = Purpose::kTrain;
  Dataset dataset_;
  NodeTableLayout layout_;
  uint64_t num_relations_ = 0;  // including reciprocal ones
  EdgeSchedule schedule_;
  std::unique_ptr<LinkBatchSampler> sampler_;
  std::unique_ptr<LinkNeighborSampler> neighbors_;       // model.encoder: training steps'
  std::unique_ptr<LinkNeighborSampler> eval_neighbors_;  // model.encoder: the whole training graph
  std::unique_ptr<LpStepper> stepper_;
  std::unique_ptr<LpRanker> ranker_;
  double last_valid_own_top_ = -1;  // the last validation's own_top (-1: none, or sampled)
  std::string table_path_;
  std::string rows_path_;  // reading: the checkpoint's table
  bool in_memory_ = true;
  AlignedBuffer memory_table_;
  std::unique_ptr<RowFile> table_;
  std::unique_ptr<BlockCache> cache_;
  PartitionMemoryPlan plan_;
  LpEpochStats stats_;
  std::string model_name_;  // a user's model ("" = the built-in decoder)
  ModelFactory factory_;
  // A device run (device.type cuda or emulated; training only, reading runs on the CPU).
  Status SetUpDeviceRows();
  DeviceRowsOptions DeviceOptions() const;
  Result<DevicePlan> PlanDeviceRows() const;
  uint64_t DeviceHostBytes() const;
  torch::Device ComputeDevice() const {
    return acc_ != nullptr ? acc_->device() : torch::Device(torch::kCPU);
  }
  std::unique_ptr<Accelerator> acc_;
  std::unique_ptr<DeviceRows> device_rows_;
  // Data parallel (train.virtual_shards; docs/distributed.md): rank r owns table rows
  // [bounds[r], bounds[r + 1]), alone updates them and, across processes, holds only them in
  // memory (memory_table_ holds rows [HeldRows().first, HeldRows().second)).
  Status SetUpDataParallel();
  bool across_processes() const { return dp_ != nullptr && dp_->group() != nullptr; }
  std::pair<uint64_t, uint64_t> OwnRows() const {
    return {sharded_->bounds()[static_cast<size_t>(dp_->rank())], sharded_->bounds()[static_cast<size_t>(dp_->rank()) + 1]};
  }
  std::pair<uint64_t, uint64_t> HeldRows() const {
    return across_processes() ? OwnRows() : std::pair<uint64_t, uint64_t>{0, layout_.num_rows()};
  }
  uint64_t held_bytes() const { return (HeldRows().second - HeldRows().first) * layout_.row_bytes; }
  Status ReadMemoryRows(uint64_t at, uint64_t n, std::byte* out) const;
  RowRangeReader HeldRowsReader();
  // What a rank ranks with across processes (LpNodes): in an exact ranking the ends of the
  // ranked edges and the nodes of whole tiles from its first node's tile on (ScoredNodes), each
  // from its owner, the counts added across ranks (MergeCounts); against sampled nodes, the
  // rows the ranking reads, every rank ranking alone. No rank holds every node's row.
  Result<LpNodes> NodesAcrossProcesses(const std::string& split);
  // The nodes rank q receives for an exact ranking (sorted, distinct): `ids` (the ranked edges'
  // ends) and its borrowed nodes.
  std::vector<int64_t> WithBorrowedNodes(const std::vector<int64_t>& ids, int q) const;
  // The nodes rank q scores: [first, end) rounded up to whole tiles (LpRanker::kTile), where
  // rank q's rows hold nodes [first, end).
  std::pair<uint64_t, uint64_t> ScoredNodes(int q) const;
  // The nodes rank q scores that other ranks own: [first, end) of ScoredNodes(q) past its own
  // rows' nodes (the rest of the tile its rows end in, or all of them when it owns fewer).
  std::pair<uint64_t, uint64_t> BorrowedNodes(int q) const;
  // The first node whose row is `row` or after it (the graph's nodes past the last row).
  uint64_t FirstNodeFrom(uint64_t row) const;
  // This rank's rows `rows` (sorted) read from its synced table file for sending (out of core):
  // their embeddings in order.
  Result<std::vector<float>> ReadOwnEmbeddings(const std::vector<uint64_t>& rows) const;
  // Every rank's counts of each query added into this rank's (every rank gets the sums).
  Status MergeCounts(std::vector<LpQueryCount>& counts) const;
  // A checkpoint's table (whole or in shards) into the memory table, or into table_path_.
  Status LoadSharded(const std::string& dir, bool into_memory);
  DistGroup* group_ = nullptr;
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<ShardedRows> sharded_;
  std::string sharded_from_;  // a checkpoint whose table is in shards (LoadState)
  // row_cached(): the cache over table_ (keys: table rows), its arena and backing.
  std::unique_ptr<RowCache> row_cache_;
  std::unique_ptr<RowFileBacking> row_backing_;
  std::vector<uint64_t> row_offsets_;  // {0, the table's rows}
  AlignedBuffer row_arena_;
  RowMemoryPlan row_plan_;
  LpRowCache row_ctx_;
  std::optional<DepthChoice> depth_choice_;  // io.queue_depth 0: the start-up probe's
  bool scoring_auto_ = false;  // train.scoring was auto (Open chose)
};

LpTask::LpTask(LpConfig config) : cfg_(std::move(config)) {
  settings_ = RunSettingsOf(cfg_);
  table_path_ = cfg_.run_dir + "/tables/nodes.bin";
  in_memory_ = cfg_.storage.mode == StorageMode::kInMemory;
}

Status LpTask::Open(Purpose purpose) {
  purpose_ = purpose;
  if (cfg_.dataset.empty()) return InvalidArgument("dataset: not set (the dataset directory)");
  SLUICE_ASSIGN_OR_RETURN(dataset_, Dataset::Open(cfg_.dataset));
  const Manifest& m = dataset_.manifest();
  if (m.task != TaskKind::kLinkPrediction) {
    return InvalidArgument("dataset " + cfg_.dataset + " is not a link-prediction dataset");
  }
  if (!factory_ && cfg_.model.decoder == Decoder::kComplEx && cfg_.model.dim % 2 != 0) {
    return InvalidArgument("model.dim: complex needs an even dimension, got " +
                           std::to_string(cfg_.model.dim));
  }
  if (cfg_.train.relation_prediction > 0 && (factory_ || cfg_.model.decoder == Decoder::kDot)) {
    return InvalidArgument(std::string("train.relation_prediction: ") +
                           (factory_ ? "a user's model (Run::SetModel) brings its own loss"
                                     : "the dot decoder has no relations to predict") +
                           "; set it to 0");
  }
  if (cfg_.model.encoder != LpEncoder::kNone && factory_) {
    return InvalidArgument("model.encoder: graphsage encodes for the built-in decoders; a user's model "
                           "(Run::SetModel) brings its own encoding");
  }
  if (cfg_.model.encoder != LpEncoder::kNone && cfg_.device.on_device()) {
    return InvalidArgument("model.encoder: graphsage trains on the CPU; set device.type: cpu (the GPU "
                           "path runs the decoders alone)");
  }
  layout_ = MakeNodeTableLayout(m.partition_bounds, static_cast<uint32_t>(cfg_.model.dim));
  scoring_auto_ = cfg_.train.scoring == Scoring::kAuto;
  if (cfg_.train.scoring == Scoring::kAuto) {
    const auto train = m.edges.find("train");
    const uint64_t edges = train == m.edges.end() ? 0 : train->second;
    const bool fits = edges <= cfg_.train.all_max_pairs / std::max<uint64_t>(layout_.num_nodes(), 1);
    cfg_.train.scoring = fits ? Scoring::kAll : Scoring::kSampled;
  }
  if (cfg_.train.loss != LossKind::kSoftmax &&
      (cfg_.train.scoring == Scoring::kAll || cfg_.train.label_smoothing > 0)) {
    return InvalidArgument(std::string("train.loss: ") + EnumName(cfg_.train.loss) + " with " +
                           (cfg_.train.scoring == Scoring::kAll ? "train.scoring: all"
                                                                : "train.label_smoothing") +
                           "; both need loss: softmax (a cross-entropy over the candidates)");
  }
  if (cfg_.train.own_negative && (factory_ || cfg_.train.loss != LossKind::kSoftmax)) {
    return InvalidArgument(std::string("train.own_negative: ") +
                           (factory_ ? "a user's model (Run::SetModel) scores its own negatives"
                                     : std::string("needs loss: softmax, not ") + EnumName(cfg_.train.loss)) +
                           "; set it to false");
  }
  num_relations_ = std::max<uint64_t>(m.num_relations, 1) * (cfg_.model.reciprocal ? 2 : 1);
  SLUICE_RETURN_IF_ERROR(CheckEvaluationEdges());
  if (purpose == Purpose::kTrain) {
    if (const auto train = m.edges.find("train"); train == m.edges.end() || train->second == 0) {
      return InvalidArgument("dataset " + cfg_.dataset + " has no training edges (counts.edges.train "
                             "is 0); nothing to train on");
    }
    EdgeScheduleOptions so;
    so.batch = static_cast<uint64_t>(cfg_.train.batch);
    so.shuffle = cfg_.train.schedule == Schedule::kShuffle;
    so.ordering = cfg_.train.ordering;
    so.seed = cfg_.train.seed;
    so.max_steps = cfg_.train.max_steps;
    so.chain = cfg_.storage.carry_over;
    so.io = cfg_.io;
    SLUICE_RETURN_IF_ERROR(schedule_.Open(dataset_, m.partition_bounds, so));
    sampler_ = std::make_unique<LinkBatchSampler>(layout_.num_nodes(), BatchOptions());
    if (cfg_.model.encoder != LpEncoder::kNone) {
      neighbors_ = std::make_unique<LinkNeighborSampler>(layout_.num_nodes(), cfg_.model.fanout, cfg_.train.seed);
    }
    if (cfg_.device.on_device()) {
      SLUICE_ASSIGN_OR_RETURN(acc_, OpenAccelerator(cfg_.device));
    }
  }
  SLUICE_RETURN_IF_ERROR(MakeStepper());
  ranker_ = std::make_unique<LpRanker>(dataset_, cfg_, num_relations_);
  return SetUpDataParallel();
}

// Across processes only the global shuffle, sampled negatives and the built-in decoders on the
// CPU so far (docs/distributed.md); out of core each rank's rows go through its row cache.
Status LpTask::SetUpDataParallel() {
  SLUICE_ASSIGN_OR_RETURN(const bool sharded, TrainsInShards(purpose_ == Purpose::kTrain, cfg_.train.virtual_shards,
                                                              group_, cfg_.train.batch, "edges", cfg_.device));
  if (!sharded) return Status::Ok();
  const int world = group_ != nullptr ? group_->world_size() : 1;
  const auto refuse = [](const std::string& what, const std::string& why) {
    return InvalidArgument("train.virtual_shards with " + what + ": " + why);
  };
  if (cfg_.train.schedule != Schedule::kShuffle) {
    return refuse("train.schedule: partitions", "the partition buffer's schedule trains in one process; set "
                  "train.schedule: shuffle (docs/distributed.md)");
  }
  if (cfg_.train.scoring == Scoring::kAll) {
    return refuse(std::string("train.scoring: ") + (scoring_auto_ ? "auto (all for this graph)" : "all"),
                  "1vsAll scores every node in every shard, so every rank would need every row each step; set "
                  "train.scoring: sampled");
  }
  if (cfg_.model.encoder != LpEncoder::kNone) return refuse("model.encoder", "not sharded yet");
  if (factory_) return refuse("a user's model", "only the built-in decoders train in virtual shards so far");
  dp_ = std::make_unique<DataParallel>(group_, cfg_.train.virtual_shards);
  std::vector<uint64_t> bounds;
  for (int r = 0; r <= world; ++r) bounds.push_back(DataParallel::RowRange(r, world, layout_.num_rows()).first);
  bounds.back() = layout_.num_rows();
  sharded_ = std::make_unique<ShardedRows>(dp_.get(), std::move(bounds), static_cast<uint64_t>(cfg_.model.dim));
  dp_->set_dense_floats(DenseFloats(stepper_->model().parameters()));
  stepper_->UseDataParallel(dp_.get(), sharded_.get());
  return Status::Ok();
}

Status LpTask::ReadMemoryRows(uint64_t at, uint64_t n, std::byte* out) const {
  if (row_cached()) {  // the table file, synced (SyncTable)
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<IoSession> io, IoSession::Create(cfg_.io));
    return table_->ReadRange(*io, at, n, out);
  }
  std::memcpy(out, memory_table_.data() + (at - HeldRows().first) * layout_.row_bytes, n * layout_.row_bytes);
  return Status::Ok();
}

uint64_t LpTask::FirstNodeFrom(uint64_t row) const {
  if (row >= layout_.num_rows()) return layout_.num_nodes();
  const uint64_t blk = row / layout_.rows_per_block, v = layout_.bounds[blk] + row % layout_.rows_per_block;
  return std::min(v, layout_.bounds[blk + 1]);  // a block's padding: the next block's first node
}

std::pair<uint64_t, uint64_t> LpTask::ScoredNodes(int q) const {
  const uint64_t n = layout_.num_nodes(), tile = LpRanker::kTile;
  const auto up = [&](uint64_t v) { return std::min(n, (v + tile - 1) / tile * tile); };
  const std::vector<uint64_t>& bounds = sharded_->bounds();
  return {up(FirstNodeFrom(bounds[static_cast<size_t>(q)])), up(FirstNodeFrom(bounds[static_cast<size_t>(q) + 1]))};
}

Result<std::vector<float>> LpTask::ReadOwnEmbeddings(const std::vector<uint64_t>& rows) const {
  const uint64_t d = static_cast<uint64_t>(cfg_.model.dim);
  std::vector<float> out(rows.size() * d);
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<IoSession> io, IoSession::Create(cfg_.io));  // one for every run
  constexpr uint64_t kRun = 1 << 14;
  std::vector<std::byte> held;
  for (size_t i = 0; i < rows.size();) {  // runs of consecutive rows, at most kRun at a time
    size_t j = i + 1;
    while (j < rows.size() && j - i < kRun && rows[j] == rows[j - 1] + 1) ++j;
    held.resize((j - i) * layout_.row_bytes);
    SLUICE_RETURN_IF_ERROR(table_->ReadRange(*io, rows[i], j - i, held.data()));  // the table file, synced
    for (size_t k = i; k < j; ++k) std::memcpy(out.data() + k * d, held.data() + (k - i) * layout_.row_bytes, d * 4);
    i = j;
  }
  return out;
}

std::pair<uint64_t, uint64_t> LpTask::BorrowedNodes(int q) const {
  const auto [lo, hi] = ScoredNodes(q);
  const uint64_t own_end = FirstNodeFrom(sharded_->bounds()[static_cast<size_t>(q) + 1]);
  return {std::min(hi, std::max(lo, own_end)), hi};
}

std::vector<int64_t> LpTask::WithBorrowedNodes(const std::vector<int64_t>& ids, int q) const {
  const auto [lo, hi] = BorrowedNodes(q);
  std::vector<int64_t> out;
  out.reserve(ids.size() + (hi - lo));
  const auto first = std::lower_bound(ids.begin(), ids.end(), static_cast<int64_t>(lo));
  const auto last = std::lower_bound(first, ids.end(), static_cast<int64_t>(hi));
  out.insert(out.end(), ids.begin(), first);
  for (uint64_t v = lo; v < hi; ++v) out.push_back(static_cast<int64_t>(v));
  out.insert(out.end(), last, ids.end());
  return out;
}

Result<LpNodes> LpTask::NodesAcrossProcesses(const std::string& split) {
  LpNodes nodes;
  nodes.num_nodes = layout_.num_nodes();
  const bool exact = ranker_->Exact(nodes.num_nodes);
  if (exact) {
    SLUICE_ASSIGN_OR_RETURN(nodes.ids, ranker_->EndsRead(split));
  } else {
    SLUICE_ASSIGN_OR_RETURN(nodes.ids, ranker_->NodesRead(split, nodes.num_nodes));
  }
  const auto nodes_of = [&](int q) { return exact ? WithBorrowedNodes(nodes.ids, q) : nodes.ids; };
  const auto rows_of = [&](const std::vector<int64_t>& ids) {
    std::vector<uint64_t> rows(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) rows[i] = layout_.row_of(ids[i]);
    return rows;  // sorted: a node's row grows with its id
  };
  // Each rank's rows (every rank's alike), once: Trade's requests, and out of core the rows this
  // rank reads to send.
  std::vector<std::vector<uint64_t>> wanted(static_cast<size_t>(dp_->world_size()));
  for (int q = 0; q < dp_->world_size(); ++q) wanted[static_cast<size_t>(q)] = rows_of(nodes_of(q));
  // This rank's rows the others receive: out of core read first; in memory, from the table.
  const auto [own_lo, own_hi] = OwnRows();
  std::vector<uint64_t> own_rows;
  std::vector<float> own_floats;
  if (row_cached()) {
    for (int q = 0; q < dp_->world_size(); ++q) {
      if (q == dp_->rank()) continue;
      for (const uint64_t row : wanted[static_cast<size_t>(q)]) {
        if (row >= own_lo && row < own_hi) own_rows.push_back(row);
      }
    }
    std::sort(own_rows.begin(), own_rows.end());
    own_rows.erase(std::unique(own_rows.begin(), own_rows.end()), own_rows.end());
    SLUICE_ASSIGN_OR_RETURN(own_floats, ReadOwnEmbeddings(own_rows));
  }
  const uint64_t d = static_cast<uint64_t>(cfg_.model.dim);
  const auto own_row = [&](uint64_t row) -> const float* {
    if (!row_cached()) return reinterpret_cast<const float*>(memory_table_.data() + (row - own_lo) * layout_.row_bytes);
    const auto it = std::lower_bound(own_rows.begin(), own_rows.end(), row);
    return own_floats.data() + static_cast<uint64_t>(it - own_rows.begin()) * d;
  };
  const std::vector<int64_t> mine = nodes_of(dp_->rank());
  SLUICE_ASSIGN_OR_RETURN(const std::vector<float> got,
                          sharded_->Trade([&](int q) { return std::move(wanted[static_cast<size_t>(q)]); }, own_row,
                                          "the rows of an evaluation"));
  own_floats = {};
  const auto copy_of = [&](int64_t first, int64_t n) {  // rows of `mine` from node `first` on, n of them
    torch::Tensor out = torch::empty({n, static_cast<int64_t>(d)});
    const auto at = static_cast<uint64_t>(std::lower_bound(mine.begin(), mine.end(), first) - mine.begin());
    if (n > 0) std::memcpy(out.data_ptr<float>(), got.data() + at * d, static_cast<uint64_t>(n) * d * 4);
    return out;  // (none borrowed: an empty tensor, its data null)
  };
  nodes.rows = torch::empty({static_cast<int64_t>(nodes.ids.size()), static_cast<int64_t>(d)});
  for (size_t i = 0; i < nodes.ids.size(); ++i) {  // the ends (or every row read) in their order
    const auto at = static_cast<uint64_t>(std::lower_bound(mine.begin(), mine.end(), nodes.ids[i]) - mine.begin());
    std::memcpy(nodes.rows.data_ptr<float>() + i * d, got.data() + at * d, d * 4);
  }
  if (exact) {  // its own nodes read a chunk at a time, the borrowed ones from their owners
    std::tie(nodes.cand_lo, nodes.cand_hi) = ScoredNodes(dp_->rank());
    const auto [b_lo, b_hi] = BorrowedNodes(dp_->rank());
    const torch::Tensor borrowed = copy_of(static_cast<int64_t>(b_lo), static_cast<int64_t>(b_hi - b_lo));
    nodes.read = [this, b_lo = b_lo, borrowed](uint64_t first, uint64_t n, torch::Tensor& out) -> Status {
      out = torch::empty({static_cast<int64_t>(n), cfg_.model.dim});
      const uint64_t own = first < b_lo ? std::min(n, b_lo - first) : 0;
      SLUICE_RETURN_IF_ERROR(ReadNodeRange(first, own, out.data_ptr<float>()));
      if (own < n) out.narrow(0, static_cast<int64_t>(own), static_cast<int64_t>(n - own)).copy_(
          borrowed.narrow(0, static_cast<int64_t>(first + own - b_lo), static_cast<int64_t>(n - own)));
      return Status::Ok();
    };
    nodes.merge = [this](std::vector<LpQueryCount>& counts) { return MergeCounts(counts); };
  }
  return nodes;
}

Status LpTask::MergeCounts(std::vector<LpQueryCount>& counts) const {
  static_assert(sizeof(LpQueryCount) % sizeof(float) == 0, "counts travel as floats");
  const int world = dp_->world_size(), me = dp_->rank();
  const uint64_t n = counts.size() * (sizeof(LpQueryCount) / sizeof(float));  // floats a rank sends each other
  std::vector<float> send;
  std::vector<uint64_t> send_counts(static_cast<size_t>(world), n), recv_counts(static_cast<size_t>(world), n);
  send_counts[static_cast<size_t>(me)] = recv_counts[static_cast<size_t>(me)] = 0;
  send.resize(static_cast<size_t>(world - 1) * n);
  for (int q = 0; q < world - 1; ++q) std::memcpy(send.data() + static_cast<uint64_t>(q) * n, counts.data(), n * 4);
  SLUICE_ASSIGN_OR_RETURN(const std::vector<float> got, dp_->AllToAll(send, send_counts, recv_counts, "its ranking counts"));
  std::vector<LpQueryCount> theirs(counts.size());
  for (int q = 0; q < world - 1; ++q) {  // the others' counts, bit for bit as they were sent
    std::memcpy(static_cast<void*>(theirs.data()), got.data() + static_cast<uint64_t>(q) * n, n * 4);
    AddCounts(counts, theirs);
  }
  return Status::Ok();
}

Status LpTask::LoadSharded(const std::string& dir, bool into_memory) {
  SLUICE_ASSIGN_OR_RETURN(const CheckpointRows rows,
                          CheckpointRows::Open(dir, "nodes.bin", layout_.row_bytes, layout_.num_rows()));
  if (!into_memory) {  // this rank's rows (all of them in one process), the others zero
    const auto [lo, hi] = HeldRows();
    return rows.WriteRowFile(table_path_, lo, hi - lo).WithContext("resume");
  }
  memory_table_ = AlignedBuffer(table_bytes(), kDirectAlignBytes);
  return rows.Read(0, layout_.num_rows(), memory_table_.data());
}

Status LpTask::SaveShard(const std::string& checkpoint_dir) {
  if (!across_processes()) return Status::Ok();
  const auto [lo, hi] = OwnRows();
  return SendRowShard(*dp_, checkpoint_dir, "nodes.bin", lo, hi - lo, layout_.row_bytes, HeldRowsReader());
}

// Out of core the table file is brought up to date first (on the first read: an error then is
// the shard's, which the checkpoint's exchange reports to rank 0).
RowRangeReader LpTask::HeldRowsReader() {
  auto synced = std::make_shared<bool>(false);
  return [this, synced](uint64_t at, uint64_t n, std::byte* out) -> Status {
    if (!*synced) SLUICE_RETURN_IF_ERROR(SyncTable());
    *synced = true;
    return ReadMemoryRows(at, n, out);
  };
}

// The validation and test edges' ids in range, before any epoch is spent (they are small;
// the training edges are checked as each buffer state is read).
Status LpTask::CheckEvaluationEdges() const {
  for (const char* split : {"valid", "test"}) {
    if (!dataset_.Has(std::string("edges.") + split + ".src")) continue;
    std::vector<int64_t> src, rel, dst;
    SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split, src, rel, dst));
  }
  return Status::Ok();
}

// The built-in model, or the user's from its factory (seeded as the built-in one is).
Status LpTask::MakeStepper() {
  std::shared_ptr<Model> user;
  if (factory_) {
    ModelSpec spec;
    spec.task = "link_prediction";
    spec.seed = cfg_.train.seed;
    spec.batch = cfg_.train.batch;
    spec.dim = cfg_.model.dim;
    spec.relations = static_cast<int64_t>(num_relations_);
    spec.reciprocal = cfg_.model.reciprocal;
    const bool all = cfg_.train.scoring == Scoring::kAll;
    spec.chunks = all ? 1 : cfg_.train.chunks;
    spec.negatives = all ? static_cast<int64_t>(layout_.num_nodes()) : cfg_.train.negatives;
    torch::manual_seed(cfg_.train.seed);
    SLUICE_ASSIGN_OR_RETURN(user, CallModelFactory(model_name_, factory_, spec));
  }
  stepper_ = std::make_unique<LpStepper>(cfg_, layout_, num_relations_, std::move(user), ComputeDevice());
  return Status::Ok();
}

std::unique_ptr<LpScorer> LpTask::Scorer() {
  if (LinkModel* builtin = stepper_->builtin()) {
    // Rankings run on the CPU, where the node table is.
    return std::make_unique<DecoderScorer>(builtin->decoder(), builtin->relations().detach().to(torch::kCPU));
  }
  return std::make_unique<ModelScorer>(stepper_->model());
}

Status LpTask::LoadState(const CheckpointReader& checkpoint) {
  std::string nodes;
  sharded_from_.clear();
  if (CheckpointRows::Sharded(checkpoint.dir(), "nodes.bin")) {  // written by the ranks of a run
    SLUICE_RETURN_IF_ERROR(
        CheckpointRows::Open(checkpoint.dir(), "nodes.bin", layout_.row_bytes, layout_.num_rows()).status());
    sharded_from_ = checkpoint.dir();
  } else {
    SLUICE_ASSIGN_OR_RETURN(nodes, checkpoint.PathOf("nodes.bin"));
    std::error_code ec;
    if (fs::file_size(nodes, ec) != RowFile::FileBytes(layout_.row_bytes, layout_.num_rows()) || ec) {
      return Corruption(nodes + ": size does not match the model (" + std::to_string(table_bytes()) +
                        " bytes of rows expected)");
    }
  }
  if (LinkModel* builtin = stepper_->builtin()) {
    torch::Tensor rel;
    SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "relations.pt", rel, torch::Device(torch::kCPU)));
    torch::Tensor& relations = builtin->relations();
    if (rel.sizes() != relations.sizes()) {
      return Corruption(checkpoint.dir() + "/relations.pt: shape does not match the model");
    }
    torch::NoGradGuard guard;
    relations.copy_(rel);
  } else {
    std::shared_ptr<Model> model = stepper_->model_ptr();
    SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "dense.pt", model, ComputeDevice()));
  }
  if (std::shared_ptr<SageLinkEncoder> encoder = stepper_->encoder()) {
    SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "encoder.pt", encoder, ComputeDevice()));
  }
  SLUICE_RETURN_IF_ERROR(
      LoadTorch(checkpoint, "relation_optimizer.pt", stepper_->relation_optimizer(), ComputeDevice()));
  rows_path_ = nodes;
  return Status::Ok();
}

Status LpTask::PrepareTraining(const CheckpointReader* resumed) {
  std::error_code ec;
  fs::create_directories(cfg_.run_dir + "/tables", ec);
  if (ec) return IoError("create " + cfg_.run_dir + "/tables: " + ec.message());
  if (resumed != nullptr && !sharded_from_.empty()) {
    SLUICE_RETURN_IF_ERROR(LoadSharded(sharded_from_, /*into_memory=*/false));
  } else if (resumed != nullptr) {  // the table restarts from the snapshot (it may have moved on since)
    fs::copy_file(rows_path_, table_path_ + ".tmp", fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError("resume: copy the checkpoint's table: " + ec.message());
    fs::rename(table_path_ + ".tmp", table_path_, ec);
    if (ec) return IoError("resume: rename " + table_path_ + ".tmp: " + ec.message());
  } else {
    fs::remove(table_path_, ec);  // a fresh run starts from freshly initialised rows
  }
  rows_path_.clear();
  SLUICE_RETURN_IF_ERROR(SetUpStorage());
  return SetUpDeviceRows();
}

// The storage is dropped without writing back (what it holds is the model being abandoned),
// then set up again over a copy of the checkpoint's table, as a resumed run's is. The epoch's
// context takes the new storage when the next epoch starts; the ordering is a function of seed
// and epoch, so an empty partition buffer changes which loads happen, not the model.
Status LpTask::RestoreTraining(const CheckpointReader& checkpoint) {
  if (device_rows_ != nullptr) stepper_->UseDevice(nullptr);
  device_rows_.reset();
  cache_.reset();
  row_cache_.reset();  // before its backing
  row_backing_.reset();
  table_.reset();
  memory_table_ = AlignedBuffer();
  SLUICE_RETURN_IF_ERROR(LoadState(checkpoint));
  // The buffer keeps its shape: planned again from the process's size now (evaluation's
  // buffers included) it could hold fewer partitions, and the schedule would change mid-run.
  LpStorageConfig& st = cfg_.storage;
  const int resident = st.resident, slots = st.slots;
  st.resident = static_cast<int>(plan_.resident), st.slots = static_cast<int>(plan_.slots);
  Status prepared = PrepareTraining(&checkpoint);
  st.resident = resident, st.slots = slots;
  return prepared;
}

DeviceRowsOptions LpTask::DeviceOptions() const {
  DeviceRowsOptions o;
  o.dim = cfg_.model.dim;
  o.row_floats = 2 * cfg_.model.dim;  // the embedding, then its Adagrad state
  o.optimizer = RowOptimizer::kAdagrad;
  o.lr = static_cast<float>(cfg_.train.lr);
  o.planner = cfg_.device.planner;
  return o;
}

// A step's largest shape: heads and tails of its queries, each chunk's negatives per corrupted
// side; its relations.
Result<DevicePlan> LpTask::PlanDeviceRows() const {
  const uint64_t queries = static_cast<uint64_t>(cfg_.train.batch) * (cfg_.model.reciprocal ? 2 : 1);
  const uint64_t negatives = cfg_.train.scoring == Scoring::kAll
                                 ? layout_.num_nodes()
                                 : static_cast<uint64_t>(cfg_.train.chunks) * static_cast<uint64_t>(cfg_.train.negatives);
  DeviceStepShape shape;
  shape.uses = 2 * queries + negatives * (cfg_.model.reciprocal ? 1 : 2);
  shape.rows = std::min(shape.uses, layout_.num_nodes());
  // relations (and 1vsAll's columns)
  shape.extra_bytes = static_cast<uint64_t>(cfg_.train.batch) * (cfg_.train.scoring == Scoring::kAll ? 48 : 16) + 128;
  return PlanDevice(cfg_.device, DeviceOptions(), shape, acc_->device().is_cpu(), stepper_->model().StepBytes());
}

uint64_t LpTask::DeviceHostBytes() const {
  Result<DevicePlan> plan = PlanDeviceRows();
  return plan.ok() ? plan->host_bytes : 0;  // a plan that fails fails at SetUpDeviceRows
}

Status LpTask::SetUpDeviceRows() {
  if (acc_ == nullptr) return Status::Ok();
  SLUICE_ASSIGN_OR_RETURN(DevicePlan plan, PlanDeviceRows());
  device_rows_ = std::make_unique<DeviceRows>(acc_.get(), plan.options);
  stepper_->UseDevice(device_rows_.get());
  return Status::Ok();
}

Status LpTask::PrepareReading(const CheckpointReader& checkpoint) {
  if (CheckpointRows::Sharded(checkpoint.dir(), "nodes.bin")) {  // read whole into memory
    rows_path_.clear();
    return LoadSharded(checkpoint.dir(), /*into_memory=*/true);
  }
  SLUICE_ASSIGN_OR_RETURN(rows_path_, checkpoint.PathOf("nodes.bin"));
  return Status::Ok();
}

LinkBatchOptions LpTask::BatchOptions() const {
  LinkBatchOptions bo;
  bo.reciprocal = cfg_.model.reciprocal;
  bo.base_relations = base_relations();
  bo.chunks = static_cast<uint32_t>(cfg_.train.chunks);
  bo.negatives = static_cast<uint32_t>(cfg_.train.negatives);
  bo.all_negatives = cfg_.train.scoring == Scoring::kAll;
  bo.max_candidates = layout_.num_nodes();
  bo.seed = cfg_.train.seed;
  bo.shards = static_cast<uint32_t>(cfg_.train.virtual_shards);
  return bo;
}

PartitionPlanInput LpTask::PlanInput() const {
  PartitionPlanInput in;
  in.budget_bytes = cfg_.storage.budget.value;
  // What the process holds already: libtorch's code and allocator, the dense model, the edges
  // of the global shuffle.
  in.runtime_bytes = CurrentRssBytes() + (acc_ != nullptr ? acc_->RuntimeHostBytes() : 0);
  // On a device the step's tensors live there; the host holds its page-locked staging and the
  // device cache's index.
  in.step_bytes = acc_ != nullptr ? DeviceHostBytes() : stepper_->model().StepBytes();
  // Evaluation runs between epochs beside the buffer: its filter stays, the rest is the step's
  // memory at another time.
  const LpEvalBytes eval = EvalBytes();
  in.runtime_bytes += eval.kept;
  // The shards' gradients: the exchange's buffers stay between steps, evaluation included.
  if (dp_ != nullptr) in.runtime_bytes += ShardGradients::Bytes(*dp_, dp_->dense_floats());
  in.step_bytes = std::max(in.step_bytes, eval.transient);
  in.ring_bytes = BlockPipeline<LinkBatch>::Capacity(static_cast<uint32_t>(cfg_.storage.run_ahead)) *
                  LinkBatchBytes(static_cast<uint64_t>(cfg_.train.batch), BatchOptions());
  in.block_bytes = layout_.block_bytes();
  in.table_bytes = held_bytes();
  in.partitions = partitions();
  in.in_memory = in_memory_;
  in.shuffle = cfg_.train.schedule == Schedule::kShuffle;
  in.resident = static_cast<uint32_t>(cfg_.storage.resident);
  in.slots = static_cast<uint32_t>(cfg_.storage.slots);
  return in;
}

Status LpTask::SetUpStorage() {
  const auto create_table = [&]() -> Status {
    if (fs::exists(table_path_)) return Status::Ok();
    const auto [lo, hi] = HeldRows();  // across processes a rank's own: its file stores no other
    return CreateNodeTable(table_path_, layout_, cfg_.train.seed, 0, cfg_.model.init_scale, lo, hi);
  };
  if (row_cached()) {
    SLUICE_RETURN_IF_ERROR(create_table());
    return SetUpRowCache();
  }
  PartitionPlanInput in = PlanInput();
  if (!in.shuffle) {  // the largest state depends on the resident count: plan it first
    Result<PartitionMemoryPlan> first = PlanPartitionMemory(in);
    if (!first.ok()) return WithEvaluationHint(first.status());
    schedule_.set_resident(first->resident);
    in.largest_state_edges = schedule_.LargestStateEdges();
  }
  if (neighbors_ != nullptr) {  // model.encoder: every edge among a state's partitions, both ways
    const uint64_t edges = in.shuffle ? schedule_.src().size() : schedule_.LargestResidentEdges();
    in.step_bytes += 2 * CsrGraph::BytesFor(layout_.num_nodes(), edges) + (in.shuffle ? 0 : edges * 32);
  }
  Result<PartitionMemoryPlan> planned = PlanPartitionMemory(in);
  if (!planned.ok()) return WithEvaluationHint(planned.status());
  plan_ = *planned;
  schedule_.set_resident(plan_.resident);
  SLUICE_RETURN_IF_ERROR(create_table());  // once the plan fits: a refused run writes no table
  if (in_memory_) {  // the rows this process holds (across processes its own)
    memory_table_ = AlignedBuffer(held_bytes(), kDirectAlignBytes);
    SLUICE_ASSIGN_OR_RETURN(File f, File::Open(table_path_, OpenMode::kRead, false));
    return PreadFull(f, memory_table_.data(), held_bytes(), HeldRows().first * layout_.row_bytes);
  }
  SLUICE_ASSIGN_OR_RETURN(table_, RowFile::Open(table_path_, layout_.row_bytes, layout_.num_rows(),
                                                /*writable=*/true, RowFileOptionsFrom(cfg_.io)));
  BlockCacheOptions co;
  co.capacity_blocks = plan_.slots;
  co.rows_per_block = layout_.rows_per_block;
  cache_ = std::make_unique<BlockCache>(table_.get(), co);
  return Status::Ok();
}

RowPlanInput LpTask::RowPlanFor() const {
  const auto [lo, hi] = HeldRows();
  const LinkBatchOptions bo = BatchOptions();
  const uint64_t queries = static_cast<uint64_t>(cfg_.train.batch) * (bo.reciprocal ? 2 : 1);
  const uint64_t chunks = uint64_t{bo.shards} * bo.ShardChunks();
  const uint64_t uses = 2 * queries + chunks * bo.negatives * (bo.reciprocal ? 1 : 2);
  RowPlanInput in;
  in.budget_bytes = cfg_.storage.budget.value;
  // libtorch, the edges of the shuffle, the sampler, allocator slack; evaluation's filter.
  const LpEvalBytes eval = EvalBytes();
  in.runtime_bytes = CurrentRssBytes() + kPartitionSlackBytes + eval.kept;
  in.model_bytes = num_relations_ * static_cast<uint64_t>(cfg_.model.dim) * 4 * 4;  // relations, grads, optimizer
  if (dp_ != nullptr) in.model_bytes += ShardGradients::Bytes(*dp_, dp_->dense_floats());
  // Evaluation (every node's embedding, gathered from the owners) at another time than a step.
  in.step_bytes = std::max(stepper_->model().StepBytes(), eval.transient);
  in.keys_per_step = std::min(uses, hi - lo);  // the step's rows this process owns, at most
  in.step_record_bytes = LinkBatchBytes(static_cast<uint64_t>(cfg_.train.batch), bo);
  in.row_bytes = layout_.row_bytes;
  in.total_rows = in.max_rows = hi - lo;
  in.oracle = cfg_.storage.planner == PlannerKind::kOracle;
  in.run_ahead = static_cast<uint32_t>(cfg_.storage.run_ahead);
  in.io_queue_depth = static_cast<uint64_t>(cfg_.io.EffectiveQueueDepth());
  in.io_merge_max_bytes = cfg_.io.merge_max.value;
  in.cache_rows = cfg_.storage.cache_rows;
  in.write_back_share = 0;  // rows go back to their pages
  in.distinct_keys = true;
  return in;
}

Result<std::pair<uint64_t, uint64_t>> LpTask::ProbeOwnRows(uint32_t run_ahead) const {
  std::vector<EdgeState> states;
  const std::vector<EdgeStep> steps = schedule_.EpochSteps(0, states);
  const uint64_t probe = std::min<uint64_t>(steps.size(), 4 * (uint64_t{run_ahead} + 1) + 16);
  EdgeReader reader(&schedule_, 0);
  StateEdges edges;
  uint32_t loaded = ~uint32_t{0};
  LinkBatchSampler sampler(layout_.num_nodes(), BatchOptions());
  LinkBatch batch;
  const auto [lo, hi] = HeldRows();
  std::vector<std::vector<uint64_t>> own(probe);
  uint64_t step_most = 0, flight_most = 0;
  for (uint64_t s = 0; s < probe; ++s) {
    const EdgeStep& step = steps[s];
    if (step.state != loaded) SLUICE_RETURN_IF_ERROR(reader.Take(step.state, states[step.state], edges));
    loaded = step.state;
    const EdgeColumns columns{schedule_.src().data(), schedule_.rel().data(), schedule_.dst().data(), edges.order.data()};
    sampler.Sample(columns, step.begin, step.end, 0, s, schedule_.NodeRanges(states[step.state]), batch);
    for (const int64_t v : batch.unique) {
      if (const uint64_t row = layout_.row_of(v); row >= lo && row < hi) own[s].push_back(row);
    }
    step_most = std::max<uint64_t>(step_most, own[s].size());
  }
  std::vector<uint64_t> flight;
  for (uint64_t w = 0; w + run_ahead < probe || (w == 0 && probe > 0); ++w) {
    flight.clear();
    for (uint64_t s = w; s < std::min(probe, w + run_ahead + 1); ++s) flight.insert(flight.end(), own[s].begin(), own[s].end());
    std::sort(flight.begin(), flight.end());
    flight_most = std::max<uint64_t>(flight_most, std::unique(flight.begin(), flight.end()) - flight.begin());
  }
  return std::pair<uint64_t, uint64_t>{step_most, flight_most};
}

// Below this a rank's rows are read from the page cache whatever the depth.
constexpr uint64_t kMinProbeBytes = 16ull << 20;

Status LpTask::SetUpRowCache() {
  const auto [lo, hi] = HeldRows();
  const uint64_t own_bytes = (hi - lo) * layout_.row_bytes;
  // Each step reads rows at random: the depth the disk wants, probed on the rows this process
  // stores (the rest of its file is holes), unless they are too few to say (the default then).
  if (cfg_.io.queue_depth == 0 && own_bytes >= kMinProbeBytes) {
    SLUICE_ASSIGN_OR_RETURN(depth_choice_, ProbeQueueDepth(table_path_, lo * layout_.row_bytes, own_bytes, cfg_.io,
                                                           cfg_.storage.budget.value));
    cfg_.io.queue_depth = static_cast<int>(depth_choice_->depth);
  }
  RowPlanInput in = RowPlanFor();
  SLUICE_ASSIGN_OR_RETURN(const auto probed, ProbeOwnRows(in.run_ahead));
  // Later steps are drawn alike (the global shuffle): the probe's most with a quarter to spare
  // (the plan adds it to a step's).
  in.sampled_rows_per_step = probed.first;
  in.in_flight_rows = probed.second + probed.second / 4;
  Result<RowMemoryPlan> row_planned = PlanRowMemory(in);
  if (!row_planned.ok()) return WithEvaluationHint(row_planned.status());
  row_plan_ = *row_planned;
  row_cache_ = std::make_unique<RowCache>(RowCacheOptionsFor(row_plan_, cfg_.storage.planner));
  row_arena_ = AlignedBuffer(row_plan_.cache_rows * layout_.row_bytes, 4096);
  SLUICE_ASSIGN_OR_RETURN(table_, RowFile::Open(table_path_, layout_.row_bytes, layout_.num_rows(),
                                                /*writable=*/true, RowFileOptionsFrom(cfg_.io)));
  row_offsets_ = {0, layout_.num_rows()};
  row_backing_ = std::make_unique<RowFileBacking>(table_.get(), &row_offsets_, [](const RowKey&, std::byte*) {},
                                                  /*all_written=*/true, /*staging_rows=*/0);
  row_ctx_ = LpRowCache{row_cache_.get(), row_arena_.data(), row_backing_.get(), row_plan_.run_ahead, lo, hi};
  plan_ = PartitionMemoryPlan();
  plan_.predicted_bytes = row_plan_.predicted_bytes;
  return Status::Ok();
}

std::string LpTask::DescribeRowPlan() const {
  const auto [lo, hi] = HeldRows();
  return "out of core, budget " + FormatBytes(cfg_.storage.budget.value) + ": row cache " +
         FormatCount(static_cast<double>(row_plan_.cache_rows)) + " of this process's " +
         FormatCount(static_cast<double>(hi - lo)) + " rows (" + FormatBytes(row_plan_.cache_bytes) +
         " with its index; planner " + PlannerKindName(cfg_.storage.planner) + ", window " +
         std::to_string(row_plan_.window) + " steps, run-ahead " + std::to_string(row_plan_.run_ahead) +
         CacheBelowStepsNote(row_plan_) + "), pipeline " + FormatBytes(row_plan_.pipeline_bytes) + "; node table " +
         FormatBytes(table_bytes()) +
         " on disk; predicted peak " + FormatBytes(row_plan_.predicted_bytes);
}

std::map<std::string, std::string> LpTask::Conditions() const {
  if (cfg_.train.schedule != Schedule::kPartitions) return {};
  // carry_over renames each epoch's ordering: it shapes the trajectory as the resident count does.
  return {{"resident partitions", std::to_string(plan_.resident)},
          {"storage.carry_over", cfg_.storage.carry_over ? "true" : "false"}};
}

std::string LpTask::Describe() const {
  char line[512];
  std::snprintf(line, sizeof line,
                "sluice train: %s, %llu nodes, %llu relations, %llu training edges, %u partitions",
                cfg_.dataset.c_str(), static_cast<unsigned long long>(layout_.num_nodes()),
                static_cast<unsigned long long>(num_relations_),
                static_cast<unsigned long long>(schedule_.num_train_edges()), partitions());
  std::string text = line;
  if (cfg_.train.scoring == Scoring::kAll) {
    text += "\n  scoring: every node (1vsAll)";
  } else {
    text += "\n  scoring: " + std::to_string(cfg_.train.negatives) + " sampled negatives per chunk of " +
            std::to_string(std::max(1, cfg_.train.batch / cfg_.train.chunks)) + " edges";
    if (cfg_.train.own_negative) text += ", and each query's own entity";
  }
  return text;
}

// What the partition buffer's plan costs, said where it matters: no spare slot (each swap waits
// for the leaving partition's last step) and few partitions resident of many (each stays away
// long between visits, which costs quality: docs/link_prediction.md, "The partition schedule's
// quality gap"). `one_slot_more`: the budget that would hold a spare slot.
std::string PartitionPlanAdvice(uint32_t slots, uint32_t resident, uint32_t partitions, uint64_t one_slot_more) {
  std::string advice;
  if (slots <= resident) {
    advice += "; no spare slot: each swap waits for the leaving partition's last step (a budget of " +
              FormatBytes(one_slot_more) + ", or twice the partitions, lets loads overlap training)";
  }
  if (resident < 4 && partitions > 2 * resident) {
    advice += "; few partitions resident: each stays away long between visits, which costs quality "
              "(FB15k-237: 0.006 MRR at 2 of 8, none at 8 of 32 in the same memory); " +
              std::to_string(4 * partitions) + " partitions in the same budget close that";
  }
  return advice;
}

std::string LpTask::MemoryPlan() const {
  if (row_cached()) return DescribeRowPlan();
  const std::string predicted = "; predicted peak " + FormatBytes(plan_.predicted_bytes);
  if (in_memory_) {
    return "in memory, node table " + FormatBytes(table_bytes()) + " (embeddings + Adagrad state)" +
           (across_processes() ? ", this rank holds its rows: " + FormatBytes(held_bytes()) : "") + predicted;
  }
  return "budget " + FormatBytes(cfg_.storage.budget.value) + " = reserved " +
         FormatBytes(plan_.reserved_bytes) + " + " + std::to_string(plan_.slots) +
         " partition slots of " + FormatBytes(layout_.block_bytes()) + "; node table " +
         FormatBytes(table_bytes()) + " on disk; " + std::to_string(plan_.resident) + " of " +
         std::to_string(partitions()) + " partitions resident per buffer state" + predicted +
         PartitionPlanAdvice(plan_.slots, plan_.resident, partitions(),
                             cfg_.storage.budget.value + layout_.block_bytes());
}

Result<EpochOutcome> LpTask::TrainEpoch(uint64_t epoch, uint64_t first_step, StepSink& sink) {
  // Data parallel: the stepper addresses the rows this process holds (not by partition), or
  // out of core those the row cache holds for each step.
  if (dp_ != nullptr) stepper_->HoldRows(memory_table_.data(), HeldRows().first);
  LpEpochContext ctx{cfg_, layout_, schedule_, *sampler_, *stepper_, cache_.get(),
                     in_memory_ && dp_ == nullptr ? memory_table_.data() : nullptr, plan_.slots, stats_,
                     device_rows_.get()};
  ctx.neighbors = neighbors_.get();
  if (row_cached()) ctx.rows = &row_ctx_;
  return TrainLpEpoch(ctx, epoch, first_step, sink);
}

// Brings the table file up to date (out of core: the dirty slots or rows; in memory: the whole
// table; across processes in memory nothing: checkpoints and evaluation take the rows from memory).
Status LpTask::SyncTable() {
  if (row_cached()) {
    SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
    SLUICE_RETURN_IF_ERROR(FlushRowCache(*row_cache_, row_arena_.data(), layout_.row_bytes, *row_backing_, *io));
    return table_->Sync();
  }
  if (across_processes()) return Status::Ok();
  if (in_memory_) {
    return WriteFileAtomic(table_path_,
                           std::span<const std::byte>(memory_table_.data(), table_bytes()));
  }
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
  SLUICE_RETURN_IF_ERROR(cache_->FlushDirty(*io));
  return table_->Sync();
}

Status LpTask::Save(CheckpointWriter& writer) {
  if (across_processes()) {  // every rank's own rows as its shard, rank 0's manifest
    SLUICE_RETURN_IF_ERROR(
        CollectRowShards(*dp_, writer, "nodes.bin", sharded_->bounds(), layout_.row_bytes, HeldRowsReader()));
  } else {
    SLUICE_RETURN_IF_ERROR(SyncTable());
    SLUICE_RETURN_IF_ERROR(writer.CopyIn(table_path_, "nodes.bin", in_memory_ ? nullptr : &table_->dirty()));
  }
  if (LinkModel* builtin = stepper_->builtin()) {
    SLUICE_RETURN_IF_ERROR(SaveTorch(writer, "relations.pt", builtin->relations().detach().to(torch::kCPU).clone()));
  } else {
    SLUICE_RETURN_IF_ERROR(SaveTorch(writer, "dense.pt", stepper_->model_ptr()));
  }
  if (stepper_->encoder() != nullptr) SLUICE_RETURN_IF_ERROR(SaveTorch(writer, "encoder.pt", stepper_->encoder()));
  return SaveTorch(writer, "relation_optimizer.pt", stepper_->relation_optimizer());
}

Result<torch::Tensor> LpTask::AllNodeEmbeddings() {
  torch::Tensor all = torch::empty({static_cast<int64_t>(layout_.num_nodes()), cfg_.model.dim});
  SLUICE_RETURN_IF_ERROR(ReadNodeRange(0, layout_.num_nodes(), all.data_ptr<float>()));
  return stepper_->encoder() != nullptr ? EncodeAll(all) : Result<torch::Tensor>(all);
}

Status LpTask::ReadNodeRange(uint64_t first, uint64_t n, float* dst) const {
  const uint64_t d = static_cast<uint64_t>(cfg_.model.dim);
  const bool from_memory = ReadsMemoryTable();
  File file;
  if (!from_memory && n > 0) {
    SLUICE_ASSIGN_OR_RETURN(file, File::Open(rows_path_.empty() ? table_path_ : rows_path_, OpenMode::kRead, false));
  }
  std::vector<std::byte> held;
  const uint64_t start = first, end = first + n;
  for (BlockId b = layout_.block_of(static_cast<int64_t>(first)); first < end; ++b) {  // a block's run of rows at a time
    const uint64_t lo = std::max(first, layout_.bounds[b]), hi = std::min(end, layout_.bounds[b + 1]);
    const uint64_t at = layout_.row_of(static_cast<int64_t>(lo)) * layout_.row_bytes;
    const std::byte* rows = nullptr;
    if (from_memory) {  // the memory table holds rows HeldRows() on (every row in one process)
      rows = memory_table_.data() + at - HeldRows().first * layout_.row_bytes;
    } else {
      held.resize((hi - lo) * layout_.row_bytes);
      SLUICE_RETURN_IF_ERROR(PreadFull(file, held.data(), held.size(), at));
      rows = held.data();
    }
    for (uint64_t v = lo; v < hi; ++v) std::memcpy(dst + (v - start) * d, rows + (v - lo) * layout_.row_bytes, d * 4);
    first = hi;
  }
  return Status::Ok();
}

Result<torch::Tensor> LpTask::NodeEmbeddings(const std::vector<int64_t>& ids) {
  const int64_t d = cfg_.model.dim;
  torch::Tensor out = torch::empty({static_cast<int64_t>(ids.size()), d});
  float* dst = out.data_ptr<float>();
  const bool from_memory = ReadsMemoryTable();
  File file;
  if (!from_memory) {
    SLUICE_ASSIGN_OR_RETURN(file, File::Open(rows_path_.empty() ? table_path_ : rows_path_, OpenMode::kRead, false));
  }
  std::vector<std::byte> row(layout_.row_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t at = layout_.row_of(ids[i]) * layout_.row_bytes;
    const std::byte* src = nullptr;
    if (from_memory) {
      src = memory_table_.data() + at;
    } else {
      SLUICE_RETURN_IF_ERROR(PreadFull(file, row.data(), static_cast<size_t>(d) * 4, at));
      src = row.data();
    }
    std::memcpy(dst + static_cast<int64_t>(i) * d, src, static_cast<size_t>(d) * 4);
  }
  return out;
}

LpEvalBytes LpTask::EvalBytes() const {
  const bool training = purpose_ == Purpose::kTrain;
  if (training && (cfg_.eval.every <= 0 || ValidationSplit().empty())) return {};
  const Manifest& mf = dataset_.manifest();
  LpEvalShape shape;
  shape.num_nodes = layout_.num_nodes();
  shape.dim = static_cast<uint64_t>(cfg_.model.dim);
  for (const auto& [split, count] : mf.edges) {
    shape.all_edges += count;
    shape.largest_split = std::max(shape.largest_split, count);
    // training validates on "valid"; `sluice eval` ranks the split it is given
    if (training ? split == "valid" : split != "train") shape.ranked_edges = std::max(shape.ranked_edges, count);
  }
  shape.encoder = stepper_->encoder() != nullptr;
  if (across_processes()) {  // NodesAcrossProcesses
    shape.world = dp_->world_size();
    for (int q = 0; q < shape.world; ++q) {
      const auto [lo, hi] = ScoredNodes(q);
      shape.scored_nodes = std::max(shape.scored_nodes, hi - lo);
    }
    const auto [own_lo, own_hi] = OwnRows();
    if (row_cached()) shape.own_rows = own_hi - own_lo;
  }
  shape.transe = !factory_ && cfg_.model.decoder == Decoder::kTransE;
  shape.threads = tbb::this_task_arena::max_concurrency();
  LpEvalBytes e = EvalBytesFor(cfg_, shape);
  if (stepper_->encoder() != nullptr) {  // the whole training graph's neighbours, kept
    e.kept += 2 * CsrGraph::BytesFor(layout_.num_nodes(), mf.edges.count("train") ? mf.edges.at("train") : 0);
  }
  return e;
}

Status LpTask::WithEvaluationHint(const Status& refused) const {
  const LpEvalBytes eval = EvalBytes();
  const uint64_t step = stepper_->model().StepBytes();
  const uint64_t added = eval.kept + (eval.transient > step ? eval.transient - step : 0);
  if (added == 0) return refused;
  return Status(refused.code(),
                refused.message() + "; evaluation adds " + FormatBytes(added) + " to it (" +
                    (ranker_->Exact(layout_.num_nodes())
                         ? "every node's row and scores against every node: eval.exact_max_nodes below " +
                               std::to_string(layout_.num_nodes()) + " ranks against sampled nodes, "
                         : std::string()) +
                    "eval.every: 0 trains without it)");
}

Result<torch::Tensor> LpTask::EncodeAll(const torch::Tensor& rows) {
  const int64_t n = rows.size(0);
  if (eval_neighbors_ == nullptr) {
    std::vector<int64_t> src, rel, dst;
    SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, "train", src, rel, dst));
    eval_neighbors_ = std::make_unique<LinkNeighborSampler>(static_cast<uint64_t>(n), cfg_.model.fanout,
                                                            cfg_.train.seed);
    eval_neighbors_->SetGraph(src, dst);
  }
  torch::NoGradGuard no_grad;
  SageLinkEncoder& encoder = *stepper_->encoder();
  torch::Tensor out = torch::empty_like(rows);
  std::vector<int64_t> seeds, offsets, nbr;
  constexpr int64_t kBlock = 1 << 16;
  for (int64_t lo = 0; lo < n; lo += kBlock) {
    const int64_t hi = std::min(n, lo + kBlock);
    seeds.resize(static_cast<size_t>(hi - lo));
    for (int64_t v = lo; v < hi; ++v) seeds[static_cast<size_t>(v - lo)] = v;
    eval_neighbors_->SampleIds(seeds, offsets, nbr);
    const auto ids = [](std::vector<int64_t>& v) {
      return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kInt64);
    };
    out.slice(0, lo, hi).copy_(encoder.Aggregate(rows.slice(0, lo, hi), rows, ids(offsets), ids(nbr)));
  }
  return out;
}

Result<Metrics> LpTask::Evaluate(const std::string& split) {
  if (!dataset_.Has("edges." + split + ".src")) {
    return NotFound("dataset " + cfg_.dataset + " has no '" + split + "' split");
  }
  // Out of core the cache's dirty rows go to the table file the ranking reads (in memory it reads
  // the memory table: writing the table's file would only cost time).
  if (purpose_ == Purpose::kTrain && !ReadsMemoryTable()) SLUICE_RETURN_IF_ERROR(SyncTable());
  LpNodes nodes;
  nodes.num_nodes = layout_.num_nodes();
  if (across_processes()) {
    SLUICE_ASSIGN_OR_RETURN(nodes, NodesAcrossProcesses(split));
  } else if (ranker_->Exact(nodes.num_nodes) && stepper_->encoder() == nullptr) {
    // The ends, then every node's row a chunk at a time: never the whole table in memory.
    SLUICE_ASSIGN_OR_RETURN(nodes.ids, ranker_->EndsRead(split));
    SLUICE_ASSIGN_OR_RETURN(nodes.rows, NodeEmbeddings(nodes.ids));
    nodes.read = [this](uint64_t first, uint64_t n, torch::Tensor& out) {
      out = torch::empty({static_cast<int64_t>(n), cfg_.model.dim});
      return ReadNodeRange(first, n, out.data_ptr<float>());
    };
  } else if (ranker_->Exact(nodes.num_nodes) || stepper_->encoder() != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(nodes.rows, AllNodeEmbeddings());
  } else {  // against sampled nodes: only the rows the ranking reads
    SLUICE_ASSIGN_OR_RETURN(nodes.ids, ranker_->NodesRead(split, nodes.num_nodes));
    SLUICE_ASSIGN_OR_RETURN(nodes.rows, NodeEmbeddings(nodes.ids));
  }
  std::unique_ptr<LpScorer> scorer = Scorer();
  SLUICE_ASSIGN_OR_RETURN(LpMetrics m, ranker_->Rank(split, *scorer, nodes));
  if (purpose_ == Purpose::kTrain && split == "valid" && m.exact) last_valid_own_top_ = m.own_top;
  return Metrics{m.mrr, m.ToString(), m.ToJson()};
}

void LpTask::Summarize(RunSummary& s) const {
  const LpStepTimes& t = stepper_->times();
  const LpEpochStats& e = stats_;
  std::ostringstream line;
  line << "pipeline: sampler stage busy " << e.sampler.busy_s << " s (waiting for ring space "
       << e.sampler.wait_s << " s), edge reader busy " << e.edges.busy_s << " s";
  s.Line(line.str());
  line.str("");
  line << "compute thread: gather " << t.gather_s << " s, forward+backward " << t.compute_s
       << " s, update " << t.update_s << " s, waiting for the pipeline " << e.wait_s << " s";
  s.Line(line.str());
  line.str("");
  line << "prefetcher: planning " << e.plan.busy_s << " s, io " << e.io.busy_s
       << " s, io waiting for compute " << e.io.wait_s << " s; ";
  if (row_cached()) {
    line << "row cache: rows loaded " << e.rows_loaded << ", written back " << e.rows_written;
  } else {
    line << "partition loads " << e.plan_stats.loads << ", write-backs " << e.plan_stats.write_backs;
  }
  s.Line(line.str());
  s.Set("time", "sampler_busy_s", e.sampler.busy_s), s.Set("time", "edges_busy_s", e.edges.busy_s);
  s.Set("time", "gather_s", t.gather_s), s.Set("time", "compute_s", t.compute_s);
  s.Set("time", "update_s", t.update_s), s.Set("time", "pipeline_wait_s", e.wait_s);
  s.Set("prefetcher", "plan_s", e.plan.busy_s), s.Set("prefetcher", "io_s", e.io.busy_s);
  s.Set("prefetcher", "io_wait_s", e.io.wait_s);
  s.Set("prefetcher", "partition_loads", e.plan_stats.loads);
  s.Set("prefetcher", "write_backs", e.plan_stats.write_backs);
  if (row_cached()) {
    s.Set("prefetcher", "rows_loaded", e.rows_loaded), s.Set("prefetcher", "rows_written", e.rows_written);
    s.Set("memory", "cache_rows", row_plan_.cache_rows);
    SummarizeQueueDepth(s, cfg_.io.EffectiveQueueDepth(), depth_choice_ ? &*depth_choice_ : nullptr);
  }
  if (!in_memory_) SummarizeEpochStartLoads(s, "prefetcher", row_cached() ? "rows" : "partitions", e.epoch_start_loads);
  if (last_valid_own_top_ >= 0) s.Set("", "own_top_last_validation", last_valid_own_top_);
  const bool bilinear =
      !factory_ && (cfg_.model.decoder == Decoder::kDistMult || cfg_.model.decoder == Decoder::kComplEx);
  if (last_valid_own_top_ > 0.5 && bilinear && cfg_.model.relation_init_scale == 0) {
    char share[16];
    std::snprintf(share, sizeof share, "%.0f%%", 100 * last_valid_own_top_);
    s.Line(std::string("hint: the last validation ranked the query's own entity first for ") + share +
           " of its queries; where relations are symmetric (an undirected graph) relations that start "
           "near one keep it there: try model.relation_init_scale: 1 (docs/link_prediction.md)");
  }
  s.Set("memory", "mode", in_memory_ ? "in_memory" : "out_of_core");
  s.Set("memory", "budget_bytes", in_memory_ ? uint64_t{0} : cfg_.storage.budget.value);
  s.Set("memory", "table_bytes", table_bytes()), s.Set("memory", "slots", plan_.slots);
  s.Set("memory", "resident", plan_.resident), s.Set("memory", "partitions", partitions());
  s.Set("memory", "reserved_bytes", plan_.reserved_bytes);
  s.Set("memory", "predicted_bytes", plan_.predicted_bytes);
  if (!in_memory_) {  // evaluation's share of the plan (0 when the run does not evaluate)
    const LpEvalBytes eval = EvalBytes();
    s.Set("memory", "eval_kept_bytes", eval.kept), s.Set("memory", "eval_transient_bytes", eval.transient);
  }
  if (device_rows_ != nullptr) SummarizeDevice(s, *acc_, *device_rows_, e.device_wall_s);
  if (dp_ != nullptr) SummarizeDataParallel(*dp_, layout_.num_rows(), s);
}

std::string LpTask::MemorySummary() const {
  return std::string(in_memory_ ? "in memory"
                                : "out of core, budget " + FormatBytes(cfg_.storage.budget.value)) +
         ", node table " + FormatBytes(table_bytes()) +
         (across_processes() ? " (this rank's rows " + FormatBytes(held_bytes()) + ")" : "") +
         (row_cached() ? ", row cache " + FormatBytes(row_plan_.cache_rows * layout_.row_bytes) : "");
}

// Original names (or ids) of nodes or relations, when the dataset stores them.
Result<std::vector<std::string>> Names(const Dataset& ds, const std::string& what, uint64_t count) {
  std::vector<std::string> names;
  if (ds.Has(what + ".names.offsets")) {
    SLUICE_ASSIGN_OR_RETURN(auto offsets, ds.ReadInt64(what + ".names.offsets"));
    SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, ds.File(what + ".names.bytes"));
    SLUICE_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(ds.PathOf(*f)));
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      names.push_back(bytes.substr(static_cast<size_t>(offsets[i]),
                                   static_cast<size_t>(offsets[i + 1] - offsets[i])));
    }
  } else if (ds.Has(what + ".original_ids")) {
    SLUICE_ASSIGN_OR_RETURN(auto ids, ds.ReadInt64(what + ".original_ids"));
    for (int64_t id : ids) names.push_back(std::to_string(id));
  } else {
    for (uint64_t i = 0; i < count; ++i) names.push_back(std::to_string(i));
  }
  return names;
}

Status LpTask::Export(const std::string& dir) {
  SLUICE_ASSIGN_OR_RETURN(torch::Tensor nodes, AllNodeEmbeddings());
  SLUICE_RETURN_IF_ERROR(WriteNpy(dir + "/nodes.npy", "<f4", {nodes.size(0), nodes.size(1)},
                                  nodes.data_ptr<float>(), nodes.numel() * 4));
  std::string readme =
      "nodes.npy: row k is node k (the dataset's renumbered id); nodes.names.txt line k is its "
      "original id.\n";
  if (stepper_->encoder() != nullptr) {
    readme += "nodes.npy holds the encoder's output (model.encoder: graphsage over the whole training "
              "graph), what the decoder scores, not the learnable rows.\n";
  }
  if (LinkModel* builtin = stepper_->builtin()) {
    torch::Tensor rels = builtin->relations().detach().to(torch::kCPU).contiguous();
    SLUICE_RETURN_IF_ERROR(WriteNpy(dir + "/relations.npy", "<f4", {rels.size(0), rels.size(1)},
                                    rels.data_ptr<float>(), rels.numel() * 4));
    readme += "relations.npy: row r is relation r (rows past the relation count are the "
              "reciprocal relations); relations.names.txt line r is its original id.\n";
  } else {
    std::ostringstream dense;
    torch::save(stepper_->model_ptr(), dense);
    SLUICE_RETURN_IF_ERROR(WriteFileAtomic(dir + "/dense.pt", dense.str()));
    readme += "dense.pt: the model " + model_name_ + " (torch::save of the module: its "
              "parameters, the relations' among them); relations.names.txt line r is relation "
              "r's original id.\n";
  }
  for (const char* what : {"nodes", "relations"}) {
    const uint64_t count = std::string(what) == "nodes" ? static_cast<uint64_t>(nodes.size(0))
                                                        : base_relations();
    SLUICE_ASSIGN_OR_RETURN(auto names, Names(dataset_, what, count));
    std::string text;
    for (const auto& n : names) text += n + "\n";
    SLUICE_RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + what + ".names.txt", text));
  }
  return WriteFileAtomic(dir + "/README.txt", readme);
}

Result<int64_t> FindName(const std::vector<std::string>& names, const std::string& x,
                         const char* what) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == x) return static_cast<int64_t>(i);
  }
  return NotFound(std::string("predict: no ") + what + " named '" + x + "'");
}

Result<std::string> LpTask::Predict(const PredictRequest& request) {
  if (request.head.empty() || request.relation.empty()) {
    return InvalidArgument("predict: a link-prediction run needs --head and --relation");
  }
  const uint64_t n = layout_.num_nodes();
  SLUICE_ASSIGN_OR_RETURN(auto node_names, Names(dataset_, "nodes", n));
  SLUICE_ASSIGN_OR_RETURN(auto rel_names, Names(dataset_, "relations", base_relations()));
  SLUICE_ASSIGN_OR_RETURN(int64_t h, FindName(node_names, request.head, "node"));
  SLUICE_ASSIGN_OR_RETURN(int64_t r, FindName(rel_names, request.relation, "relation"));
  torch::NoGradGuard guard;
  SLUICE_ASSIGN_OR_RETURN(torch::Tensor nodes, AllNodeEmbeddings());
  std::unique_ptr<LpScorer> scorer = Scorer();
  torch::Tensor anchor = nodes[h].unsqueeze(0), true_score, all;
  SLUICE_RETURN_IF_ERROR(scorer->Score(anchor, torch::tensor({r}, torch::kInt64), false, anchor,
                                       nodes, true_score, all));
  torch::Tensor scores = all.squeeze(0);
  auto top = scores.topk(std::min<int64_t>(static_cast<int64_t>(request.k), static_cast<int64_t>(n)));
  auto values = std::get<0>(top), idx = std::get<1>(top);
  std::ostringstream out;
  for (int64_t i = 0; i < idx.size(0); ++i) {
    const int64_t t = idx[i].item<int64_t>();
    out << i + 1 << "\t" << node_names[static_cast<size_t>(t)] << "\t" << values[i].item<float>()
        << "\n";
  }
  return out.str();
}

}  // namespace

std::unique_ptr<Task> MakeLpTask(const LpConfig& config) {
  return std::make_unique<LpTask>(config);
}

}  // namespace sluice
