#pragma once
// The configuration of a node-classification run (`sluice train` with task:
// node_classification): a GNN (GraphSage, GCN or GAT) over k-hop sampled blocks of the
// in-neighbour graph, node features read from the dataset through the row cache.
// Every key is listed once here; `sluice train --print-config` shows them with their docs.

#include <cstdint>
#include <string>
#include <vector>

#include "cache/planner.h"
#include "common/config.h"
#include "common/thread_plan.h"
#include "common/units.h"
#include "storage/io_session.h"
#include "train/row_optimizers.h"
#include "train/run_config.h"

namespace sluice {

enum class GnnKind { kGraphSage, kGcn, kGat };
template <>
struct EnumNames<GnnKind> {
  static constexpr std::pair<GnnKind, const char*> kNames[] = {
      {GnnKind::kGraphSage, "graphsage"}, {GnnKind::kGcn, "gcn"}, {GnnKind::kGat, "gat"}};
};
enum class SageAggregator { kMean, kMaxPool };
template <>
struct EnumNames<SageAggregator> {
  static constexpr std::pair<SageAggregator, const char*> kNames[] = {
      {SageAggregator::kMean, "mean"}, {SageAggregator::kMaxPool, "max_pool"}};
};
enum class NormKind { kNone, kBatch, kLayer };
template <>
struct EnumNames<NormKind> {
  static constexpr std::pair<NormKind, const char*> kNames[] = {
      {NormKind::kNone, "none"}, {NormKind::kBatch, "batch"}, {NormKind::kLayer, "layer"}};
};
enum class FeatureNormalize { kNone, kRow };
template <>
struct EnumNames<FeatureNormalize> {
  static constexpr std::pair<FeatureNormalize, const char*> kNames[] = {
      {FeatureNormalize::kNone, "none"}, {FeatureNormalize::kRow, "row"}};
};
// Reading features through a read-only mapping of the dataset file (the baseline of training
// over np.memmap): off, or with madvise MADV_NORMAL / MADV_RANDOM.
enum class FeatureMmap { kOff, kNormal, kRandom };
template <>
struct EnumNames<FeatureMmap> {
  static constexpr std::pair<FeatureMmap, const char*> kNames[] = {
      {FeatureMmap::kOff, "off"}, {FeatureMmap::kNormal, "normal"}, {FeatureMmap::kRandom, "random"}};
};

enum class GnnOptimizer { kAdam, kAdamW };
template <>
struct EnumNames<GnnOptimizer> {
  static constexpr std::pair<GnnOptimizer, const char*> kNames[] = {
      {GnnOptimizer::kAdam, "adam"}, {GnnOptimizer::kAdamW, "adamw"}};
};

// Where training's k-hop sampler runs (the pipeline's sampler stage): the CPU, the GPU (the
// CUDA sampler: the same samples bit for bit), or auto: on a GPU run the faster of the two,
// timed on the first steps' seeds at set-up.
enum class SamplerDevice { kAuto, kCpu, kCuda };
template <>
struct EnumNames<SamplerDevice> {
  static constexpr std::pair<SamplerDevice, const char*> kNames[] = {
      {SamplerDevice::kAuto, "auto"}, {SamplerDevice::kCpu, "cpu"}, {SamplerDevice::kCuda, "cuda"}};
};

struct NcModelConfig {
  GnnKind kind = GnnKind::kGraphSage;
  int layers = 2;
  int hidden = 256;
  std::vector<int> fanouts{15, 10};
  bool replace = false;
  SageAggregator aggregator = SageAggregator::kMean;
  int heads = 8;
  int output_heads = 1;
  double dropout = 0.5;
  double attention_dropout = 0.0;
  NormKind norm = NormKind::kNone;
  int embedding_dim = 0;
  double init_scale = 0.1;

