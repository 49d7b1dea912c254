#include "train/nc/nc_task.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "common/clock.h"
#include "common/prefetch.h"
#include "common/units.h"
#include "sampler/batch_order.h"
#include "sampler/random.h"
#include "train/dist.h"
#include "train/fingerprint.h"
#include "train/model_step.h"
#include "train/row_checkpoint.h"
#include "train/nc/nc_task_impl.h"
#include "train/run_dir.h"
#include "train/torch_io.h"

namespace sluice {
namespace {

// float16 bits -> float (IEEE 754 binary16, subnormals, infinities and NaN).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400) == 0) mant <<= 1, --exp;
    bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

KHopOptions SamplerOptions(const std::vector<int>& fanouts, bool replace) {
  KHopOptions o;
  o.fanouts = fanouts;
  o.replace = replace;
  return o;
}

}  // namespace

NcTask::NcTask(NcConfig config) : cfg_(std::move(config)) {
  settings_ = RunSettingsOf(cfg_);
  tables_dir_ = cfg_.run_dir + "/tables";
}

std::string NcTask::ConfigYaml() { return DumpConfig(cfg_); }
std::string NcTask::ConfigFingerprint() {
  std::string fp = sluice::ConfigFingerprint(cfg_);
  if (!model_name_.empty()) fp += " model=" + model_name_;
  if (!encoder_name_.empty()) fp += " encoder=" + encoder_name_;
  return fp;
}

// Evaluation over every neighbour (no eval.fanouts) runs layer by layer through the built-in
// GNN alone (a user's model or encoder infers through blocks of every neighbour).
bool NcTask::Layerwise() const {
  return cfg_.eval.layerwise && cfg_.eval.fanouts.empty() && !factory_ && encoder_name_.empty();
}

const std::vector<int64_t>& NcTask::Split(const std::string& name) const {
  static const std::vector<int64_t> kNone;
  auto it = splits_.find(name);
  return it == splits_.end() ? kNone : it->second;
}

std::string NcTask::ValidationSplit() const {
  return !Split(cfg_.eval.split).empty() ? cfg_.eval.split : (!Split("test").empty() ? "test" : "");
}

Status NcTask::OpenGraph() {
  const std::string where = "dataset " + cfg_.dataset;
  if (!dataset_.Has("edges.train.by_dst.src")) {
    return InvalidArgument(where + " has no destination-sorted edges (edges.train.by_dst.*), which "
                           "node classification samples in-neighbours from; prepare it again with "
                           "scripts/sluice_prep.py (planetoid, ogb, npy or gen-nc)");
  }
  SLUICE_ASSIGN_OR_RETURN(graph_, CsrGraph::Load(dataset_, "train", Direction::kIn));
  if (cfg_.model.kind != GnnKind::kGcn) return Status::Ok();  // only GCN's normalisation reads them
  in_degree_ = torch::empty({static_cast<int64_t>(num_nodes_)}, torch::kLong);
  int64_t* d = in_degree_.data_ptr<int64_t>();
  for (uint64_t v = 0; v < num_nodes_; ++v) d[v] = static_cast<int64_t>(graph_.degree(static_cast<int64_t>(v)));
  return Status::Ok();
}

Status NcTask::CheckLabelsAndSplits() {
  const std::string where = "dataset " + cfg_.dataset;
  SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> labels, dataset_.ReadInt64("nodes.labels"));
  if (labels.size() != num_nodes_) {
    return InvalidArgument(where + ": nodes.labels has " + std::to_string(labels.size()) +
                           " entries for " + std::to_string(num_nodes_) + " nodes");
  }
  labels_.resize(labels.size());
  for (size_t v = 0; v < labels.size(); ++v) {
    if (labels[v] < -1 || labels[v] >= classes_) {
      return InvalidArgument(where + ": nodes.labels: node " + std::to_string(v) + " has label " +
                             std::to_string(labels[v]) + ", outside [-1, " + std::to_string(classes_) + ") (the manifest says " +
                             std::to_string(classes_) + " classes; -1: unlabelled)");
    }
    labels_[v] = static_cast<int32_t>(labels[v]);
  }
  for (const char* split : {"train", "valid", "test"}) {
    const std::string role = std::string("nodes.") + split;
    if (!dataset_.Has(role)) continue;
    SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> ids, dataset_.ReadInt64(role));
    if (ids.empty()) return InvalidArgument(where + ": the " + split + " split (" + role + ") is empty");
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t v = ids[i];
      if (v < 0 || static_cast<uint64_t>(v) >= num_nodes_) {
        return InvalidArgument(where + ": " + role + "[" + std::to_string(i) + "] is node " + std::to_string(v) +
                               ", outside the graph's [0, " + std::to_string(num_nodes_) + ")");
      }
      if (labels_[static_cast<size_t>(v)] < 0) {
        return InvalidArgument(where + ": " + split + " node " + std::to_string(v) +
                               " is unlabelled (label -1); every node of a split needs a label");
      }
    }
    splits_[split] = std::move(ids);
  }
  if (Split("train").empty()) return InvalidArgument(where + " has no train split (nodes.train)");
  return Status::Ok();
}

// The built-in GNN, or the user's model from its factory; behind the user's encoder if any.
Status NcTask::MakeModel(const GnnShape& shape) {
  ModelSpec spec;
  spec.task = "node_classification";
  spec.seed = cfg_.train.seed;
  spec.batch = cfg_.train.batch;
  spec.feature_dim = shape.in_dim;
  spec.classes = shape.classes;
  spec.layers = cfg_.model.layers;
  spec.fanouts = cfg_.model.fanouts;
  spec.embedding_dim = cfg_.model.embedding_dim;
  spec.dim = cfg_.model.hidden;
  if (!factory_) {
    gnn_ = GnnModel(cfg_.model, shape, in_degree_);
    net_ = gnn_.ptr();
  } else {
    SLUICE_ASSIGN_OR_RETURN(net_, CallModelFactory(model_name_, factory_, spec));
  }
  SLUICE_ASSIGN_OR_RETURN(net_, WithEncoder(net_, encoder_name_, encoder_factory_, spec));
  return Status::Ok();
}

// The training nodes in epoch `epoch`'s order (a pass's `nodes`).
void NcTask::EpochTrainNodes(uint64_t epoch, std::vector<int64_t>& out) const {
  const std::vector<int64_t>& train = Split("train");
  const std::vector<int64_t> order = EpochPermutation(train.size(), cfg_.train.seed, epoch);
  out.resize(train.size());
  for (size_t i = 0; i < order.size(); ++i) out[i] = train[static_cast<size_t>(order[i])];
}

// Epoch `epoch`'s training pass from step `first`, over `nodes` (filled in that epoch's order).
NcTask::Pass NcTask::TrainPass(uint64_t epoch, uint64_t first, std::vector<int64_t>& nodes) const {
  EpochTrainNodes(epoch, nodes);
  return Pass{&nodes, sampler_.get(), &train_options_, cfg_.train.seed, epoch, first,
              static_cast<uint64_t>(cfg_.train.batch)};
}

