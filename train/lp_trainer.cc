#include "train/lp_trainer.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <unistd.h>
#include <unordered_map>

#include "cache/block_cache.h"
#include "cache/partition_order.h"
#include "common/aligned_buffer.h"
#include "common/crash_point.h"
#include "common/units.h"
#include "prefetch/block_prefetcher.h"
#include "sampler/batch_order.h"
#include "sampler/negatives.h"
#include "sampler/random.h"
#include "storage/dataset.h"
#include "storage/file.h"
#include "storage/row_file.h"
#include "train/lp_model.h"
#include "train/node_table.h"
#include "train/row_optimizers.h"
#include "train/run_dir.h"
#include "train/torch_runtime.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) { g_interrupted.store(true); }

// One training step: edges [begin, end) of the epoch order, trained in buffer state `state`
// (its partitions are the step's blocks and its negatives' ranges; the global shuffle has one
// state holding every partition).
struct LpStep {
  uint32_t state = 0;
  uint64_t begin = 0, end = 0;
};

// A buffer state of the schedule: its partitions (the blocks its steps need, the ranges of
// their negatives) and the dataset ranges of its buckets' edges.
struct LpState {
  std::vector<BlockId> blocks;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) into edges.train.*
  uint64_t edges = 0;
  uint64_t group = 0;  // shuffle key
};

// The edges a state trains (read from the dataset when the state begins) and their order.
struct StateEdges {
  std::vector<int64_t> src, rel, dst;
  std::vector<int64_t> order;  // a shuffle of [0, src.size())
  std::vector<std::byte> scratch;  // read buffer
};

// A step's sampled ids (PrepareStep): everything that does not need the rows, so it can run a
// step ahead on another thread. head/tail/tail_neg/head_neg index `unique` (first-occurrence
// order: heads, tails, tail negatives, head negatives); rel holds relation ids.
struct LpSampled {
  uint64_t b = 0, q = 0;  // edges, queries (2b when reciprocal)
  uint32_t chunks = 0, per_chunk = 0;
  std::vector<int64_t> head, rel, tail, tail_neg, head_neg, unique;
};

// Seconds per stage. sampler_busy_s: PrepareStep wherever it ran; sample_s: the compute thread
// waiting for (or running) it; gather_s includes the row addresses.
struct TimeSplit {
  double sampler_busy_s = 0, sample_s = 0, gather_s = 0, compute_s = 0, update_s = 0;
  double wait_s = 0, edges_s = 0;
};

class LpRun {
 public:
  explicit LpRun(LpConfig config) : cfg_(std::move(config)) {}

  Status Open(bool training);
  Status Train(const LpTrainOptions& options);
  Result<LpMetrics> Evaluate(const std::string& split);
  Status LoadCheckpoint(const std::string& dir);
  // What a checkpoint must share with the run that resumes it: the model and train sections
  // (but the epoch count, which may grow) and the dataset's manifest, as two CRC-32s (zlib).
  Result<std::pair<std::string, std::string>> Fingerprints() const;
  const std::string& latest_checkpoint() const { return latest_; }
  // The newest checkpoint; with prefer_best, the best-validating one when there is one.
  Result<std::string> FindLatest(bool prefer_best = false) const;
  Result<torch::Tensor> AllNodeEmbeddings();
  torch::Tensor relations() const { return relations_; }
  const Dataset& dataset() const { return dataset_; }
  // Read-only use: node rows come from the latest checkpoint's snapshot.
  void ReadRowsFromCheckpoint() { rows_path_ = cfg_.run_dir + "/checkpoints/" + latest_ + "/nodes.bin"; }
  const LpConfig& config() const { return cfg_; }
  uint64_t base_relations() const { return num_relations_ / (cfg_.model.reciprocal ? 2 : 1); }
  const LpDecoder& decoder() const { return decoder_; }
  const NodeTableLayout& layout() const { return layout_; }

 private:
  uint32_t num_partitions() const { return layout_.num_blocks(); }
  Status LoadEdges(const std::string& split, std::vector<int64_t>& src, std::vector<int64_t>& rel,
                   std::vector<int64_t>& dst) const;
  // The epoch's steps (edge positions within their state's order) and its buffer states.
  std::vector<LpStep> EpochSteps(uint64_t epoch, std::vector<LpState>& states) const;
  // Reads state `state`'s edges (the global shuffle: all edges, already in memory) and orders them.
  Status LoadStateEdges(uint64_t epoch, const LpState& state, StateEdges& out);
  Status ReadEdgeRange(int64_t begin, int64_t end, StateEdges& out);
  Status SetUpStorage();
  uint32_t EffectiveRunAhead(const std::vector<LpStep>& steps,
                             const std::vector<LpState>& states) const;
  Status TrainEpoch(uint64_t epoch, uint64_t first_step, const LpTrainOptions& options,
                    double& loss_sum, uint64_t& edges, bool& interrupted);
  // Samples step `index` of the epoch: its queries, negatives and unique rows (uses stamp_, so
  // one call at a time).
  LpSampled PrepareStep(const LpStep& step, const StateEdges& edges, uint64_t epoch,
                        uint64_t index, const std::vector<BlockId>& blocks);
  double TrainStep(LpSampled& sampled, const std::vector<std::byte*>& block_base);
  Status Checkpoint(uint64_t epoch, uint64_t step_in_epoch);
  Status SyncTable();

  LpConfig cfg_;
  Dataset dataset_;
  NodeTableLayout layout_;
  uint64_t num_relations_ = 0;  // including reciprocal ones
  std::vector<int64_t> src_, rel_, dst_;  // all training edges: the global shuffle only
  std::vector<int64_t> buckets_;
  uint64_t num_train_edges_ = 0;
  struct EdgeFile {
    File file;
    DType dtype = DType::kInt64;
  };
  std::vector<EdgeFile> edge_files_;  // src, rel (may be absent), dst: the partition schedule
  LpDecoder decoder_{"distmult"};
  torch::Tensor relations_;
  std::unique_ptr<torch::optim::Optimizer> rel_opt_;
  std::string table_path_;
  bool in_memory_ = true;
  AlignedBuffer memory_table_;
  std::unique_ptr<RowFile> table_;
  std::unique_ptr<BlockCache> cache_;
  uint32_t slots_ = 0;
  uint32_t resident_ = 0;
  uint64_t reserved_bytes_ = 0;
  std::vector<uint64_t> stamp_;  // node -> (step stamp << 32) | local index
  uint32_t stamp_call_ = 0;
  std::string latest_, previous_, best_;  // best_ (validation MRR) is never removed
  std::string rows_path_;  // where AllNodeEmbeddings reads rows (default: the live table)
  // Filtered evaluation: true tails of (h, r) and heads of (t, r), keyed node * R + r.
  std::unordered_map<uint64_t, std::vector<int64_t>> tails_of_, heads_of_;
  bool filter_built_ = false;
  TimeSplit time_;
  PlanStats plan_stats_;
  StageTime plan_time_, io_time_;
  double checkpoint_s_ = 0, eval_s_ = 0;
  uint64_t start_epoch_ = 0, start_step_ = 0;
  int64_t steps_run_ = 0;  // steps trained by this process
};

Status LpRun::LoadEdges(const std::string& split, std::vector<int64_t>& src,
                        std::vector<int64_t>& rel, std::vector<int64_t>& dst) const {
  SLUICE_ASSIGN_OR_RETURN(src, dataset_.ReadInt64("edges." + split + ".src"));
  SLUICE_ASSIGN_OR_RETURN(dst, dataset_.ReadInt64("edges." + split + ".dst"));
  if (dataset_.Has("edges." + split + ".rel")) {
    SLUICE_ASSIGN_OR_RETURN(rel, dataset_.ReadInt64("edges." + split + ".rel"));
  } else {
    rel.assign(src.size(), 0);
  }
  return Status::Ok();
}