  template <class V>
  void VisitFields(V& v) {
    v.Field("kind", kind, "the GNN: graphsage, gcn or gat");
    v.Field("layers", layers, "message-passing layers (= hops sampled)", InRange(1, 8));
    v.Field("hidden", hidden, "width of the hidden layers (gat: per head)", InRange(1, 65536));
    v.Field("fanouts", fanouts,
            "neighbours sampled per node at hop 1, 2, ... (one per layer; -1: all of them)");
    v.Field("replace", replace, "sample neighbours with replacement");
    v.Field("aggregator", aggregator, "graphsage: mean or max_pool");
    v.Field("heads", heads, "gat: attention heads of the hidden layers (concatenated)",
            InRange(1, 64));
    v.Field("output_heads", output_heads, "gat: heads of the output layer (averaged)",
            InRange(1, 64));
    v.Field("dropout", dropout, "dropout on every layer's input", InRange(0.0, 0.95));
    v.Field("attention_dropout", attention_dropout, "gat: dropout on the attention weights",
            InRange(0.0, 0.95));
    v.Field("norm", norm, "normalisation after each hidden layer: none, batch or layer");
    v.Field("embedding_dim", embedding_dim,
            "learnable node embeddings of this width as the GNN's input, instead of the dataset's "
            "features (for graphs without features; rows in the run directory through the cache, "
            "written back); 0: the features", InRange(0, 65536));
    v.Field("init_scale", init_scale, "embeddings start uniform in [-init_scale, init_scale]",
            InRange(0.0, 10.0));
  }
};

struct NcFeaturesConfig {
  FeatureNormalize normalize = FeatureNormalize::kNone;

  template <class V>
  void VisitFields(V& v) {
    v.Field("normalize", normalize,
            "none, or row: each feature row divided by its sum (Planetoid's bag-of-words)");
  }
};

struct NcTrainConfig {
  int epochs = 100;
  int batch = 512;
  GnnOptimizer optimizer = GnnOptimizer::kAdam;
  double lr = 0.01;
  double weight_decay = 5e-4;
  uint64_t seed = 1;
  RowOptimizer embedding_optimizer = RowOptimizer::kAdagrad;
  double embedding_lr = 0.1;
  double max_minutes = 0;  // training time budget (0: none)
  double lr_decay = 1;      // every learning rate x this on a plateau (1: never)
  int lr_decay_patience = 1;
  SamplerDevice sampler = SamplerDevice::kAuto;
  int virtual_shards = 0;  // 0: each batch in one piece (train/data_parallel.h)

  template <class V>
  void VisitFields(V& v) {
    v.Field("epochs", epochs, "passes over the training nodes", InRange(0, 100000));
    v.Field("batch", batch, "training nodes (seeds) per step", InRange(1, 1 << 24));
    v.Field("optimizer", optimizer, "adam (weight decay as L2) or adamw (decoupled)");
    v.Field("lr", lr, "learning rate", InRange(0.0, 1e6));
    v.Field("weight_decay", weight_decay, "weight decay", InRange(0.0, 1e3));
    v.Field("seed", seed, "seed of the weights, the node order, sampling and dropout");
    v.Field("embedding_optimizer", embedding_optimizer,
            "learnable node embeddings (model.embedding_dim): sgd, rowwise_adagrad or adagrad");
    v.Field("embedding_lr", embedding_lr, "learning rate of the node embeddings", InRange(0.0, 1e6));
    MaxMinutesField(v, max_minutes);
    LrDecayFields(v, lr_decay, lr_decay_patience);
    v.Field("sampler", sampler,
            "where training's k-hop sampler runs: cpu, cuda (the GPU; the same samples bit for bit) or "
            "auto (with device.type cuda, the faster of the two timed on the first steps at set-up; "
            "else cpu)");
    VirtualShardsField(v, virtual_shards);
  }
};

struct NcEvalConfig {
  int every = 1;
  int first_epochs = 0;
  int patience = 0;
  std::string split = "valid";
  std::vector<int> fanouts;  // empty: every neighbour at every hop
  int batch = 1024;
  uint64_t seed = 7;
  bool layerwise = true;