// A sample's words in a ring slot: its blocks' edges and offsets.
uint64_t NcTask::SlotWords(const SampledSubgraph& s) {
  uint64_t words = 0;
  for (const SampledBlock& b : s.blocks) words += b.src_local.size() + b.offsets.size();
  return words;
}

// For w = 1, 2, ... kProbeSteps: the most distinct nodes of w consecutive probe steps (what the
// steps in flight hold in the cache; hubs appear in many steps, so it is well below w times a
// step's).
void NcTask::ProbeUnions(const std::vector<std::vector<int64_t>>& steps) {
  const size_t widest = std::min<size_t>(steps.size(), kProbeSteps);
  probe_union_.assign(widest + 1, 0);
  std::vector<uint32_t> stamp(num_nodes_, 0);
  for (size_t first = 0; first < steps.size(); ++first) {
    uint64_t distinct = 0;
    const auto mark = static_cast<uint32_t>(first + 1);
    for (size_t t = first; t < std::min(steps.size(), first + widest); ++t) {
      for (int64_t v : steps[t]) {
        uint32_t& st = stamp[static_cast<size_t>(v)];
        if (st != mark) st = mark, ++distinct;
      }
      probe_union_[t - first + 1] = std::max(probe_union_[t - first + 1], distinct);
    }
  }
}

// Grows the shape's bounds to a sample's, with a margin of a tenth: per layer (input first,
// so from the outermost block in) and over the step.
void NcTask::AddToShape(const SampledSubgraph& s, GnnShape& shape, bool training) const {
  const auto layers = static_cast<size_t>(cfg_.model.layers);
  GnnShape::Layers& to = training ? shape.train : shape.eval;
  to.src.resize(layers), to.dst.resize(layers), to.edges.resize(layers);
  int64_t edges = 0;
  for (size_t l = 0; l < layers; ++l) {
    const SampledBlock& b = s.blocks[s.blocks.size() == 1 ? 0 : s.blocks.size() - 1 - l];
    const auto margin = [](uint64_t x) { return static_cast<int64_t>(x) * 11 / 10; };
    to.src[l] = std::max(to.src[l], margin(b.num_src));
    to.dst[l] = std::max(to.dst[l], margin(b.num_dst));
    to.edges[l] = std::max(to.edges[l], margin(b.src_local.size()));
  }
  for (const SampledBlock& b : s.blocks) edges += static_cast<int64_t>(b.src_local.size());
  shape.max_nodes = std::max<int64_t>(shape.max_nodes, static_cast<int64_t>(s.nodes().size()) * 5 / 4);
  shape.max_edges = std::max<int64_t>(shape.max_edges, edges * 5 / 4);
}

Status NcTask::BuildModel() {
  GnnShape shape;
  shape.in_dim = feature_dim_;
  shape.classes = classes_;
  shape.max_seeds = std::max(cfg_.train.batch, cfg_.eval.batch);
  // A bound for the memory plan: the first training steps' largest sample (nodes, edges),
  // with a margin; PlanInput reuses the unscaled figures.
  // The first steps of epoch 1 as training draws them (a split in id order would over-weight
  // one end of a degree-ordered graph).
  std::vector<int64_t> order;
  const Pass pass = TrainPass(0, 0, order);
  std::vector<std::vector<int64_t>> probe_steps;
  probe_nodes_ = probe_slot_words_ = 0;
  for (uint64_t t = 0; t < kProbeSteps && t < pass.steps(); ++t) {
    SampledSubgraph s = sampler_->Sample(pass.Seeds(t), pass.UnitKey(t), train_options_);
    probe_nodes_ = std::max<uint64_t>(probe_nodes_, s.nodes().size());
    probe_slot_words_ = std::max(probe_slot_words_, SlotWords(s));
    AddToShape(s, shape, /*training=*/true);
    probe_steps.push_back(s.layers.back());
  }
  ProbeUnions(probe_steps);
  // And the first evaluation steps: layer-wise, one hop of every neighbour of the first nodes;
  // else the sampled blocks of the first batch of each split (in id order: on a graph
  // numbered by degree, its hubs).
  const bool layerwise = Layerwise();
  std::vector<std::vector<int64_t>> firsts;
  if (layerwise) {
    firsts.emplace_back(std::min<uint64_t>(num_nodes_, static_cast<uint64_t>(cfg_.eval.batch)));
    std::iota(firsts.back().begin(), firsts.back().end(), int64_t{0});
  } else {
    for (const char* split : {"valid", "test"}) {
      const std::vector<int64_t>& nodes = Split(split);
      firsts.emplace_back(nodes.begin(), nodes.begin() + static_cast<int64_t>(std::min<uint64_t>(
                                                             nodes.size(), static_cast<uint64_t>(cfg_.eval.batch))));
    }
  }
  probe_eval_nodes_ = 0;
  for (const std::vector<int64_t>& first : firsts) {
    if (first.empty()) continue;
    SampledSubgraph s = sampler_->Sample(first, {cfg_.eval.seed, 0, 0}, layerwise ? one_hop_options_ : eval_options_);
    probe_eval_nodes_ = std::max<uint64_t>(probe_eval_nodes_, s.nodes().size());
    AddToShape(s, shape, /*training=*/false);  // layer-wise: its one block stands for every layer's
  }
  torch::manual_seed(cfg_.train.seed);
  SLUICE_RETURN_IF_ERROR(MakeModel(shape));
  SLUICE_RETURN_IF_ERROR(SetUpDevice());  // before the optimizer: its state follows the parameters
  const double lr = cfg_.train.lr, wd = cfg_.train.weight_decay;
  if (cfg_.train.optimizer == GnnOptimizer::kAdamW) {
    opt_ = std::make_unique<torch::optim::AdamW>(net_->parameters(), torch::optim::AdamWOptions(lr).weight_decay(wd));
  } else {
    opt_ = std::make_unique<torch::optim::Adam>(net_->parameters(), torch::optim::AdamOptions(lr).weight_decay(wd));
  }
  return Status::Ok();
}

Status NcTask::OpenFeatures() {
  const Manifest& m = dataset_.manifest();
  const std::string where = "dataset " + cfg_.dataset;
  SLUICE_ASSIGN_OR_RETURN(features_, ArrayBacking::Open(dataset_, "nodes.features", cfg_.io));
  feature_dim_ = features_->dim();
  row_bytes_ = features_->row_bytes();
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* ff, dataset_.File("nodes.features"));
  feature_path_ = dataset_.PathOf(*ff);
  if (m.feature_dim != 0 && m.feature_dim != static_cast<uint64_t>(feature_dim_)) {
    return InvalidArgument(where + ": nodes.features rows are " + std::to_string(feature_dim_) +
                           " wide but the manifest says feature_dim " + std::to_string(m.feature_dim));
  }
  if (features_->rows() != num_nodes_) {
    return InvalidArgument(where + ": nodes.features has " + std::to_string(features_->rows()) +
                           " rows for " + std::to_string(num_nodes_) + " nodes");
  }
  return Status::Ok();
}