Status LpRun::Open(bool training) {
  if (cfg_.dataset.empty()) return InvalidArgument("dataset: not set (the dataset directory)");
  SLUICE_ASSIGN_OR_RETURN(dataset_, Dataset::Open(cfg_.dataset));
  const Manifest& m = dataset_.manifest();
  if (m.task != TaskKind::kLinkPrediction) {
    return InvalidArgument("dataset " + cfg_.dataset + " is not a link-prediction dataset");
  }
  if (cfg_.model.decoder == "complex" && cfg_.model.dim % 2 != 0) {
    return InvalidArgument("model.dim: complex needs an even dimension, got " +
                           std::to_string(cfg_.model.dim));
  }
  layout_ = MakeNodeTableLayout(m.partition_bounds, static_cast<uint32_t>(cfg_.model.dim));
  num_relations_ = std::max<uint64_t>(m.num_relations, 1) * (cfg_.model.reciprocal ? 2 : 1);
  decoder_ = LpDecoder(cfg_.model.decoder);
  table_path_ = cfg_.run_dir + "/tables/nodes.bin";
  in_memory_ = cfg_.storage.mode == "in_memory";
  if (training) {
    num_train_edges_ = m.edges.count("train") ? m.edges.at("train") : 0;
    SLUICE_ASSIGN_OR_RETURN(buckets_, dataset_.ReadInt64("edges.train.buckets"));
    if (cfg_.train.schedule == "shuffle") {
      SLUICE_RETURN_IF_ERROR(LoadEdges("train", src_, rel_, dst_));
    } else {  // streamed per buffer state: only its buckets' edges are in memory
      for (const char* column : {"src", "rel", "dst"}) {
        const std::string role = std::string("edges.train.") + column;
        if (!dataset_.Has(role)) {
          edge_files_.emplace_back();
          continue;
        }
        SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset_.File(role));
        if (f->dtype != DType::kInt32 && f->dtype != DType::kInt64) {
          return InvalidArgument("dataset " + cfg_.dataset + ": " + role + " is " +
                                 DTypeName(f->dtype) + ", expected int32 or int64");
        }
        SLUICE_ASSIGN_OR_RETURN(File file, File::Open(dataset_.PathOf(*f), OpenMode::kRead, false));
        edge_files_.push_back({std::move(file), f->dtype});
      }
    }
  }
  relations_ = torch::empty({static_cast<int64_t>(num_relations_), cfg_.model.dim});
  {
    // Pure function of the seed, like the node rows.
    auto a = relations_.accessor<float, 2>();
    const Key k = Key(cfg_.train.seed).With(0x7AB1E).With(1);
    for (int64_t r = 0; r < a.size(0); ++r) {
      for (int64_t j = 0; j < a.size(1); ++j) {
        // DistMult/ComplEx relations start near one so early products are not vanishingly small.
        const double u = 2.0 * k.With(r).Unit(j) - 1.0;
        a[r][j] = static_cast<float>(cfg_.model.decoder == "transe" ? u * cfg_.model.init_scale
                                                                    : 1.0 + 0.1 * u);
      }
    }
  }
  relations_.set_requires_grad(true);
  if (cfg_.train.relation_optimizer == "adam") {
    rel_opt_ = std::make_unique<torch::optim::Adam>(
        std::vector<torch::Tensor>{relations_}, torch::optim::AdamOptions(cfg_.train.relation_lr));
  } else {
    rel_opt_ = std::make_unique<torch::optim::Adagrad>(
        std::vector<torch::Tensor>{relations_},
        torch::optim::AdagradOptions(cfg_.train.relation_lr));
  }
  stamp_.assign(layout_.num_nodes(), 0);
  return Status::Ok();
}

// The partition schedule: per buffer state, the edges of its buckets shuffled together, in
// batches; negatives come from the state's partitions (as Marius does). The global shuffle:
// one permutation, in batches, one state holding every partition.
std::vector<LpStep> LpRun::EpochSteps(uint64_t epoch, std::vector<LpState>& states) const {
  std::vector<LpStep> steps;
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  const uint32_t p = num_partitions();
  states.clear();
  if (cfg_.train.schedule == "shuffle") {
    LpState all;
    for (BlockId b = 0; b < p; ++b) all.blocks.push_back(b);
    all.edges = src_.size();
    states.push_back(all);
    for (uint64_t b = 0; b < all.edges; b += batch) {
      steps.push_back({0, b, std::min<uint64_t>(b + batch, all.edges)});
    }
    return steps;
  }
  auto made = MakePartitionOrder(p, std::max<uint32_t>(resident_, std::min<uint32_t>(p, 2)),
                                 cfg_.train.ordering == "beta"         ? OrderingKind::kBeta
                                 : cfg_.train.ordering == "randomized" ? OrderingKind::kRandomized
                                 : cfg_.train.ordering == "spread"     ? OrderingKind::kSpread
                                                                       : OrderingKind::kSplit,
                                 cfg_.train.seed + epoch);
  SLUICE_CHECK(made.ok(), "%s", made.status().ToString().c_str());
  for (size_t g = 0; g < made->states.size(); ++g) {
    const BufferState& buffer = made->states[g];
    LpState state;
    for (size_t k = 0; k < buffer.buckets.size(); ++k) {
      const auto [i, j] = buffer.buckets[k];
      int64_t begin = buckets_[uint64_t{i} * p + j], end = buckets_[uint64_t{i} * p + j + 1];
      if (!buffer.pieces.empty()) {  // split: this state's piece of the bucket
        const auto [piece, pieces] = buffer.pieces[k];
        const int64_t n = end - begin;
        end = begin + n * (piece + 1) / pieces;
        begin += n * piece / pieces;
      }
      if (begin < end) {
        state.ranges.push_back({begin, end});
        state.edges += static_cast<uint64_t>(end - begin);
      }
    }
    if (state.edges == 0) continue;
    state.blocks.assign(buffer.resident.begin(), buffer.resident.end());
    state.group = epoch * 1'000'003 + g;
    const uint32_t index = static_cast<uint32_t>(states.size());
    for (uint64_t b = 0; b < state.edges; b += batch) {
      steps.push_back({index, b, std::min<uint64_t>(b + batch, state.edges)});
    }
    states.push_back(std::move(state));
  }
  return steps;
}

Status LpRun::ReadEdgeRange(int64_t begin, int64_t end, StateEdges& out) {
  const uint64_t n = static_cast<uint64_t>(end - begin);
  std::vector<int64_t>* columns[3] = {&out.src, &out.rel, &out.dst};
  for (int c = 0; c < 3; ++c) {
    std::vector<int64_t>& col = *columns[c];
    const size_t base = col.size();
    col.resize(base + n);
    if (!edge_files_[c].file.valid()) continue;  // no relation column: relation 0
    const uint32_t width = edge_files_[c].dtype == DType::kInt32 ? 4 : 8;
    out.scratch.resize(n * width);
    SLUICE_RETURN_IF_ERROR(PreadFull(edge_files_[c].file, out.scratch.data(), n * width,
                                     static_cast<uint64_t>(begin) * width));
    if (width == 8) {
      std::memcpy(col.data() + base, out.scratch.data(), n * 8);
    } else {
      const int32_t* narrow = reinterpret_cast<const int32_t*>(out.scratch.data());
      for (uint64_t i = 0; i < n; ++i) col[base + i] = narrow[i];
    }
  }
  return Status::Ok();
}