  template <class V>
  void VisitFields(V& v) {
    v.Field("every", every, "validate every N epochs (0: never)", InRange(0, 100000));
    v.Field("first_epochs", first_epochs,
            "also validate after each of the first N epochs, where the best model may come early (0: none)",
            InRange(0, 100000));
    v.Field("patience", patience,
            "early stop after N validations without a better accuracy (0: off)", InRange(0, 100000));
    v.Field("split", split, "split validated during training (test when the dataset has no valid)");
    v.Field("fanouts", fanouts,
            "neighbours sampled per hop at evaluation ([]: all of them, the full neighbourhood)");
    v.Field("batch", batch, "nodes per evaluation step", InRange(1, 1 << 24));
    v.Field("seed", seed, "the fixed seed of sampled evaluation");
    v.Field("layerwise", layerwise,
            "full-neighbourhood inference (eval with fanouts [], export, predict) layer by layer: "
            "every node's layer-1 output, then layer 2, ..., kept as row files read through the "
            "cache (false: through blocks sampled with every neighbour, whose size grows with the hops)");
  }
};

struct NcStorageConfig {
  StorageMode mode = StorageMode::kOutOfCore;
  Bytes budget{1ull << 30};
  uint64_t cache_rows = 0;
  int window = 8;
  int run_ahead = 2;
  PlannerKind planner = PlannerKind::kOracle;
  int io_group = 1;
  Bytes io_group_gap{64 * 1024};
  int spill_steps = 0;
  FeatureMmap mmap = FeatureMmap::kOff;

  template <class V>
  void VisitFields(V& v) {
    v.Field("mode", mode,
            "out_of_core (feature rows read from the dataset through the cache) or in_memory");
    v.Field("mmap", mmap,
            "with mode in_memory: off (features loaded into RAM), or read through a read-only "
            "mapping of the dataset file and the page cache with madvise normal or random (the "
            "np.memmap baseline)");
    v.Field("budget", budget, "memory budget of the whole process (e.g. 1GiB)",
            InRange(Bytes{1 << 20}, Bytes{uint64_t{1} << 50}));
    v.Field("cache_rows", cache_rows,
            "feature rows in the cache (experiments; below the steps in flight, a step that does not fit beside "
            "them waits for them); 0 = as many as the budget holds");
    v.Field("window", window, "the cache's lookahead in steps (oracle planner)", InRange(0, 100000));
    v.Field("run_ahead", run_ahead,
            "steps of io issued ahead of compute (raised to 2 x io_group - 1 so that a group's io "
            "runs while the previous group computes)", InRange(0, 1000));
    v.Field("planner", planner,
            "oracle (lookahead over the window), lru, static (the highest in-degree rows pinned, "
            "the rest read per step) or none (read-through)",
            OneOfEnum({PlannerKind::kOracle, PlannerKind::kLru, PlannerKind::kStatic, PlannerKind::kNone}));
    v.Field("io_group", io_group,
            "steps whose feature reads run as one sorted sweep (rows io_group_gap apart read "
            "together); 1: each step's misses on their own", InRange(1, 256));
    v.Field("io_group_gap", io_group_gap,
            "with io_group > 1: rows at most this far apart are read as one extent, gap included",
            InRange(Bytes{0}, Bytes{64ull << 20}));
    v.Field("spill_steps", spill_steps,
            "0: off. K > 0: training sweeps the feature file once every K steps for the steps "
            "ahead and writes each step's rows (less the pinned ones) to a spill file in the run "
            "directory as one pack its loads read back sequentially (out of core, io_group 1; "
            "ignored in memory; docs/node_classification.md)", InRange(0, 4096));
  }
};

struct NcConfig {
  NcConfig() { threads.compute = 1; }

  std::string task = "node_classification";
  std::string dataset;
  std::string run_dir = "runs/nc";
  double checkpoint_every = 1;  // epochs (see VisitRunFields)
  bool checkpoint_incremental = true;
  bool progress = true;
  bool step_log = false;
  NcModelConfig model;
  NcFeaturesConfig features;
  NcTrainConfig train;
  NcEvalConfig eval;
  NcStorageConfig storage;
  ThreadConfig threads;
  DeviceConfig device;
  DistConfig dist;
  IoConfig io;

  template <class V>
  void VisitFields(V& v) {
    v.Field("task", task, "the workload: node_classification here", OneOf({"node_classification"}));
    VisitRunFields(v, *this);
    v.Section("features", features, "node features");
  }
};

}  // namespace sluice