RowInit NcTask::Init() const {
  const uint32_t d = static_cast<uint32_t>(feature_dim_), rb = row_bytes_;
  const Key key = Key(cfg_.train.seed).With(0xE3B0'C442'98FC'1C14ull);  // the embeddings' domain
  const auto scale = static_cast<float>(cfg_.model.init_scale);
  return [key, d, rb, scale](const RowKey& k, std::byte* row) {
    std::memset(row, 0, rb);  // the optimizer state starts at zero
    auto* f = reinterpret_cast<float*>(row);
    const Key node = key.With(k.id);
    for (uint32_t i = 0; i < d; ++i) f[i] = static_cast<float>(2.0 * node.Unit(i) - 1.0) * scale;
  };
}

Status NcTask::Open(Purpose purpose) {
  purpose_ = purpose;
  if (cfg_.dataset.empty()) return InvalidArgument("dataset: not set (the dataset directory)");
  SLUICE_ASSIGN_OR_RETURN(dataset_, Dataset::Open(cfg_.dataset));
  const Manifest& m = dataset_.manifest();
  const std::string where = "dataset " + cfg_.dataset;
  if (m.task != TaskKind::kNodeClassification) {
    return InvalidArgument(where + " is a " + std::string(TaskKindName(m.task)) +
                           " dataset; task: node_classification needs node labels and features");
  }
  if (static_cast<int>(cfg_.model.fanouts.size()) != cfg_.model.layers) {
    return InvalidArgument("model.fanouts has " + std::to_string(cfg_.model.fanouts.size()) +
                           " entries for model.layers " + std::to_string(cfg_.model.layers) +
                           " (one fanout per layer; -1: all neighbours)");
  }
  if (!cfg_.eval.fanouts.empty() && static_cast<int>(cfg_.eval.fanouts.size()) != cfg_.model.layers) {
    return InvalidArgument("eval.fanouts has " + std::to_string(cfg_.eval.fanouts.size()) +
                           " entries for model.layers " + std::to_string(cfg_.model.layers) +
                           " (one per layer, or [] for every neighbour)");
  }
  for (int f : cfg_.model.fanouts) {
    if (f == 0 || f < -1) return InvalidArgument("model.fanouts: " + std::to_string(f) + " is not a fanout (>= 1, or -1: all)");
  }
  num_nodes_ = m.num_nodes;
  classes_ = static_cast<int64_t>(m.num_classes);
  if (classes_ < 2) return InvalidArgument(where + ": the manifest says " + std::to_string(classes_) + " classes (at least 2)");
  embeddings_ = cfg_.model.embedding_dim > 0;
  if (cfg_.storage.mmap != FeatureMmap::kOff &&
      (embeddings_ || cfg_.storage.mode != StorageMode::kInMemory)) {
    return InvalidArgument("storage.mmap reads a dataset's features through the page cache: it needs "
                           "storage.mode: in_memory and features (not model.embedding_dim)");
  }
  if (cfg_.storage.spill_steps > 0 && cfg_.storage.mode == StorageMode::kOutOfCore &&
      (embeddings_ || cfg_.storage.io_group != 1 || cfg_.device.on_device())) {
    return InvalidArgument("storage.spill_steps spills a dataset's feature rows for training out of core on the CPU: "
                           "it needs storage.io_group: 1, features (not model.embedding_dim) and device.type: cpu "
                           "(in memory it is ignored)");
  }
  offsets_ = {0, num_nodes_};
  if (embeddings_) {
    feature_dim_ = cfg_.model.embedding_dim;
    const auto d = static_cast<uint32_t>(feature_dim_);
    row_bytes_ = (d + RowStateFloats(cfg_.train.embedding_optimizer, d)) * 4;
  } else {
    SLUICE_RETURN_IF_ERROR(OpenFeatures());
  }
  SLUICE_RETURN_IF_ERROR(CheckLabelsAndSplits());
  SLUICE_RETURN_IF_ERROR(OpenGraph());
  train_options_ = SamplerOptions(cfg_.model.fanouts, cfg_.model.replace);
  std::vector<int> eval_fanouts = cfg_.eval.fanouts;
  if (eval_fanouts.empty()) eval_fanouts.assign(static_cast<size_t>(cfg_.model.layers), -1);
  eval_options_ = SamplerOptions(eval_fanouts, false);
  sampler_ = std::make_unique<KHopSampler>(graph_, train_options_);
  SLUICE_RETURN_IF_ERROR(BuildModel());
  return SetUpDataParallel();
}

Status NcTask::LoadState(const CheckpointReader& checkpoint) {
  const bool sharded_rows = checkpoint.Has(RowShardManifestName("nodes.bin"));
  if (embeddings_ != (checkpoint.Has("nodes.bin") || sharded_rows)) {
    return InvalidArgument(checkpoint.dir() + ": the checkpoint " +
                           (embeddings_ ? "holds no node embeddings (nodes.bin)" : "holds node embeddings") +
                           " but model.embedding_dim is " + std::to_string(cfg_.model.embedding_dim));
  }
  if (sharded_rows) {  // written by the ranks of a run: its manifest fits this model
    SLUICE_RETURN_IF_ERROR(CheckpointRows::Open(checkpoint.dir(), "nodes.bin", row_bytes_, num_nodes_).status());
  }
  const torch::Device device = acc_ != nullptr ? acc_->device() : torch::Device(torch::kCPU);
  SLUICE_RETURN_IF_ERROR(LoadTorch(checkpoint, "dense.pt", net_, device));
  return LoadTorch(checkpoint, "dense_optimizer.pt", *opt_, device);
}

Status NcTask::PrepareTraining(const CheckpointReader* resumed) {
  const bool in_memory = cfg_.storage.mode == StorageMode::kInMemory;
  const auto [lo, hi] = RowsToLoad();
  if (embeddings_ && resumed != nullptr && !in_memory) {
    SLUICE_RETURN_IF_ERROR(RestoreRows(resumed->dir(), lo, hi));
  }
  SLUICE_RETURN_IF_ERROR(SetUpStorage(resumed == nullptr, ""));
  if (embeddings_ && resumed != nullptr && in_memory) SLUICE_RETURN_IF_ERROR(LoadMemoryRows(resumed->dir(), lo, hi));
  SLUICE_RETURN_IF_ERROR(SetUpDeviceRows());
  return SetUpSampler();
}

Status NcTask::PrepareReading(const CheckpointReader& checkpoint) {
  SLUICE_RETURN_IF_ERROR(SetUpStorage(false, checkpoint.dir()));
  if (embeddings_ && memory_) return LoadMemoryRows(checkpoint.dir(), 0, num_nodes_);
  return Status::Ok();
}

std::string NcTask::Describe() const {
  return "sluice train: " + cfg_.dataset + ", " + FormatCount(static_cast<double>(num_nodes_)) + " nodes, " +
         FormatCount(static_cast<double>(graph_.num_edges())) + " edges, " +
         (embeddings_ ? "learnable node embeddings of " + std::to_string(feature_dim_)
                      : std::to_string(feature_dim_) + " features (" + DTypeName(features_->dtype()) + ")") +
         ", " + std::to_string(classes_) + " classes, " +
         std::to_string(Split("train").size()) + " training nodes; " + EnumName(cfg_.model.kind) + ", " +
         std::to_string(cfg_.model.layers) + " layers";
}

Status NcTask::LoadFeaturesInMemory() {
  if (embeddings_) {
    memory_ = std::make_unique<MemoryRows>(row_bytes_, offsets_, Init());
    return Status::Ok();
  }
  const uint32_t rb = features_->row_bytes();
  if (cfg_.storage.mmap != FeatureMmap::kOff) {  // the page cache holds them, as it will
    SLUICE_ASSIGN_OR_RETURN(mapped_, MappedFile::Open(feature_path_, cfg_.storage.mmap == FeatureMmap::kRandom
                                                                         ? MapAdvice::kRandom
                                                                         : MapAdvice::kNormal));
    if (mapped_.size_bytes() < num_nodes_ * rb) {
      return Corruption(feature_path_ + ": " + std::to_string(mapped_.size_bytes()) + " bytes, expected " +
                        std::to_string(num_nodes_ * rb));
    }
    memory_ = MemoryRows::External(rb, num_nodes_, mapped_.data());
    return Status::Ok();
  }
  memory_ = std::make_unique<MemoryRows>(rb, std::vector<uint64_t>{0, num_nodes_},
                                         [rb](const RowKey&, std::byte* row) { std::memset(row, 0, rb); });
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
  constexpr uint64_t kChunk = 1 << 14;
  std::vector<RowKey> keys;
  std::vector<std::byte> buffer(kChunk * rb);
  for (uint64_t begin = 0; begin < num_nodes_; begin += kChunk) {
    const uint64_t n = std::min(kChunk, num_nodes_ - begin);
    keys.clear();
    for (uint64_t i = 0; i < n; ++i) keys.push_back(RowKey{begin + i, 0});
    SLUICE_RETURN_IF_ERROR(features_->Read(*io, keys, buffer.data()));
    std::memcpy(memory_->Row(keys[0]), buffer.data(), n * rb);
  }
  return Status::Ok();
}

Result<RowPlanInput> NcTask::PlanInput() {
  RowPlanInput in;
  in.budget_bytes = cfg_.storage.budget.value;
  in.runtime_bytes = kRuntimeBytes + GraphBytes() + EvaluationBytes();
  if (Spilling()) {  // and the next epoch's order of the training nodes
    in.runtime_bytes += SpillBacking::MemoryBytes(SpillOpts(), SpillStepRows(), row_bytes_) + Split("train").size() * 8 +
                        KHopNodeSet::ScratchBytes(num_nodes_) + SpillStepRows() * 16;
  }
  in.model_bytes = net_->StateBytes();
  if (dp_ != nullptr) in.model_bytes += ShardGradients::Bytes(*dp_, dp_->dense_floats());
  in.step_bytes = net_->StepBytes();
  if (acc_ != nullptr) {
    // The model's state and activations live on the device; the host holds the device's
    // runtime, the page-locked staging and the device cache's index.
    in.runtime_bytes += acc_->RuntimeHostBytes();
    in.model_bytes = 0;
    in.step_bytes = DeviceHostBytes();
  }
  // The largest sample of the first steps (BuildModel's probe): its nodes are the step's keys
  // and distinct rows.
  const uint64_t most = probe_nodes_, edges = probe_slot_words_;
  in.keys_per_step = most;
  in.step_record_bytes = edges * 8 + most * 8 * 2;  // a ring slot's subgraph
  in.row_bytes = row_bytes_;
  in.total_rows = num_nodes_;
  in.index_rows = num_nodes_;  // keys are table 0's node ids
  in.max_rows = own_end_ > own_begin_ ? own_end_ - own_begin_ : num_nodes_;  // sharded: this rank's rows
  in.oracle = cfg_.storage.planner == PlannerKind::kOracle;
  in.window = static_cast<uint32_t>(cfg_.storage.window);
  // A group's io runs while the previous group computes.
  in.run_ahead = std::max<uint32_t>(static_cast<uint32_t>(cfg_.storage.run_ahead),
                                    2 * static_cast<uint32_t>(cfg_.storage.io_group) - 1);
  in.io_queue_depth = static_cast<uint64_t>(cfg_.io.EffectiveQueueDepth());
  in.io_merge_max_bytes = cfg_.io.merge_max.value;
  in.sampled_rows_per_step = most;
  in.cache_rows = cfg_.storage.cache_rows;
  in.write_back_share = 0;  // feature rows are never written; embeddings go to their pages
  in.scatter_loads = !embeddings_;
  in.distinct_keys = true;
  // The steps in flight as measured on the probe (a tenth more), when it sampled that many.
  const uint64_t in_flight = uint64_t{in.run_ahead} + 1;
  if (in_flight < probe_union_.size()) in.in_flight_rows = probe_union_[in_flight] + probe_union_[in_flight] / 10;
  return in;
}

Status NcTask::OpenEmbeddingFile(bool fresh, const std::string& rows_from) {
  const bool reading = !rows_from.empty();
  std::string path = tables_dir_ + "/nodes.bin";
  const bool assemble = reading && CheckpointRows::Sharded(rows_from, "nodes.bin");
  if (assemble) {  // written by the ranks of a run: one file of every row, read from a temporary name
    SLUICE_ASSIGN_OR_RETURN(path, AssembleRowShards(rows_from, "nodes.bin", row_bytes_, num_nodes_));
  } else if (reading) {
    path = rows_from + "/nodes.bin";
  } else if (fresh || !std::filesystem::exists(path)) {
    std::error_code ec;
    std::filesystem::create_directories(tables_dir_, ec);
    const auto [lo, hi] = RowsToLoad();  // across processes this rank's rows, the others holes
    SLUICE_RETURN_IF_ERROR(CreateInitialRowFile(path, row_bytes_, offsets_, Init(), cfg_.io, lo, hi));
  }
  Result<std::unique_ptr<RowFile>> opened = RowFile::Open(path, row_bytes_, num_nodes_, !reading, RowFileOptionsFrom(cfg_.io));
  if (assemble) {  // open (or not): its name is no longer needed
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  SLUICE_ASSIGN_OR_RETURN(row_file_, std::move(opened));
  embedding_backing_ = std::make_unique<RowFileBacking>(row_file_.get(), &offsets_, Init(),
                                                        /*all_written=*/!fresh || reading, /*staging_rows=*/0);
  backing_ = embedding_backing_.get();
  return Status::Ok();
}

Status NcTask::SyncRows() {
  if (!embeddings_ || !cache_) return Status::Ok();
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
  return FlushRowCache(*cache_, arena_.data(), row_bytes_, *backing_, *io);
}

Status NcTask::SetUpStorage(bool fresh, const std::string& rows_from) {
  backing_ = features_.get();
  if (cfg_.storage.mode == StorageMode::kInMemory) {
    SLUICE_RETURN_IF_ERROR(LoadFeaturesInMemory());
    // On a device step t + 1 is made ready before step t has computed.
    run_ahead_ = static_cast<uint32_t>(std::max(cfg_.storage.run_ahead, acc_ != nullptr ? 1 : 0));
    const uint64_t model = acc_ != nullptr ? DeviceHostBytes() + acc_->RuntimeHostBytes()
                                           : net_->StateBytes() + net_->StepBytes();
    plan_.predicted_bytes = kRuntimeBytes + GraphBytes() + model + memory_->bytes();
    memory_plan_ = "in memory: " + FormatCount(static_cast<double>(num_nodes_)) +
                   (embeddings_ ? " embedding rows of " : " feature rows of ") + std::to_string(row_bytes_) +
                   " bytes (" + FormatBytes(memory_->bytes()) + ")";
    return Status::Ok();
  }
  SLUICE_ASSIGN_OR_RETURN(RowPlanInput in, PlanInput());
  SLUICE_ASSIGN_OR_RETURN(plan_, PlanRowMemory(in));
  run_ahead_ = plan_.run_ahead;
  const PlannerKind planner = cfg_.storage.planner;
  RowCacheOptions& co = cache_options_;
  co = RowCacheOptionsFor(plan_, planner);
  // none: read-through, a cache only as large as the steps in flight (training's or
  // evaluation's, whichever samples more, with a margin).
  const uint64_t in_flight = (uint64_t{plan_.run_ahead} + 2) * std::max(probe_nodes_, probe_eval_nodes_) * 5 / 4;
  if (planner == PlannerKind::kNone) {
    co.capacity_rows = std::min(plan_.cache_rows, in_flight);
    co.total_rows = 0;  // (a hashed index: an index by id could outgrow the plan's for this capacity)
  }
  if (planner == PlannerKind::kStatic) {
    PinHottest(co.capacity_rows > plan_.min_rows ? co.capacity_rows - plan_.min_rows : 0);
    co.pinned = &pinned_;
  }
  cache_ = std::make_unique<RowCache>(co);
  arena_ = AlignedBuffer(plan_.cache_rows * row_bytes_, 4096);
  if (Spilling()) SLUICE_RETURN_IF_ERROR(OpenSpill());
  if (embeddings_) SLUICE_RETURN_IF_ERROR(OpenEmbeddingFile(fresh, rows_from));
  memory_plan_ = DescribePlan();
  return Status::Ok();
}

SpillOptions NcTask::SpillOpts() const {
  SpillOptions o;
  const uint32_t units = SpillUnitsPerStep();
  o.horizon_steps = static_cast<uint32_t>(cfg_.storage.spill_steps) * units;
  if (units > 1) {
    // A unit's pack is a shard's rows: smaller chunks keep the pool (a chunk for every pack being
    // filled, K x units of them) near whole steps' size and the packs' last chunks fuller.
    const uint32_t row_pages = (row_bytes_ + 4095) / 4096 * 4096;
    o.chunk_bytes = std::max({row_pages, uint32_t{32} << 10, o.chunk_bytes / units / 4096 * 4096});
  }
  o.sweep_gap_bytes = static_cast<uint32_t>(cfg_.storage.io_group_gap.value);
  o.write_backend = cfg_.io.backend;
  // A training step's loads find its run-ahead's previous steps' rows resident (protected in
  // the cache): they need no place in its pack. (Before the plan: the configured run-ahead.)
  o.resident_steps = run_ahead_ > 0 ? run_ahead_ : static_cast<uint32_t>(cfg_.storage.run_ahead);
  return o;
}

// The spill's steps are the pipeline's units: in virtual shards this rank's shards of a step,
// so that a sweep of the file still comes every storage.spill_steps steps.
uint32_t NcTask::SpillUnitsPerStep() const {
  if (dp_ == nullptr || sharded_ != nullptr) return 1;
  return static_cast<uint32_t>(dp_->end_shard() - dp_->first_shard());
}

// Training out of core on the CPU with storage.spill_steps (evaluating a run never spills).
bool NcTask::Spilling() const {
  return cfg_.storage.spill_steps > 0 && cfg_.storage.mode == StorageMode::kOutOfCore && purpose_ == Purpose::kTrain &&
         !embeddings_ && acc_ == nullptr;
}

// A training step's rows as the probe measured them, with a quarter to spare.
uint64_t NcTask::SpillStepRows() const { return probe_nodes_ + probe_nodes_ / 4; }

// The spill file lives in the run directory, sized for the horizon's packs.
Status NcTask::OpenSpill() {
  std::error_code ec;
  std::filesystem::create_directories(cfg_.run_dir, ec);
  SpillOptions o = SpillOpts();
  o.file_bytes = SpillBacking::RingBytes(o, SpillStepRows(), row_bytes_);
  SLUICE_ASSIGN_OR_RETURN(spill_, SpillBacking::Create(features_.get(), &features_->file(),
                                                       cfg_.run_dir + "/features.spill", o));
  spill_nodes_ = std::make_unique<KHopNodeSet>(graph_);
  return Status::Ok();
}

// The `rows` highest in-degree nodes (ties: lower id first), as a bitmap by id; across processes
// among this rank's rows.
std::vector<uint64_t> NcTask::HottestRows(uint64_t rows) const {
  const auto [lo, hi] = RowsToLoad();
  std::vector<int64_t> order(hi - lo);
  std::iota(order.begin(), order.end(), static_cast<int64_t>(lo));
  rows = std::min<uint64_t>(rows, hi - lo);
  std::partial_sort(order.begin(), order.begin() + static_cast<int64_t>(rows), order.end(), [&](int64_t a, int64_t b) {
    const uint64_t da = graph_.degree(a), db = graph_.degree(b);
    return da != db ? da > db : a < b;
  });
  std::vector<uint64_t> bits(num_nodes_ / 64 + 1, 0);
  for (uint64_t i = 0; i < rows; ++i) bits[static_cast<uint64_t>(order[i]) / 64] |= uint64_t{1} << (order[i] % 64);
  return bits;
}

void NcTask::PinHottest(uint64_t rows) {
  pinned_ = HottestRows(rows);
  const auto [lo, hi] = RowsToLoad();
  pinned_rows_ = std::min<uint64_t>(rows, hi - lo);
}

// What the graph side holds for the run: the CSR graph, the sampler's per-node table, the
// in-degrees (GCN) and the labels.
uint64_t NcTask::GraphBytes() const {
  return graph_.MemoryBytes() + KHopSampler::ScratchBytes(num_nodes_) + num_nodes_ * 4 +
         static_cast<uint64_t>(in_degree_.defined() ? in_degree_.numel() * 8 : 0);
}

// What an evaluation holds a node of its split besides the pass: its label, loss and class
// (NodeScores), the metrics' copy of the class, and its place among the wanted nodes (layer by
// layer) or its rank's positions (across processes). The largest split other than training's.
uint64_t NcTask::EvaluationBytes() const {
  constexpr uint64_t kNodeBytes = 8 + 8 + 4 + 8 + 8;
  uint64_t most = 0;
  for (const auto& [name, nodes] : splits_) {
    if (name != "train") most = std::max<uint64_t>(most, nodes.size());
  }
  return most * kNodeBytes;
}

std::string NcTask::DescribePlan() const {
  const uint64_t table = num_nodes_ * row_bytes_;
  const auto [lo, hi] = RowsToLoad();
  const uint64_t held = hi - lo;
  return "out of core, budget " + FormatBytes(cfg_.storage.budget.value) + ": cache " +
         FormatCount(static_cast<double>(plan_.cache_rows)) + (embeddings_ ? " embedding rows (" : " feature rows (") +
         FormatBytes(plan_.cache_bytes) +
         " with its index; " + std::to_string(plan_.cache_rows * 100 / std::max<uint64_t>(held, 1)) +
         (held < num_nodes_ ? "% of this rank's rows; planner " : "% of the rows; planner ") + PlannerKindName(cfg_.storage.planner) +
         (pinned_rows_ ? ", " + FormatCount(static_cast<double>(pinned_rows_)) + " pinned" : std::string()) +
         CacheBelowStepsNote(plan_) +
         ", io in groups of " + std::to_string(cfg_.storage.io_group) + " steps), graph and sampler " +
         FormatBytes(GraphBytes()) + ", runtime " + FormatBytes(kRuntimeBytes) + ", evaluation " + FormatBytes(EvaluationBytes()) +
         (Spilling() ? ", spill every " + std::to_string(cfg_.storage.spill_steps) + " steps " +
                           FormatBytes(SpillBacking::MemoryBytes(SpillOpts(), SpillStepRows(), row_bytes_)) +
                           " (its file " +
                           FormatBytes(SpillBacking::RingBytes(SpillOpts(), SpillStepRows(), row_bytes_)) + ")"
                     : std::string()) +
         ", dense model " +
         FormatBytes(net_->StateBytes()) + ShardGradientsNote(dp_.get()) + ", activations " + FormatBytes(net_->StepBytes()) + ", pipeline " +
         FormatBytes(plan_.pipeline_bytes) + ", window " + std::to_string(plan_.window) + " steps, run-ahead " +
         std::to_string(plan_.run_ahead) + (embeddings_ ? ", embeddings " : ", features ") + FormatBytes(table) +
         " on disk; predicted peak " +
         FormatBytes(plan_.predicted_bytes);
}

// An evaluation pass through `cache`: the run-ahead that steps as large as the probe's largest
// evaluation sample (a tenth more) leave room for (FitPass; the first batch of a split in id
// order is its hubs on a degree-ordered graph, larger than training's steps), io groups no
// longer than run-ahead + 1 steps (a group's steps are planned before any of them computes).
// The static planner's pinned rows keep their room when such a step fits beside them; when it
// does not, the pass may evict them (MakePipeline; training's next pass pins them again) and
// the whole cache counts. Unpinning costs the next epoch their reloads (and, spilling, reads of
// them outside the packs), so it happens only then.
void NcTask::FitEvalPass(Pass& pass, const RowCache* cache) const {
  pass.run_ahead = run_ahead_;
  pass.group = static_cast<uint32_t>(cfg_.storage.io_group);
  if (cache == nullptr) return;
  const uint64_t step_rows = probe_eval_nodes_ + probe_eval_nodes_ / 10;
  const uint64_t capacity = cache->options().capacity_rows;
  uint64_t room = capacity;
  if (pinned_rows_ > 0 && capacity > pinned_rows_ && capacity - pinned_rows_ >= step_rows) {
    room = capacity - pinned_rows_;
  } else if (pinned_rows_ > 0) {
    pass.unpin = true;
  }
  const PassFit fit = FitPass(room, cache->options().window_steps, run_ahead_, step_rows);
  pass.run_ahead = fit.run_ahead;
  pass.group = std::min(pass.group, fit.run_ahead + 1);
  pass.max_rows = fit.max_rows;
}

NcTask::RowSource NcTask::FeatureSource() const {
  RowSource s;
  s.memory = memory_.get();
  s.cache = cache_.get();
  s.arena = const_cast<std::byte*>(arena_.data());
  s.backing = backing_;
  s.row_bytes = row_bytes_;
  s.dim = feature_dim_;
  s.half = !embeddings_ && features_->dtype() == DType::kFloat16;
  s.features = !embeddings_;
  return s;
}

std::unique_ptr<NcTask::Pipeline> NcTask::MakePipeline(const Pass& pass, const RowSource& source) {
  RowPrefetcherOptions po;
  po.run_ahead = pass.run_ahead;
  po.writes = pass.writes;
  po.io = cfg_.io;
  po.group_steps = pass.group;
  if (source.cache) {
    source.cache->SetProtectSteps(pass.run_ahead);
    // Evaluation's steps may need more than the room the static planner's pins leave.
    source.cache->SetPinning(!pass.unpin);
  }
  po.group_gap_bytes = static_cast<uint32_t>(cfg_.storage.io_group_gap.value);
  RowBacking* backing = source.backing;
  if (pass.spill && spill_ != nullptr) {
    // The spill lists step t's rows K steps ahead of its loads: the same sample's nodes, drawn
    // on the io thread without its blocks (the sampler draws the whole sample again later);
    // past the pass's end, the next pass's.
    auto rows_of = [nodes = spill_nodes_.get()](const Pass& p) {
      return [p, nodes](uint64_t t, std::vector<uint64_t>& out) -> Result<bool> {
        const std::span<const int64_t> seeds = p.UnitSeeds(t);
        if (seeds.empty()) return false;
        nodes->Sample(seeds, p.UnitKey(t), *p.options, out);
        return true;
      };
    };
    SpillBacking::Skip skip = nullptr;
    if (pinned_rows_ > 0) skip = [this](uint64_t row) { return (pinned_[row / 64] >> (row % 64) & 1) != 0; };
    SpillBacking::StepRows next = nullptr;
    if (pass.spill_next != nullptr) next = rows_of(*pass.spill_next);
    spill_->StartPass(rows_of(pass), skip, next, pass.spill_continues);
    backing = spill_.get();
  }
  auto fill = [pass](uint64_t t, Batch& b) -> Result<bool> {
    if (pass.whole_steps) {
      if (pass.Seeds(pass.first_step + t).empty()) return false;
      SampleWholeStep(pass, pass.first_step + t, b);
      return true;
    }
    const std::span<const int64_t> seeds = pass.UnitSeeds(t);
    if (seeds.empty()) return false;
    const uint64_t n = seeds.size();
    const SampleKey key = pass.UnitKey(t);
    if (pass.sample_on_device) {
      SLUICE_ASSIGN_OR_RETURN(b.sub, pass.sample_on_device(seeds, key));
    } else {
      b.sub = pass.sampler->Sample(seeds, key, *pass.options);
    }
    b.rows.samples = static_cast<uint32_t>(n);
    for (int64_t v : b.sub.nodes()) {
      const auto row = static_cast<uint64_t>(v);
      if (!pass.own_keys || (row >= pass.own_begin && row < pass.own_end)) b.rows.keys.push_back(RowKey{row, 0});
    }
    if (pass.max_rows != 0 && b.rows.keys.size() > pass.max_rows) {
      return FailedPrecondition("evaluation step " + std::to_string(key.step) + " samples " +
                                std::to_string(b.rows.keys.size()) + " nodes, more than the " +
                                std::to_string(pass.max_rows) + " feature rows a step may take in this "
                                "cache; lower eval.batch, sample (eval.fanouts) or raise storage.budget");
    }
    b.rows.keys_distinct = true;  // a sample holds each node once
    // Compute reads the seeds and the nodes (the first and last layers, of which the others
    // are prefixes): the rest would only take ring memory.
    for (size_t l = 1; l + 1 < b.sub.layers.size(); ++l) std::vector<int64_t>().swap(b.sub.layers[l]);
    return true;
  };
  if (source.memory) return std::make_unique<Pipeline>(source.memory, po, fill, &NcTask::RowsOf);
  return std::make_unique<Pipeline>(source.cache, source.arena, source.row_bytes, backing, po, fill,
                                    &NcTask::RowsOf);
}

Status NcTask::FinishPass(Pipeline& p) {
  Status s = p.Stop();
  if (spill_ != nullptr) spill_->EndPass();
  sample_time_.busy_s += p.read_time().busy_s, sample_time_.wait_s += p.read_time().wait_s;
  plan_time_.busy_s += p.plan_time().busy_s, plan_time_.wait_s += p.plan_time().wait_s;
  io_time_.busy_s += p.io_time().busy_s, io_time_.wait_s += p.io_time().wait_s;
  wait_s_ += p.compute_wait_s();
  rows_loaded_ += p.rows_loaded();
  io_requests_ += p.io_stats().requests, io_bytes_ += p.io_stats().bytes;
  return s;
}

// Every node's row, widened to float32; feature rows are divided by their sum with
// features.normalize: row, and a non-finite value is an error naming the file and the node.
Status NcTask::GatherRows(const RowBatch& rows, const RowSource& source, torch::Tensor& out) const {
  const auto n = static_cast<int64_t>(rows.uses());
  const int64_t d = source.dim;
  out = torch::empty({n, d});
  float* o = out.data_ptr<float>();
  const bool half = source.half;
  const bool normalize = source.features && cfg_.features.normalize == FeatureNormalize::kRow;
  // The rows lie anywhere in the cache's arena (or the table): each is a run of cache misses,
  // so the rows a few uses ahead are asked for while this one is copied.
  constexpr int64_t kAhead = 6;
  const size_t row_bytes = static_cast<size_t>(d) * (half ? 2 : 4);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) PrefetchForRead(rows.rows[rows.row_of(static_cast<size_t>(i + kAhead))], row_bytes);
    const std::byte* row = rows.rows[rows.row_of(static_cast<size_t>(i))];
    float* dst = o + i * d;
    if (half) {
      const auto* h = reinterpret_cast<const uint16_t*>(row);
      for (int64_t k = 0; k < d; ++k) dst[k] = HalfToFloat(h[k]);
    } else {
      std::memcpy(dst, row, static_cast<size_t>(d) * 4);
    }
    if (!source.features) continue;
    float sum = 0;
    for (int64_t k = 0; k < d; ++k) {
      if (!std::isfinite(dst[k])) {
        return InvalidArgument(feature_path_ + ": node " + std::to_string(rows.key_of(static_cast<size_t>(i)).id) +
                               ", feature " + std::to_string(k) + " is " + (std::isnan(dst[k]) ? "nan" : "infinite") +
                               " (sluice_prep.py refuses such features; sluice info --verify finds them)");
      }
      sum += dst[k];
    }
    if (normalize && sum != 0) {
      const float inv = 1.0f / sum;
      for (int64_t k = 0; k < d; ++k) dst[k] *= inv;
    }
  }
  return Status::Ok();
}