Status LpRun::LoadStateEdges(uint64_t epoch, const LpState& state, StateEdges& out) {
  if (cfg_.train.schedule == "shuffle") {
    out.order = EpochPermutation(src_.size(), cfg_.train.seed, epoch);
    return Status::Ok();
  }
  out.src.clear(), out.rel.clear(), out.dst.clear();
  for (auto [begin, end] : state.ranges) SLUICE_RETURN_IF_ERROR(ReadEdgeRange(begin, end, out));
  const int64_t n = static_cast<int64_t>(out.src.size());
  const int64_t nodes = static_cast<int64_t>(layout_.num_nodes());
  for (int64_t i = 0; i < n; ++i) {
    if (out.src[i] < 0 || out.src[i] >= nodes || out.dst[i] < 0 || out.dst[i] >= nodes ||
        out.rel[i] < 0 || static_cast<uint64_t>(out.rel[i]) >= std::max<uint64_t>(dataset_.manifest().num_relations, 1)) {
      return Corruption("dataset " + cfg_.dataset + ": training edge " +
                        std::to_string(state.ranges.front().first + i) + " has an id out of range");
    }
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> one = {{{0, n}}};
  out.order = GroupedOrder(one, cfg_.train.seed, state.group);
  return Status::Ok();
}

Status LpRun::SetUpStorage() {
  const uint32_t p = num_partitions();
  // Reserved: what the process holds already (libtorch's code and allocator, the edges just
  // read), the per-node stamp table, and one step's tensors (the score matrices dominate:
  // about four [queries x negatives] float tensors per corrupted side), plus 32 MiB slack.
  const uint64_t queries = static_cast<uint64_t>(cfg_.train.batch) * (cfg_.model.reciprocal ? 2 : 1);
  const uint64_t sides = cfg_.model.reciprocal ? 1 : 2;
  const uint64_t step_bytes = queries * static_cast<uint64_t>(cfg_.train.negatives) * 16 * sides +
                              queries * static_cast<uint64_t>(cfg_.model.dim) * 4 * 16;
  reserved_bytes_ = CurrentRssBytes() + step_bytes + (32ull << 20);
  fs::create_directories(cfg_.run_dir + "/tables");
  if (!fs::exists(table_path_)) {
    SLUICE_RETURN_IF_ERROR(CreateNodeTable(table_path_, layout_, cfg_.train.seed, 0,
                                           cfg_.model.init_scale));
  }
  if (cfg_.train.schedule == "shuffle") {
    resident_ = p;
  } else {
    resident_ = cfg_.storage.resident > 0 ? std::min<uint32_t>(cfg_.storage.resident, p) : 0;
  }
  if (in_memory_) {
    if (resident_ == 0) resident_ = p;
    memory_table_ = AlignedBuffer(layout_.num_rows() * layout_.row_bytes, kDirectAlignBytes);
    SLUICE_ASSIGN_OR_RETURN(File f, File::Open(table_path_, OpenMode::kRead, false));
    SLUICE_RETURN_IF_ERROR(PreadFull(f, memory_table_.data(), layout_.num_rows() * layout_.row_bytes, 0));
    slots_ = p;
    return Status::Ok();
  }
  SLUICE_ASSIGN_OR_RETURN(slots_, SlotsFromBudget(cfg_.storage.budget.value, reserved_bytes_,
                                                  layout_.block_bytes(), std::min<uint32_t>(2, p)));
  slots_ = std::min(slots_, p);
  if (cfg_.storage.slots > 0) {
    if (static_cast<uint32_t>(cfg_.storage.slots) > slots_) {
      return FailedPrecondition("storage.slots = " + std::to_string(cfg_.storage.slots) +
                                ", but the budget " + FormatBytes(cfg_.storage.budget.value) +
                                " holds " + std::to_string(slots_) + " partition slots of " +
                                FormatBytes(layout_.block_bytes()));
    }
    slots_ = static_cast<uint32_t>(cfg_.storage.slots);
  }
  if (resident_ == 0) resident_ = slots_ >= p ? p : std::max<uint32_t>(2, slots_ - 1);
  if (resident_ > slots_ && cfg_.train.schedule == "shuffle") {
    return FailedPrecondition("train.schedule: shuffle needs all " + std::to_string(p) +
                              " partitions in memory, but the cache has " + std::to_string(slots_) +
                              " slots of " + FormatBytes(layout_.block_bytes()) +
                              "; use train.schedule: partitions or a larger storage.budget");
  }
  if (resident_ > slots_) {
    return FailedPrecondition("storage.resident = " + std::to_string(resident_) +
                              " partitions, but the budget " + FormatBytes(cfg_.storage.budget.value) +
                              " holds " + std::to_string(slots_) + " partition slots of " +
                              FormatBytes(layout_.block_bytes()));
  }
  // The partition schedule holds two buffer states' edges (3 columns and the order as int64,
  // plus the read scratch): the current one and the next, read while the current one trains.
  // Reserve for twice the largest state.
  if (cfg_.train.schedule == "partitions") {
    std::vector<LpState> states;
    EpochSteps(0, states);
    uint64_t most = 0;
    for (const LpState& st : states) most = std::max(most, st.edges);
    reserved_bytes_ += 2 * most * 40;
    const uint64_t slot_bytes = AlignUp(layout_.block_bytes(), kDirectAlignBytes);
    auto need = [&] { return reserved_bytes_ + uint64_t{slots_} * slot_bytes; };
    while (need() > cfg_.storage.budget.value && cfg_.storage.slots == 0 && slots_ > resident_) {
      --slots_;
    }
    if (need() > cfg_.storage.budget.value) {
      return FailedPrecondition("the memory budget " + FormatBytes(cfg_.storage.budget.value) +
                                " cannot hold " + std::to_string(slots_) + " partition slots of " +
                                FormatBytes(slot_bytes) + " plus the largest buffer state's " +
                                std::to_string(most) + " edges and the rest (" +
                                FormatBytes(need()) + " in all); raise storage.budget or use more "
                                "partitions");
    }
  }
  RowFileOptions ro = RowFileOptionsFrom(cfg_.io);
  SLUICE_ASSIGN_OR_RETURN(table_, RowFile::Open(table_path_, layout_.row_bytes, layout_.num_rows(),
                                                /*writable=*/true, ro));
  BlockCacheOptions co;
  co.capacity_blocks = slots_;
  co.rows_per_block = layout_.rows_per_block;
  cache_ = std::make_unique<BlockCache>(table_.get(), co);
  return Status::Ok();
}

// The largest run-ahead d (at most the configured one) such that every d + 1 consecutive steps
// need at most `slots_` blocks together (the planner protects the blocks of the last d steps).
uint32_t LpRun::EffectiveRunAhead(const std::vector<LpStep>& steps,
                                  const std::vector<LpState>& states) const {
  const uint32_t p = num_partitions();
  auto blocks_of = [&](const LpStep& s, std::vector<BlockId>& out) { out = states[s.state].blocks; };
  std::vector<uint32_t> count(p, 0);
  uint32_t distinct = 0;
  uint64_t best = cfg_.storage.run_ahead;
  std::vector<BlockId> blocks;
  uint64_t start = 0;
  for (uint64_t t = 0; t < steps.size(); ++t) {
    blocks_of(steps[t], blocks);
    for (BlockId b : blocks) distinct += count[b]++ == 0;
    while (distinct > slots_) {
      blocks_of(steps[start++], blocks);
      for (BlockId b : blocks) distinct -= --count[b] == 0;
    }
    best = std::min<uint64_t>(best, t - start);
  }
  return static_cast<uint32_t>(best);
}

LpSampled LpRun::PrepareStep(const LpStep& step, const StateEdges& edges, uint64_t epoch,
                             uint64_t index, const std::vector<BlockId>& blocks) {
  auto t0 = Clock::now();
  const LpTrainConfig& tc = cfg_.train;
  const bool reciprocal = cfg_.model.reciprocal;
  const uint64_t b = step.end - step.begin;
  const uint64_t base_rel = num_relations_ / (reciprocal ? 2 : 1);
  // Queries: (head, relation, tail) per edge, plus (tail, r^-1, head) when reciprocal.
  const uint64_t q = reciprocal ? 2 * b : b;
  LpSampled out;
  out.b = b;
  out.q = q;
  std::vector<int64_t>& head = out.head;
  std::vector<int64_t>& rel = out.rel;
  std::vector<int64_t>& tail = out.tail;
  head.resize(q), rel.resize(q), tail.resize(q);
  // The state's streamed edges, or (global shuffle) every edge held in memory.
  const std::vector<int64_t>& e_src = edges.src.empty() ? src_ : edges.src;
  const std::vector<int64_t>& e_rel = edges.src.empty() ? rel_ : edges.rel;
  const std::vector<int64_t>& e_dst = edges.src.empty() ? dst_ : edges.dst;
  for (uint64_t i = 0; i < b; ++i) {
    const int64_t e = edges.order[step.begin + i];
    head[i] = e_src[e], rel[i] = e_rel[e], tail[i] = e_dst[e];
    if (reciprocal) {
      head[b + i] = e_dst[e], rel[b + i] = e_rel[e] + static_cast<int64_t>(base_rel),
                tail[b + i] = e_src[e];
    }
  }
  const uint32_t chunks = static_cast<uint32_t>(std::min<uint64_t>(tc.chunks, q));
  const uint32_t per_chunk = static_cast<uint32_t>(tc.negatives);
  std::vector<NodeRange> ranges;  // the state's partitions, in partition order
  std::vector<BlockId> sorted(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end());
  for (BlockId k : sorted) {
    if (layout_.bounds[k] < layout_.bounds[k + 1]) {
      ranges.push_back({static_cast<int64_t>(layout_.bounds[k]), static_cast<int64_t>(layout_.bounds[k + 1])});
    }
  }
  const NegativeSampler negatives = NegativeSampler::Uniform(ranges);
  out.chunks = chunks;
  out.per_chunk = per_chunk;
  std::vector<int64_t>& tail_neg = out.tail_neg;
  std::vector<int64_t>& head_neg = out.head_neg;
  tail_neg = negatives.Sample({tc.seed, epoch, 2 * index}, chunks, per_chunk);
  if (!reciprocal) head_neg = negatives.Sample({tc.seed, epoch, 2 * index + 1}, chunks, per_chunk);
  // Unique rows in first-occurrence order (heads, tails, tail negatives, head negatives).
  if (++stamp_call_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    stamp_call_ = 1;
  }
  const uint64_t call = uint64_t{stamp_call_} << 32;
  std::vector<int64_t>& unique = out.unique;
  unique.reserve(2 * q + tail_neg.size() + head_neg.size());
  auto local = [&](std::vector<int64_t>& ids) {
    for (int64_t& v : ids) {
      uint64_t& s = stamp_[v];
      if ((s & ~0xFFFFFFFFull) != call) {
        s = call | unique.size();
        unique.push_back(v);
      }
      v = static_cast<int64_t>(s & 0xFFFFFFFFull);
    }
  };
  local(head);
  local(tail);
  local(tail_neg);
  local(head_neg);
  time_.sampler_busy_s += Since(t0);
  return out;
}

double LpRun::TrainStep(LpSampled& sampled, const std::vector<std::byte*>& block_base) {
  auto t0 = Clock::now();
  const LpTrainConfig& tc = cfg_.train;
  const bool reciprocal = cfg_.model.reciprocal;
  const uint64_t q = sampled.q;
  const uint32_t chunks = sampled.chunks, per_chunk = sampled.per_chunk;
  std::vector<int64_t>& head = sampled.head;
  std::vector<int64_t>& rel = sampled.rel;
  std::vector<int64_t>& tail = sampled.tail;
  std::vector<int64_t>& tail_neg = sampled.tail_neg;
  std::vector<int64_t>& head_neg = sampled.head_neg;
  const std::vector<int64_t>& unique = sampled.unique;
  const int64_t d = cfg_.model.dim;
  const int64_t u = static_cast<int64_t>(unique.size());
  std::vector<float*> rows(unique.size());
  for (size_t i = 0; i < unique.size(); ++i) {
    const int64_t v = unique[i];
    const BlockId blk = layout_.block_of(v);
    rows[i] = reinterpret_cast<float*>(block_base[blk] +
                                       (static_cast<uint64_t>(v) - layout_.bounds[blk]) *
                                           layout_.row_bytes);
  }
  const bool bilinear = cfg_.model.decoder != "transe";
  // Bilinear decoders: each use's row copied straight from the table into the batch tensors
  // (heads, tails, negatives), in parallel. TransE: the unique rows, for autograd's gathers.
  torch::Tensor emb;
  LpBatch batch;
  if (bilinear) {
    batch.h = torch::empty({static_cast<int64_t>(q), d});
    batch.t = torch::empty({static_cast<int64_t>(q), d});
    batch.tail_neg = torch::empty({chunks, per_chunk, d});
    if (!reciprocal) batch.head_neg = torch::empty({chunks, per_chunk, d});
    struct Use {
      const std::vector<int64_t>* ids;
      float* out;
    };
    std::vector<Use> uses = {{&head, batch.h.data_ptr<float>()},
                             {&tail, batch.t.data_ptr<float>()},
                             {&tail_neg, batch.tail_neg.data_ptr<float>()}};
    if (!reciprocal) uses.push_back({&head_neg, batch.head_neg.data_ptr<float>()});
    struct Piece {
      size_t use;
      int64_t begin, end;
    };
    std::vector<Piece> pieces;
    for (size_t k = 0; k < uses.size(); ++k) {
      const int64_t m = static_cast<int64_t>(uses[k].ids->size());
      for (int64_t i = 0; i < m; i += 1024) pieces.push_back({k, i, std::min(m, i + 1024)});
    }
    tbb::parallel_for(size_t{0}, pieces.size(), [&](size_t k) {
      const Piece& pc = pieces[k];
      const int64_t* ids = uses[pc.use].ids->data();
      float* out = uses[pc.use].out;
      for (int64_t i = pc.begin; i < pc.end; ++i) {
        std::memcpy(out + i * d, rows[static_cast<size_t>(ids[i])], d * 4);
      }
    });
  } else {
    emb = torch::empty({u, d});
    float* e = emb.data_ptr<float>();
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, u, 512), [&](const auto& r) {
      for (int64_t i = r.begin(); i < r.end(); ++i) std::memcpy(e + i * d, rows[i], d * 4);
    });
  }
  auto t2 = Clock::now();
  time_.gather_s += std::chrono::duration<double>(t2 - t0).count();
  auto index_tensor = [](std::vector<int64_t>& v) {
    return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kInt64);
  };
  const double scale = 1.0 / static_cast<double>(q * (reciprocal ? 1 : 2));
  torch::Tensor grad;        // [u, d], summed per unique row in a fixed order
  torch::Tensor rel_grad;    // [num_relations, d]
  double loss_value = 0;
  if (bilinear) {
    // Bilinear decoders: gradients computed directly (no autograd graph).
    batch.r = relations_.detach().index_select(0, index_tensor(rel));
    LpGrads g = BilinearLossAndGrads(cfg_.model.decoder, tc.loss, tc.margin, batch, scale);
    loss_value = g.loss * scale;
    if (tc.regularizer != "none" && tc.regularization > 0) {
      const double w = tc.regularization * scale * (reciprocal ? 1 : 2);
      const bool n3 = tc.regularizer == "n3";
      loss_value += AddRowPenalty(n3, w, batch.h, g.h);
      loss_value += AddRowPenalty(n3, w, batch.t, g.t);
      loss_value += AddRowPenalty(n3, w, batch.r, g.r);
    }
    // Sum the per-use gradients into per-row ones in use order (heads, tails, tail negatives,
    // head negatives). Each thread owns a range of rows and scans every use, adding those of
    // its rows, so every row is summed in that order whatever the thread count.
    grad = torch::zeros({u, d});
    float* gr = grad.data_ptr<float>();
    std::vector<std::pair<const std::vector<int64_t>*, torch::Tensor>> parts = {
        {&head, g.h.reshape({-1, d}).contiguous()},
        {&tail, g.t.reshape({-1, d}).contiguous()},
        {&tail_neg, g.tail_neg.reshape({-1, d}).contiguous()}};
    if (!reciprocal) parts.push_back({&head_neg, g.head_neg.reshape({-1, d}).contiguous()});
    const int64_t owners = std::max(1, tbb::this_task_arena::max_concurrency());
    tbb::parallel_for(int64_t{0}, owners, [&](int64_t k) {
      const int64_t lo = u * k / owners, hi = u * (k + 1) / owners;
      for (const auto& [idx, gt] : parts) {
        const float* src = gt.template data_ptr<float>();
        const int64_t* ids = idx->data();
        for (size_t i = 0; i < idx->size(); ++i) {
          if (ids[i] < lo || ids[i] >= hi) continue;
          float* __restrict dst = gr + ids[i] * d;
          const float* __restrict x = src + i * static_cast<size_t>(d);
          for (int64_t j = 0; j < d; ++j) dst[j] += x[j];
        }
      }
    });
    rel_grad = torch::zeros({static_cast<int64_t>(num_relations_), d});
    {
      float* rg = rel_grad.data_ptr<float>();
      torch::Tensor c = g.r.contiguous();
      const float* src = c.data_ptr<float>();
      for (size_t i = 0; i < rel.size(); ++i) {
        for (int64_t j = 0; j < d; ++j) rg[rel[i] * d + j] += src[i * static_cast<size_t>(d) + j];
      }
    }
  } else {
    emb.set_requires_grad(true);
    torch::Tensor h = emb.index_select(0, index_tensor(head));
    torch::Tensor t = emb.index_select(0, index_tensor(tail));
    torch::Tensor r = relations_.index_select(0, index_tensor(rel));
    torch::Tensor tn = emb.index_select(0, index_tensor(tail_neg)).view({chunks, per_chunk, d});
    torch::Tensor tq = decoder_.TailQuery(h, r);
    torch::Tensor pos = decoder_.Score(tq, t);
    torch::Tensor loss = torch::zeros({});
    torch::Tensor hq;
    torch::Tensor hn;
    if (!reciprocal) {
      hq = decoder_.HeadQuery(r, t);
      hn = emb.index_select(0, index_tensor(head_neg)).view({chunks, per_chunk, d});
    }
    for (uint32_t c = 0; c < chunks; ++c) {
      const int64_t lo = static_cast<int64_t>(q * c / chunks), hi = static_cast<int64_t>(q * (c + 1) / chunks);
      torch::Tensor p = pos.slice(0, lo, hi);
      loss = loss + LpLoss(tc.loss, tc.margin, p, decoder_.ScoreAll(tq.slice(0, lo, hi), tn[c]));
      if (!reciprocal) {
        loss = loss + LpLoss(tc.loss, tc.margin, p, decoder_.ScoreAll(hq.slice(0, lo, hi), hn[c]));
      }
    }
    loss = loss * scale;
    if (tc.regularizer != "none" && tc.regularization > 0) {
      const double w = tc.regularization * scale * (reciprocal ? 1 : 2);
      if (tc.regularizer == "l2") {
        loss = loss + w * (h.pow(2).sum() + t.pow(2).sum() + r.pow(2).sum());
      } else {
        loss = loss + w * (h.abs().pow(3).sum() + t.abs().pow(3).sum() + r.abs().pow(3).sum());
      }
    }
    rel_opt_->zero_grad();
    loss.backward();
    loss_value = loss.item<double>();
    grad = emb.grad().contiguous();
    rel_grad = relations_.grad().clone();
  }
  relations_.mutable_grad() = rel_grad;
  auto t3 = Clock::now();
  time_.compute_s += std::chrono::duration<double>(t3 - t2).count();
  // Row-wise Adagrad into the rows (state in the second half of the row).
  const float* g = grad.data_ptr<float>();
  const float lr = static_cast<float>(tc.lr);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, u, 256), [&](const auto& range) {
    AdagradRows(rows.data(), g, range.begin(), range.end(), d, lr);
  });
  rel_opt_->step();
  time_.update_s += Since(t3);
  return loss_value;
}