Result<ModelInput> NcTask::StepInput(const Batch& b, const Pass& pass, uint64_t step, bool training,
                                     const RowSource& source) {
  ModelInput in;
  if (training && embeddings_) {  // rows that learn: uses that require grad
    inverse_.resize(b.rows.uses());
    for (size_t i = 0; i < inverse_.size(); ++i) inverse_[i] = b.rows.row_of(i);
    const std::span<float* const> rows(reinterpret_cast<float* const*>(b.rows.rows.data()), b.rows.rows.size());
    in.tables.push_back(GatherUses(rows, {inverse_}, feature_dim_, /*requires_grad=*/true));
  } else {
    TableInput features;
    SLUICE_RETURN_IF_ERROR(GatherRows(b.rows, source, features.uses));
    features.rows = features.uses.size(0);
    in.tables.push_back(std::move(features));
  }
  AddSample(b.sub, in);
  in.key = {pass.seed, pass.epoch, step};
  in.training = training;
  return in;
}

void NcTask::AddSample(const SampledSubgraph& s, ModelInput& in) const {
  for (size_t l = s.blocks.size(); l-- > 0;) {  // outermost block first
    const SampledBlock& sb = s.blocks[l];
    BlockInput bi;
    bi.num_dst = static_cast<int64_t>(sb.num_dst), bi.num_src = static_cast<int64_t>(sb.num_src);
    bi.offsets = torch::from_blob(const_cast<uint64_t*>(sb.offsets.data()),
                                  {static_cast<int64_t>(sb.offsets.size())}, torch::kLong).clone();
    bi.src_local = torch::from_blob(const_cast<int64_t*>(sb.src_local.data()),
                                    {static_cast<int64_t>(sb.src_local.size())}, torch::kLong).clone();
    in.blocks.push_back(std::move(bi));
  }
  const std::vector<int64_t>& nodes = s.layers.back();
  in.ids["nodes"] = torch::from_blob(const_cast<int64_t*>(nodes.data()), {static_cast<int64_t>(nodes.size())},
                                     torch::kLong).clone();
  const std::vector<int64_t>& seeds = s.layers.front();
  in.labels = torch::empty({static_cast<int64_t>(seeds.size())}, torch::kLong);
  int64_t* lab = in.labels.data_ptr<int64_t>();
  for (size_t i = 0; i < seeds.size(); ++i) lab[i] = labels_[static_cast<size_t>(seeds[i])];
}

Result<double> NcTask::TrainStep(const Batch& b, const Pass& pass, uint64_t step) {
  auto start = SteadyClock::now();
  SLUICE_ASSIGN_OR_RETURN(ModelInput in, StepInput(b, pass, step, /*training=*/true, FeatureSource()));
  gather_s_ += SecondsSince(start);
  start = SteadyClock::now();
  net_->train();
  opt_->zero_grad();
  SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*net_, in, /*allow_fused=*/false));
  opt_->step();
  if (embeddings_) {  // each row's use gradients summed in use order, then its optimizer
    const torch::Tensor sums = SumRowGrads({inverse_}, g.use_grads[0], static_cast<int64_t>(b.rows.rows.size()),
                                           feature_dim_);
    const std::span<float* const> rows(reinterpret_cast<float* const*>(b.rows.rows.data()), b.rows.rows.size());
    ApplyRowOptimizer(cfg_.train.embedding_optimizer, rows, sums, feature_dim_,
                      static_cast<float>(cfg_.train.embedding_lr * lr_scale_));
  }
  compute_s_ += SecondsSince(start);
  return g.loss;
}

void NcTask::SetLearningRateScale(double scale) {
  lr_scale_ = scale;
  if (opt_ != nullptr) SetOptimizerLr(*opt_, cfg_.train.lr * scale);
  if (device_rows_ != nullptr) device_rows_->set_lr(static_cast<float>(cfg_.train.embedding_lr * scale));
}