Status LpRun::TrainEpoch(uint64_t epoch, uint64_t first_step, const LpTrainOptions& options,
                         double& loss_sum, uint64_t& edges, bool& interrupted) {
  std::vector<LpState> states;
  const std::vector<LpStep> steps = EpochSteps(epoch, states);
  StateEdges state_edges;
  uint32_t loaded_state = ~uint32_t{0};
  const uint32_t p = num_partitions();
  std::vector<std::byte*> block_base(p, nullptr);
  std::unique_ptr<BlockPrefetcher> prefetcher;
  if (!in_memory_) {
    PrefetcherOptions po;
    SLUICE_ASSIGN_OR_RETURN(po.planner, ParsePlannerKind(cfg_.storage.planner));
    po.run_ahead = EffectiveRunAhead(steps, states);
    po.io = cfg_.io;
    po.window_steps = 4096;
    prefetcher = std::make_unique<BlockPrefetcher>(
        cache_.get(), po, [&, p](uint64_t t, std::vector<BlockId>& blocks) {
          if (t + first_step >= steps.size()) return false;
          const LpStep& s = steps[t + first_step];
          blocks.insert(blocks.end(), states[s.state].blocks.begin(), states[s.state].blocks.end());
          return true;
        });
    SLUICE_RETURN_IF_ERROR(prefetcher->Start());
  } else {
    for (BlockId b = 0; b < p; ++b) {
      block_base[b] = memory_table_.data() + uint64_t{b} * layout_.block_bytes();
    }
  }
  auto start = Clock::now();
  auto last_print = start;
  const uint64_t total_edges = num_train_edges_;
  uint64_t done_edges = 0;
  for (uint64_t i = 0; i < first_step && i < steps.size(); ++i) done_edges += steps[i].end - steps[i].begin;
  constexpr uint32_t kNoState = ~uint32_t{0};
  StateEdges next_edges;           // the next buffer state's, read ahead
  uint32_t reading_state = kNoState;
  Status ahead_status;
  tbb::task_group ahead, edges_ahead;
  struct WaitOnExit {
    tbb::task_group& group;
    ~WaitOnExit() { group.wait(); }
  } wait_on_exit{ahead}, wait_on_edges{edges_ahead};
  bool sampling_next = false;
  LpSampled next;
  for (uint64_t s = first_step; s < steps.size(); ++s) {
    const LpStep& step = steps[s];
    if (prefetcher != nullptr) {
      auto w = Clock::now();
      Status ready = prefetcher->WaitReady(s - first_step);
      time_.wait_s += Since(w);
      if (!ready.ok()) {
        prefetcher->Abort();
        return ready;
      }
      for (BlockId b : states[step.state].blocks) block_base[b] = cache_->block_data(b);
    }
    if (step.state != loaded_state) {  // a new buffer state: its edges (read ahead, usually)
      auto r = Clock::now();
      Status read;
      if (reading_state == step.state) {
        edges_ahead.wait();
        read = ahead_status;
        std::swap(state_edges, next_edges);
      } else {
        read = LoadStateEdges(epoch, states[step.state], state_edges);
      }
      reading_state = kNoState;
      time_.edges_s += Since(r);
      if (!read.ok()) {
        if (prefetcher != nullptr) prefetcher->Abort();
        return read;
      }
      loaded_state = step.state;
      // The next state's edges are read on another worker while this one trains.
      uint64_t t = s + 1;
      while (t < steps.size() && steps[t].state == step.state) ++t;
      if (t < steps.size()) {
        reading_state = steps[t].state;
        edges_ahead.run([&, next_state = reading_state] {
          ahead_status = LoadStateEdges(epoch, states[next_state], next_edges);
        });
      }
    }
    LpSampled sampled;
    auto w = Clock::now();
    if (sampling_next) {
      ahead.wait();
      sampled = std::move(next);
    } else {
      sampled = PrepareStep(step, state_edges, epoch, s, states[step.state].blocks);
    }
    time_.sample_s += Since(w);
    // The next step's sampling runs on another worker while this one trains (not across a
    // change of buffer state: its edges are read first).
    sampling_next = s + 1 < steps.size() && steps[s + 1].state == step.state;
    if (sampling_next) {
      ahead.run([&, s] {
        next = PrepareStep(steps[s + 1], state_edges, epoch, s + 1, states[steps[s + 1].state].blocks);
      });
    }
    loss_sum += TrainStep(sampled, block_base) * static_cast<double>(step.end - step.begin);
    edges += step.end - step.begin;
    done_edges += step.end - step.begin;
    CrashPoint("step");
    if (prefetcher != nullptr) {
      for (BlockId b : states[step.state].blocks) cache_->MarkDirty(b);
      prefetcher->Computed(s - first_step);
    }
    ++steps_run_;
    const bool stop_now = g_interrupted.load() ||
                          (options.stop_after_steps >= 0 && steps_run_ >= options.stop_after_steps);
    static const bool tty = isatty(STDERR_FILENO) != 0;
    if (cfg_.progress && ((tty && Since(last_print) > 0.5) || s + 1 == steps.size())) {
      last_print = Clock::now();
      const double el = Since(start);
      const double frac = static_cast<double>(done_edges) / static_cast<double>(total_edges);
      const double rate = static_cast<double>(edges) / std::max(el, 1e-9);
      const double eta = rate > 0 ? static_cast<double>(total_edges - done_edges) / rate : 0;
      const int bar = static_cast<int>(frac * 30);
      std::fprintf(stderr, "%sepoch %llu/%d [%.*s%*s] %5.1f%% loss %.4f %s edges/s ETA %.0fs   ",
                   tty ? "\r" : "", static_cast<unsigned long long>(epoch + 1), cfg_.train.epochs, bar,
                   "##############################", 30 - bar, "", 100 * frac,
                   loss_sum / std::max<double>(1.0, static_cast<double>(edges)),
                   FormatCount(rate).c_str(), eta);
      if (s + 1 == steps.size()) std::fprintf(stderr, "\n");
    }
    if (stop_now && s + 1 < steps.size()) {
      interrupted = true;
      if (prefetcher != nullptr) {
        SLUICE_RETURN_IF_ERROR(prefetcher->Stop());
        plan_stats_.loads += prefetcher->plan_stats().loads;
      }
      return Checkpoint(epoch, s + 1);
    }
  }
  if (prefetcher != nullptr) {
    SLUICE_RETURN_IF_ERROR(prefetcher->Stop());
    // The next epoch's planner starts from an empty cache.
    SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
    SLUICE_RETURN_IF_ERROR(cache_->DropAll(*io));
    const PlanStats& ps = prefetcher->plan_stats();
    plan_stats_.steps += ps.steps;
    plan_stats_.accesses += ps.accesses;
    plan_stats_.loads += ps.loads;
    plan_stats_.evictions += ps.evictions;
    plan_stats_.write_backs += ps.write_backs;
    plan_time_.busy_s += prefetcher->plan_time().busy_s;
    io_time_.busy_s += prefetcher->io_time().busy_s;
    io_time_.wait_s += prefetcher->io_time().wait_s;
  }
  return Status::Ok();
}