// Training through the spill: the next epoch's first steps are listed and swept during this
// epoch's last ones (`next`, its order of the training nodes drawn now), so its packs are ready
// when it starts, with no sweep of the whole file.
void NcTask::SpillPasses(Pass& pass, Pass& next) {
  pass.spill = true;
  pass.spill_continues = pass.first_step == 0 && spill_next_epoch_ == pass.epoch;
  spill_next_epoch_ = ~uint64_t{0};
  if (pass.epoch + 1 >= static_cast<uint64_t>(cfg_.train.epochs)) return;
  EpochTrainNodes(pass.epoch + 1, next_epoch_nodes_);
  next = pass;
  next.nodes = &next_epoch_nodes_;
  next.epoch = pass.epoch + 1, next.first_step = 0;
  next.spill_next = nullptr;
  if (next.units != nullptr) {  // in virtual shards: this rank's units of the next epoch
    next_units_ = ShardUnits(next);
    next.units = &next_units_;
  }
  pass.spill_next = &next;
  spill_next_epoch_ = pass.epoch + 1;
}

Result<EpochOutcome> NcTask::TrainEpoch(uint64_t epoch, uint64_t first, StepSink& sink) {
  Pass pass = TrainPass(epoch, first, epoch_nodes_);
  pass.writes = embeddings_;
  pass.run_ahead = run_ahead_;
  pass.group = static_cast<uint32_t>(cfg_.storage.io_group);
  if (sample_on_device_) {
    auto* cuda = cuda_sampler_.get();
    pass.sample_on_device = [cuda](std::span<const int64_t> seeds, const SampleKey& key) {
      return SampleWithCuda(cuda, seeds, key);
    };
  }
  if (device_rows_ != nullptr) return TrainEpochOnDevice(pass, sink);
  if (dp_ != nullptr) pass.shards = dp_->shards();
  if (sharded_ != nullptr) {  // learnable embeddings: whole steps, this rank's rows
    pass.whole_steps = true;
    pass.own_begin = own_begin_, pass.own_end = own_end_;
  } else if (dp_ != nullptr) {
    units_ = ShardUnits(pass);
    pass.units = &units_;
  }
  Pass next_pass = pass;
  if (spill_ != nullptr) SpillPasses(pass, next_pass);
  const bool per_step = dp_ == nullptr || pass.whole_steps;  // else a unit is a shard
  const uint64_t steps = pass.steps();
  auto p = MakePipeline(pass, FeatureSource());
  p->Start();
  sink.EpochStart(std::min<uint64_t>(first * pass.batch, epoch_nodes_.size()));
  uint64_t unit = 0;  // a sharded pass's next unit
  // Learnable embeddings across processes: the next step's rows start travelling while a step
  // computes.
  const bool ahead = pass.whole_steps && SendsRowsAhead(dp_.get(), cfg_.dist.prefetch_rows) && p->NextReadyEarly();
  for (uint64_t s = first; s < steps; ++s) {
    Status st;
    Batch* b = per_step ? p->WaitReady(s - first, st) : nullptr;
    const Batch* next = nullptr;
    if (b != nullptr && ahead && s + 1 < steps) {
      next = p->WaitReady(s + 1 - first, st);
      if (next == nullptr) b = nullptr;
    }
    Result<double> loss = !per_step         ? TrainShardedStep(*p, pass, s, unit)
                          : b == nullptr    ? Result<double>(st)
                          : pass.whole_steps ? TrainRowShardedStep(*b, pass, s, next)
                                             : TrainStep(*b, pass, s);
    if (!loss.ok()) {
      p->Abort(loss.status());
      (void)FinishPass(*p);
      return loss.status();
    }
    const auto n = static_cast<uint32_t>(pass.Seeds(s).size());
    if (per_step) p->Computed(s - first);
    const bool last = s + 1 == steps;
    if (sink.StepDone(n, *loss * n, last) && !last) {
      if (ahead) SLUICE_RETURN_IF_ERROR(sharded_->DropPrefetch());  // every rank stops after this step
      SLUICE_RETURN_IF_ERROR(FinishPass(*p));
      return EpochOutcome{true, s + 1};
    }
  }
  SLUICE_RETURN_IF_ERROR(FinishPass(*p));
  return EpochOutcome{};
}