// Brings the table file up to date (out of core: the dirty slots; in memory: the whole table).
Status LpRun::SyncTable() {
  if (in_memory_) {
    return WriteFileAtomic(table_path_, std::span<const std::byte>(
                                            memory_table_.data(),
                                            layout_.num_rows() * layout_.row_bytes));
  }
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
  SLUICE_RETURN_IF_ERROR(cache_->FlushDirty(*io));
  return table_->Sync();
}

namespace {
std::string Crc32Hex(const std::string& text) {
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()),
                          static_cast<uInt>(text.size()));
  char out[9];
  std::snprintf(out, sizeof out, "%08lx", static_cast<unsigned long>(crc));
  return out;
}
}  // namespace

Result<std::pair<std::string, std::string>> LpRun::Fingerprints() const {
  LpConfig shape;
  shape.model = cfg_.model;
  shape.train = cfg_.train;
  shape.train.epochs = 0;
  SLUICE_ASSIGN_OR_RETURN(std::string manifest, ReadFileToString(cfg_.dataset + "/manifest.json"));
  return std::make_pair(Crc32Hex(DumpConfig(shape)), Crc32Hex(manifest));
}

Status LpRun::Checkpoint(uint64_t epoch, uint64_t step_in_epoch) {
  auto start = Clock::now();
  SLUICE_RETURN_IF_ERROR(SyncTable());
  const std::string name = "epoch-" + std::to_string(epoch) + "-step-" + std::to_string(step_in_epoch);
  const std::string dir = cfg_.run_dir + "/checkpoints/" + name;
  const std::string temp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp);
  fs::copy_file(table_path_, temp + "/nodes.bin", fs::copy_options::overwrite_existing, ec);
  if (ec) return IoError("checkpoint: copy " + table_path_ + ": " + ec.message());
  CrashPoint("checkpoint");
  {
    torch::Tensor rel = relations_.detach().clone();
    torch::save(rel, temp + "/relations.pt");
    torch::save(*rel_opt_, temp + "/relation_optimizer.pt");
  }
  SLUICE_ASSIGN_OR_RETURN(auto fingerprints, Fingerprints());
  std::ostringstream state;
  state << "{\"epoch\": " << epoch << ", \"step\": " << step_in_epoch << ", \"seed\": "
        << cfg_.train.seed << ", \"config\": \"" << fingerprints.first << "\", \"dataset\": \""
        << fingerprints.second << "\"}\n";
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(temp + "/state.json", state.str()));
  SLUICE_RETURN_IF_ERROR(SyncDirectory(temp));
  CrashPoint("rename");
  fs::remove_all(dir, ec);
  fs::rename(temp, dir, ec);
  if (ec) return IoError("checkpoint: rename " + temp + " to " + dir + ": " + ec.message());
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(cfg_.run_dir + "/checkpoints/latest", name + "\n"));
  // Keep the two newest checkpoints.
  if (!latest_.empty() && latest_ != name) {
    if (!previous_.empty() && previous_ != best_) {
      fs::remove_all(cfg_.run_dir + "/checkpoints/" + previous_, ec);
    }
    previous_ = latest_;
  }
  latest_ = name;
  checkpoint_s_ += Since(start);
  return Status::Ok();
}


Result<std::string> LpRun::FindLatest(bool prefer_best) const {
  std::string name;
  if (prefer_best) {
    std::ifstream best(cfg_.run_dir + "/checkpoints/best");
    if ((best >> name) && fs::exists(cfg_.run_dir + "/checkpoints/" + name)) return name;
  }
  std::ifstream in(cfg_.run_dir + "/checkpoints/latest");
  if (!(in >> name)) return NotFound("no checkpoint in " + cfg_.run_dir + "/checkpoints");
  return name;
}

Status LpRun::LoadCheckpoint(const std::string& name) {
  const std::string dir = cfg_.run_dir + "/checkpoints/" + name;
  std::ifstream state(dir + "/state.json");
  std::string text((std::istreambuf_iterator<char>(state)), std::istreambuf_iterator<char>());
  unsigned long long epoch = 0, step = 0;
  if (std::sscanf(text.c_str(), "{\"epoch\": %llu, \"step\": %llu", &epoch, &step) != 2) {
    return Corruption(dir + "/state.json: unreadable checkpoint state");
  }
  // Checkpoints written before the fingerprints were recorded carry none and are not checked.
  SLUICE_ASSIGN_OR_RETURN(auto fingerprints, Fingerprints());
  auto recorded = [&](const std::string& key) -> std::string {
    const std::string tag = "\"" + key + "\": \"";
    const size_t at = text.find(tag);
    if (at == std::string::npos) return std::string();
    const size_t begin = at + tag.size();
    return text.substr(begin, text.find('"', begin) - begin);
  };
  const std::string config_fp = recorded("config"), dataset_fp = recorded("dataset");
  if (!dataset_fp.empty() && dataset_fp != fingerprints.second) {
    return InvalidArgument(dir + ": checkpoint of another dataset (its manifest differs from " +
                           cfg_.dataset + "/manifest.json); resume on the dataset it was trained "
                           "on, or start a new run_dir");
  }
  if (!config_fp.empty() && config_fp != fingerprints.first) {
    return InvalidArgument(dir + ": checkpoint of another config (its model or train settings, "
                           "other than train.epochs, differ from this run's); resume with the "
                           "run's config.yaml, or start a new run_dir");
  }
  const uint64_t bytes = layout_.num_rows() * layout_.row_bytes;
  std::error_code ec;
  if (fs::file_size(dir + "/nodes.bin", ec) != RowFile::FileBytes(layout_.row_bytes, layout_.num_rows()) ||
      ec) {
    return Corruption(dir + "/nodes.bin: size does not match the model (" + std::to_string(bytes) +
                      " bytes of rows expected)");
  }
  torch::Tensor rel;
  torch::load(rel, dir + "/relations.pt");
  if (rel.sizes() != relations_.sizes()) {
    return Corruption(dir + "/relations.pt: shape does not match the model");
  }
  {
    torch::NoGradGuard guard;
    relations_.copy_(rel);
  }
  torch::load(*rel_opt_, dir + "/relation_optimizer.pt");
  latest_ = name;
  start_epoch_ = epoch;
  start_step_ = step;
  return Status::Ok();
}

Result<torch::Tensor> LpRun::AllNodeEmbeddings() {
  const int64_t n = static_cast<int64_t>(layout_.num_nodes()), d = cfg_.model.dim;
  torch::Tensor all = torch::empty({n, d});
  float* out = all.data_ptr<float>();
  std::vector<std::byte> block(layout_.block_bytes());
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(rows_path_.empty() ? table_path_ : rows_path_,
                                                OpenMode::kRead, false));
  for (BlockId b = 0; b < layout_.num_blocks(); ++b) {
    const std::byte* rows = nullptr;
    if (in_memory_ && memory_table_.size() > 0 && rows_path_.empty()) {
      rows = memory_table_.data() + uint64_t{b} * layout_.block_bytes();
    } else {
      SLUICE_RETURN_IF_ERROR(PreadFull(file, block.data(), block.size(), uint64_t{b} * block.size()));
      rows = block.data();
    }
    for (uint64_t v = layout_.bounds[b]; v < layout_.bounds[b + 1]; ++v) {
      std::memcpy(out + v * d, rows + (v - layout_.bounds[b]) * layout_.row_bytes, d * 4);
    }
  }
  return all;
}

Result<LpMetrics> LpRun::Evaluate(const std::string& split) {
  auto start = Clock::now();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> src, rel, dst;
  SLUICE_RETURN_IF_ERROR(LoadEdges(split, src, rel, dst));
  LpMetrics m;
  m.exact = layout_.num_nodes() <= cfg_.eval.exact_max_nodes;
  m.filtered = cfg_.eval.filtered && m.exact;
  const uint64_t base_rel = num_relations_ / (cfg_.model.reciprocal ? 2 : 1);
  // Known true edges: tails of (h, r) and heads of (r, t) over every split, built once.
  if (m.filtered && !filter_built_) {
    for (const char* split_name : {"train", "valid", "test"}) {
      if (!dataset_.Has(std::string("edges.") + split_name + ".src")) continue;
      std::vector<int64_t> a, r, b;
      SLUICE_RETURN_IF_ERROR(LoadEdges(split_name, a, r, b));
      for (size_t i = 0; i < a.size(); ++i) {
        tails_of_[static_cast<uint64_t>(a[i]) * base_rel + static_cast<uint64_t>(r[i])].push_back(b[i]);
        heads_of_[static_cast<uint64_t>(b[i]) * base_rel + static_cast<uint64_t>(r[i])].push_back(a[i]);
      }
    }
    filter_built_ = true;
  }
  const auto& tails_of = tails_of_;
  const auto& heads_of = heads_of_;
  SLUICE_ASSIGN_OR_RETURN(torch::Tensor nodes, AllNodeEmbeddings());
  torch::Tensor rels = relations_.detach();
  uint64_t n = src.size();
  if (cfg_.eval.max_edges > 0) n = std::min<uint64_t>(n, cfg_.eval.max_edges);
  m.edges = n;
  double rr = 0, h1 = 0, h3 = 0, h10 = 0;
  uint64_t ranked = 0;
  const int64_t batch = 256;
  torch::Tensor candidates_ids;
  torch::Tensor candidates = nodes;
  if (!m.exact) {
    const Key k = Key(cfg_.train.seed).With(0xE7A1);
    std::vector<int64_t> ids(static_cast<size_t>(cfg_.eval.sampled_negatives));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(k.Below(i, layout_.num_nodes()));
    candidates_ids = torch::tensor(ids);
    candidates = nodes.index_select(0, candidates_ids);
  }
  auto rank_rows = [&](const torch::Tensor& q, const std::vector<int64_t>& truth, uint64_t lo,
                       const std::vector<const std::vector<int64_t>*>& known) {
    torch::Tensor truth_t = torch::from_blob(const_cast<int64_t*>(truth.data()) + lo,
                                             {q.size(0)}, torch::kInt64);
    torch::Tensor true_score = decoder_.Score(q, nodes.index_select(0, truth_t));
    torch::Tensor scores = decoder_.ScoreAll(q, candidates);
    if (m.filtered) {
      auto a = scores.accessor<float, 2>();
      for (int64_t i = 0; i < q.size(0); ++i) {
        if (known[i] == nullptr) continue;
        for (int64_t x : *known[i]) a[i][x] = -std::numeric_limits<float>::infinity();
      }
    }
    torch::Tensor ts = true_score.unsqueeze(1);
    torch::Tensor greater = (scores > ts).sum(1).to(torch::kDouble);
    torch::Tensor equal = (scores == ts).sum(1).to(torch::kDouble);
    // In an exact unfiltered ranking the true node ties with itself; filtered, it was removed.
    if (m.exact && !m.filtered) equal = equal - 1;
    torch::Tensor rank = 1 + greater + equal.clamp_min(0) / 2;
    auto ra = rank.accessor<double, 1>();
    for (int64_t i = 0; i < rank.size(0); ++i) {
      const double x = ra[i];
      rr += 1.0 / x;
      h1 += x <= 1;
      h3 += x <= 3;
      h10 += x <= 10;
      ++ranked;
    }
  };
  for (uint64_t lo = 0; lo < n; lo += batch) {
    const uint64_t hi = std::min<uint64_t>(n, lo + batch);
    const int64_t b = static_cast<int64_t>(hi - lo);
    torch::Tensor hs = torch::from_blob(src.data() + lo, {b}, torch::kInt64);
    torch::Tensor ts = torch::from_blob(dst.data() + lo, {b}, torch::kInt64);
    torch::Tensor rs = torch::from_blob(rel.data() + lo, {b}, torch::kInt64);
    torch::Tensor h = nodes.index_select(0, hs), t = nodes.index_select(0, ts);
    std::vector<const std::vector<int64_t>*> known(static_cast<size_t>(b), nullptr);
    // Tails of (h, r, ?).
    if (m.filtered) {
      for (int64_t i = 0; i < b; ++i) {
        auto it = tails_of.find(static_cast<uint64_t>(src[lo + i]) * base_rel + static_cast<uint64_t>(rel[lo + i]));
        known[i] = it == tails_of.end() ? nullptr : &it->second;
      }
    }
    rank_rows(decoder_.TailQuery(h, rels.index_select(0, rs)), dst, lo, known);
    // Heads of (?, r, t): the reciprocal relation's tails, or the head query.
    if (m.filtered) {
      for (int64_t i = 0; i < b; ++i) {
        auto it = heads_of.find(static_cast<uint64_t>(dst[lo + i]) * base_rel + static_cast<uint64_t>(rel[lo + i]));
        known[i] = it == heads_of.end() ? nullptr : &it->second;
      }
    }
    torch::Tensor hq = cfg_.model.reciprocal
                           ? decoder_.TailQuery(t, rels.index_select(0, rs + static_cast<int64_t>(base_rel)))
                           : decoder_.HeadQuery(rels.index_select(0, rs), t);
    rank_rows(hq, src, lo, known);
  }
  const double k = std::max<double>(1.0, static_cast<double>(ranked));
  m.mrr = rr / k, m.hits1 = h1 / k, m.hits3 = h3 / k, m.hits10 = h10 / k;
  eval_s_ += Since(start);
  return m;
}