Status NcTask::Infer(const std::vector<int64_t>& nodes, LogitSink* sink) {
  torch::NoGradGuard no_grad;
  net_->eval();
  Pass pass{&nodes, sampler_.get(), &eval_options_, cfg_.eval.seed, 0, 0, static_cast<uint64_t>(cfg_.eval.batch)};
  const RowSource source = FeatureSource();
  FitEvalPass(pass, source.cache);
  if (sharded_ != nullptr && across_processes()) {  // rows from their owners
    pass.own_keys = true;
    pass.own_begin = own_begin_, pass.own_end = own_end_;
  }
  // Across processes each rank computes its part of the steps; the sinks are shared after.
  std::vector<std::pair<uint64_t, int>> rounds;
  SplitEvalPass(pass, rounds);
  auto p = MakePipeline(pass, source);
  p->Start();
  Status s = RunEvalPass(*p, pass, source, [&](uint64_t step, const ModelInput& in, const SampledSubgraph&) -> Status {
    SLUICE_ASSIGN_OR_RETURN(torch::Tensor out, PredictStep(*net_, in));
    const auto seeds = static_cast<int64_t>(std::min<uint64_t>(pass.batch, nodes.size() - step * pass.batch));
    if (out.dim() != 2 || out.size(0) != seeds || out.size(1) != classes_) {
      std::string shape;
      for (const int64_t d : out.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      return InvalidArgument("the model's output in evaluation step " + std::to_string(step) + " is [" + shape +
                             "]; expected [" + std::to_string(seeds) + ", " + std::to_string(classes_) +
                             "] (a row per node, a column per class)");
    }
    out = out.to(torch::kCPU, torch::kFloat32).contiguous();
    const float* rows = out.data_ptr<float>();
    for (int64_t k = 0; k < out.size(0); ++k) sink->Take(step * pass.batch + static_cast<uint64_t>(k), rows + k * classes_);
    return Status::Ok();
  });
  if (!s.ok()) p->Abort(s);
  const Status finished = FinishPass(*p);
  SLUICE_RETURN_IF_ERROR(s);
  SLUICE_RETURN_IF_ERROR(finished);
  if (!across_processes()) return Status::Ok();
  const std::vector<uint64_t> bounds = EvalStepBounds(pass.steps());
  const uint64_t batch = pass.batch;
  return ShareLogits(*sink, nodes.size(), [&](uint64_t i) { return EvalStepOwner(bounds, i / batch); });
}

std::unique_ptr<Task> MakeNcTask(const NcConfig& config) { return std::make_unique<NcTask>(config); }

}  // namespace sluice