Status LpRun::Train(const LpTrainOptions& options) {
  auto run_start = Clock::now();
  fs::create_directories(cfg_.run_dir + "/checkpoints");
  ThreadPlan plan = MakeThreadPlan(cfg_.threads, OnlineCores());
  auto handle = ApplyThreadPlan(plan);
  ApplyTorchThreads(plan);
  Result<std::string> latest = options.resume ? FindLatest() : NotFound("not resuming");
  if (options.resume && !latest.ok()) {
    std::printf("resume: %s; starting from the beginning\n", latest.status().message().c_str());
  }
  if (options.resume && latest.ok()) {
    const std::string name = *latest;
    SLUICE_RETURN_IF_ERROR(LoadCheckpoint(name));
    // The table restarts from the snapshot (it may have moved on since).
    fs::create_directories(cfg_.run_dir + "/tables");
    std::error_code ec;
    fs::copy_file(cfg_.run_dir + "/checkpoints/" + name + "/nodes.bin", table_path_ + ".tmp",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError("resume: copy the checkpoint's table: " + ec.message());
    fs::rename(table_path_ + ".tmp", table_path_, ec);
    if (ec) return IoError("resume: rename " + table_path_ + ".tmp: " + ec.message());
  } else {
    std::error_code ec;
    fs::remove(table_path_, ec);  // a fresh run starts from freshly initialised rows
    fs::remove(cfg_.run_dir + "/metrics.jsonl", ec);
  }
  // Written once the checkpoint (if any) is known to belong to this config: a refused resume
  // leaves the run directory as it was.
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(cfg_.run_dir + "/config.yaml", DumpConfig(cfg_)));
  SLUICE_RETURN_IF_ERROR(SetUpStorage());
  std::printf("sluice train: %s, %llu nodes, %llu relations, %zu training edges, %u partitions\n",
              cfg_.dataset.c_str(), static_cast<unsigned long long>(layout_.num_nodes()),
              static_cast<unsigned long long>(num_relations_), static_cast<size_t>(num_train_edges_),
              num_partitions());
  std::printf("  %s\n", plan.ToString().c_str());
  const uint64_t table_bytes = layout_.num_rows() * layout_.row_bytes;
  if (in_memory_) {
    std::printf("  memory: in memory, node table %s (embeddings + Adagrad state)\n",
                FormatBytes(table_bytes).c_str());
  } else {
    std::printf("  memory: budget %s = reserved %s + %u partition slots of %s; node table %s on "
                "disk; %u of %u partitions resident per buffer state\n",
                FormatBytes(cfg_.storage.budget.value).c_str(), FormatBytes(reserved_bytes_).c_str(),
                slots_, FormatBytes(layout_.block_bytes()).c_str(), FormatBytes(table_bytes).c_str(),
                resident_, num_partitions());
  }
  std::fflush(stdout);
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  double best_mrr = -1;
  int since_best = 0;
  bool interrupted = false;
  uint64_t total_edges = 0;
  double train_s = 0;
  for (uint64_t epoch = start_epoch_; epoch < static_cast<uint64_t>(cfg_.train.epochs); ++epoch) {
    double loss_sum = 0;
    uint64_t edges = 0;
    auto epoch_start = Clock::now();
    const uint64_t first = epoch == start_epoch_ ? start_step_ : 0;
    SLUICE_RETURN_IF_ERROR(TrainEpoch(epoch, first, options, loss_sum, edges, interrupted));
    const double epoch_s = Since(epoch_start);
    train_s += epoch_s;
    total_edges += edges;
    if (interrupted) {
      std::printf("interrupted in epoch %llu: checkpoint %s written; `--resume` continues\n",
                  static_cast<unsigned long long>(epoch + 1), latest_.c_str());
      break;
    }
    std::ostringstream line;
    line << "{\"epoch\": " << epoch + 1 << ", \"loss\": " << loss_sum / std::max<double>(1.0, static_cast<double>(edges))
         << ", \"epoch_s\": " << epoch_s << ", \"edges_per_s\": " << static_cast<double>(edges) / epoch_s;
    std::printf("epoch %llu: loss %.4f, %.2f s, %s edges/s", static_cast<unsigned long long>(epoch + 1),
                loss_sum / std::max<double>(1.0, static_cast<double>(edges)), epoch_s,
                FormatCount(static_cast<double>(edges) / epoch_s).c_str());
    const bool last = epoch + 1 == static_cast<uint64_t>(cfg_.train.epochs);
    bool stop = false;
    if (cfg_.eval.every > 0 && ((epoch + 1) % cfg_.eval.every == 0 || last) &&
        dataset_.Has("edges.valid.src")) {
      SLUICE_RETURN_IF_ERROR(SyncTable());
      SLUICE_ASSIGN_OR_RETURN(LpMetrics v, Evaluate("valid"));
      line << ", \"valid\": " << v.ToJson();
      std::printf(", valid %s", v.ToString().c_str());
      if (v.mrr > best_mrr) {
        best_mrr = v.mrr;
        since_best = 0;
        const std::string old_best = best_;
        SLUICE_RETURN_IF_ERROR(Checkpoint(epoch + 1, 0));
        best_ = latest_;
        SLUICE_RETURN_IF_ERROR(WriteFileAtomic(cfg_.run_dir + "/checkpoints/best", best_ + "\n"));
        if (!old_best.empty() && old_best != previous_ && old_best != latest_) {
          std::error_code rm;
          fs::remove_all(cfg_.run_dir + "/checkpoints/" + old_best, rm);
        }
      } else if (cfg_.eval.patience > 0 && ++since_best >= cfg_.eval.patience) {
        stop = true;
      }
    }
    std::printf("\n");
    std::fflush(stdout);
    line << "}";
    SLUICE_RETURN_IF_ERROR(AppendLine(cfg_.run_dir + "/metrics.jsonl", line.str()));
    if (latest_ != "epoch-" + std::to_string(epoch + 1) + "-step-0" &&
        (last || stop || (cfg_.checkpoint_every > 0 && (epoch + 1) % cfg_.checkpoint_every == 0))) {
      SLUICE_RETURN_IF_ERROR(Checkpoint(epoch + 1, 0));
    }
    if (stop) {
      std::printf("early stop: %d validations without a better MRR\n", cfg_.eval.patience);
      break;
    }
  }
  // Summary.
  std::ostringstream sum;
  sum << "run " << cfg_.run_dir << "\n"
      << "  trained " << total_edges << " edges in " << train_s << " s ("
      << FormatCount(static_cast<double>(total_edges) / std::max(train_s, 1e-9)) << " edges/s)\n"
      << "  sampler (one step ahead): sampling+unique " << time_.sampler_busy_s << " s\n"
      << "  compute thread: waiting for samples " << time_.sample_s << " s, gather " << time_.gather_s
      << " s, forward+backward " << time_.compute_s << " s, update " << time_.update_s
      << " s, waiting for io " << time_.wait_s << " s, waiting for edges " << time_.edges_s << " s\n"
      << "  prefetcher: planning " << plan_time_.busy_s << " s, io " << io_time_.busy_s
      << " s, io waiting for compute " << io_time_.wait_s << " s; partition loads "
      << plan_stats_.loads << ", write-backs " << plan_stats_.write_backs << "\n"
      << "  checkpoints " << checkpoint_s_ << " s, evaluation " << eval_s_ << " s, wall "
      << Since(run_start) << " s\n"
      << "  " << plan.ToString() << "\n"
      << "  memory: " << (in_memory_ ? "in memory" : "out of core, budget " + FormatBytes(cfg_.storage.budget.value))
      << ", node table " << FormatBytes(table_bytes) << ", peak RSS " << FormatBytes(PeakRssBytes())
      << "\n";
  std::printf("%s", sum.str().c_str());
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(cfg_.run_dir + "/summary.txt", sum.str()));
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (interrupted) {
    return Aborted("interrupted: checkpoint " + latest_ + " written in " + cfg_.run_dir +
                   "; `sluice train ... --resume` continues");
  }
  return Status::Ok();
}

}  // namespace

std::string LpMetrics::ToString() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "MRR %.4f Hits@1 %.4f Hits@3 %.4f Hits@10 %.4f (%s, %s, %llu edges)",
                mrr, hits1, hits3, hits10, exact ? "all nodes" : "sampled nodes",
                filtered ? "filtered" : "unfiltered", static_cast<unsigned long long>(edges));
  return buf;
}

std::string LpMetrics::ToJson() const {
  char buf[300];
  std::snprintf(buf, sizeof buf,
                "{\"mrr\": %.6f, \"hits1\": %.6f, \"hits3\": %.6f, \"hits10\": %.6f, \"edges\": "
                "%llu, \"ranking\": \"%s\", \"filtered\": %s}",
                mrr, hits1, hits3, hits10, static_cast<unsigned long long>(edges),
                exact ? "all" : "sampled", filtered ? "true" : "false");
  return buf;
}

Result<LpConfig> LoadRunConfig(const std::string& run_dir) {
  LpConfig config;
  const std::string path = run_dir + "/config.yaml";
  if (!fs::exists(path)) return NotFound(path + ": not a run directory (no config.yaml)");
  SLUICE_RETURN_IF_ERROR(LoadConfig(path, {}, config));
  config.run_dir = run_dir;
  return config;
}

Status RunLpTrain(const LpConfig& config, const LpTrainOptions& options) {
  LpRun run(config);
  SLUICE_RETURN_IF_ERROR(run.Open(/*training=*/true));
  return run.Train(options);
}

namespace {

// Opens a run directory at its latest checkpoint, for eval/export/predict.
Result<std::unique_ptr<LpRun>> OpenTrained(const std::string& run_dir) {
  SLUICE_ASSIGN_OR_RETURN(LpConfig config, LoadRunConfig(run_dir));
  config.storage.mode = "in_memory";  // read-only use: rows come from the checkpoint file
  auto run = std::make_unique<LpRun>(config);
  SLUICE_RETURN_IF_ERROR(run->Open(/*training=*/false));
  SLUICE_ASSIGN_OR_RETURN(std::string name, run->FindLatest(/*prefer_best=*/true));
  SLUICE_RETURN_IF_ERROR(run->LoadCheckpoint(name));
  run->ReadRowsFromCheckpoint();
  return run;
}

}  // namespace

Result<LpMetrics> RunLpEval(const std::string& run_dir, const std::string& split) {
  SLUICE_ASSIGN_OR_RETURN(auto run, OpenTrained(run_dir));
  if (!run->dataset().Has("edges." + split + ".src")) {
    return NotFound("dataset has no '" + split + "' split");
  }
  return run->Evaluate(split);
}

Result<std::vector<float>> ReadNodeEmbeddings(const std::string& run_dir) {
  SLUICE_ASSIGN_OR_RETURN(auto run, OpenTrained(run_dir));
  SLUICE_ASSIGN_OR_RETURN(torch::Tensor all, run->AllNodeEmbeddings());
  return std::vector<float>(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
}

}  // namespace sluice

namespace sluice {
namespace {

// A little-endian .npy (format 1.0) of a C-order array, written to a temp name and renamed.
Status WriteNpy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                const void* data, size_t bytes) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return WriteFileAtomic(path, out);
}

// Original names (or ids) of nodes or relations, when the dataset stores them.
Result<std::vector<std::string>> Names(const Dataset& ds, const std::string& what, uint64_t count) {
  std::vector<std::string> names;
  if (ds.Has(what + ".names.offsets")) {
    SLUICE_ASSIGN_OR_RETURN(auto offsets, ds.ReadInt64(what + ".names.offsets"));
    SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, ds.File(what + ".names.bytes"));
    std::ifstream in(ds.PathOf(*f), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      names.push_back(bytes.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(offsets[i + 1] - offsets[i])));
    }
  } else if (ds.Has(what + ".original_ids")) {
    SLUICE_ASSIGN_OR_RETURN(auto ids, ds.ReadInt64(what + ".original_ids"));
    for (int64_t id : ids) names.push_back(std::to_string(id));
  } else {
    for (uint64_t i = 0; i < count; ++i) names.push_back(std::to_string(i));
  }
  return names;
}

}  // namespace

Status RunLpExport(const std::string& run_dir, const std::string& out_dir) {
  SLUICE_ASSIGN_OR_RETURN(auto run, OpenTrained(run_dir));
  const std::string temp = out_dir + ".tmp";
  std::error_code ec;
  if (fs::exists(out_dir)) return InvalidArgument("export: " + out_dir + " exists; choose a new directory");
  fs::create_directories(temp, ec);
  if (ec) return IoError("export: create " + temp + ": " + ec.message());
  SLUICE_ASSIGN_OR_RETURN(torch::Tensor nodes, run->AllNodeEmbeddings());
  torch::Tensor rels = run->relations().detach().contiguous();
  SLUICE_RETURN_IF_ERROR(WriteNpy(temp + "/nodes.npy", "<f4", {nodes.size(0), nodes.size(1)},
                                  nodes.data_ptr<float>(), nodes.numel() * 4));
  SLUICE_RETURN_IF_ERROR(WriteNpy(temp + "/relations.npy", "<f4", {rels.size(0), rels.size(1)},
                                  rels.data_ptr<float>(), rels.numel() * 4));
  for (const char* what : {"nodes", "relations"}) {
    const uint64_t count = std::string(what) == "nodes" ? static_cast<uint64_t>(nodes.size(0))
                                                        : run->base_relations();
    SLUICE_ASSIGN_OR_RETURN(auto names, Names(run->dataset(), what, count));
    std::string text;
    for (const auto& n : names) text += n + "\n";
    SLUICE_RETURN_IF_ERROR(WriteFileAtomic(temp + "/" + what + ".names.txt", text));
  }
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(temp + "/README.txt",
      "nodes.npy: row k is node k (the dataset's renumbered id); nodes.names.txt line k is its "
      "original id.\nrelations.npy: row r is relation r (rows past the relation count are the "
      "reciprocal relations); relations.names.txt line r is its original id.\n"));
  fs::rename(temp, out_dir, ec);
  if (ec) return IoError("export: rename " + temp + ": " + ec.message());
  return Status::Ok();
}

Result<std::string> RunLpPredict(const std::string& run_dir, const std::string& head,
                                 const std::string& relation, int k) {
  SLUICE_ASSIGN_OR_RETURN(auto run, OpenTrained(run_dir));
  const uint64_t n = run->layout().num_nodes();
  SLUICE_ASSIGN_OR_RETURN(auto node_names, Names(run->dataset(), "nodes", n));
  SLUICE_ASSIGN_OR_RETURN(auto rel_names, Names(run->dataset(), "relations", run->base_relations()));
  auto find = [](const std::vector<std::string>& names, const std::string& x, const char* what) -> Result<int64_t> {
    for (size_t i = 0; i < names.size(); ++i) if (names[i] == x) return static_cast<int64_t>(i);
    return NotFound(std::string("predict: no ") + what + " named '" + x + "'");
  };
  SLUICE_ASSIGN_OR_RETURN(int64_t h, find(node_names, head, "node"));
  SLUICE_ASSIGN_OR_RETURN(int64_t r, find(rel_names, relation, "relation"));
  torch::NoGradGuard guard;
  SLUICE_ASSIGN_OR_RETURN(torch::Tensor nodes, run->AllNodeEmbeddings());
  torch::Tensor q = run->decoder().TailQuery(nodes[h].unsqueeze(0), run->relations().detach()[r].unsqueeze(0));
  torch::Tensor scores = run->decoder().ScoreAll(q, nodes).squeeze(0);
  auto top = scores.topk(std::min<int64_t>(k, static_cast<int64_t>(n)));
  auto values = std::get<0>(top), idx = std::get<1>(top);
  std::ostringstream out;
  for (int64_t i = 0; i < idx.size(0); ++i) {
    const int64_t t = idx[i].item<int64_t>();
    out << i + 1 << "\t" << node_names[static_cast<size_t>(t)] << "\t" << values[i].item<float>() << "\n";
  }
  return out.str();
}

}  // namespace sluice
