#pragma once
// The configuration of a recommendation run (`sluice train` with task: recommendation).
// Every key is listed once here; `sluice train --print-config` shows them with their docs.

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/thread_plan.h"
#include "cache/planner.h"
#include "storage/io_session.h"
#include "train/row_optimizers.h"
#include "train/run_config.h"

namespace sluice {

// How raw categorical ids become rows.
enum class IdMapping { kModulo, kVocab, kRaw };
template <>
struct EnumNames<IdMapping> {
  static constexpr std::pair<IdMapping, const char*> kNames[] = {
      {IdMapping::kModulo, "modulo"}, {IdMapping::kVocab, "vocab"}, {IdMapping::kRaw, "raw"}};
};
// Where the tables live on disk.
enum class TableBackend { kRowFile, kRocksDb };
template <>
struct EnumNames<TableBackend> {
  static constexpr std::pair<TableBackend, const char*> kNames[] = {
      {TableBackend::kRowFile, "rowfile"}, {TableBackend::kRocksDb, "rocksdb"}};
};

struct DlrmModelConfig {
  int dim = 16;
  std::vector<int> bottom{512, 256};  // hidden layers of the bottom MLP (its output is dim)
  std::vector<int> top{512, 256};     // hidden layers of the top MLP (its output is 1)
  IdMapping ids = IdMapping::kModulo;
  uint64_t table_rows = 1'000'000;    // rows per table when ids are reduced modulo
  double init_scale = 0.05;
  bool linear = false;
  std::string torchscript;  // a scripted model in place of the built-in network

  template <class V>
  void VisitFields(V& v) {
    v.Field("dim", dim, "embedding dimension (also the bottom MLP's output)", InRange(1, 1024));
    v.Field("bottom", bottom, "hidden layer widths of the bottom MLP over the dense features");
    v.Field("top", top, "hidden layer widths of the top MLP over the interactions");
    v.Field("ids", ids,
            "how raw ids become rows: modulo (table_rows per table), vocab (the dataset's "
            "vocabulary; unseen ids share one row), raw (64-bit ids, rocksdb backend or in memory)");
    v.Field("table_rows", table_rows, "rows per table with ids: modulo",
            InRange(uint64_t{1}, uint64_t{1} << 40));
    v.Field("init_scale", init_scale, "rows start uniform in [-init_scale, init_scale]",
            InRange(0.0, 10.0));
    v.Field("linear", linear,
            "add a first-order term: each row also holds a weight, summed into the logit "
            "(stored after the embedding, trained by the same row optimizer)");
    v.Field("torchscript", torchscript,
            "a TorchScript file (torch.jit.script(module).save(FILE)) in place of the built-in "
            "network: forward(dense [B, D], rows [B, C, W]) returns logits [B] (W: dim, +1 with "
            "linear); its parameters are trained by train.dense_optimizer; bottom and top are "
            "unused (\"\": the built-in network)");
  }
};

struct DlrmTrainConfig {
  int epochs = 1;
  int batch = 2048;
  RowOptimizer optimizer = RowOptimizer::kRowwiseAdagrad;
  double lr = 0.05;
  double adagrad_init = 0.0;  // initial Adagrad state of every row
  DenseOptimizer dense_optimizer = DenseOptimizer::kAdam;
  double dense_lr = 0.001;
  uint64_t seed = 1;
  uint64_t max_steps = 0;  // per epoch, 0 = all
  double max_minutes = 0;  // training time budget (0: none)
  double lr_decay = 1;      // every learning rate x this on a plateau (1: never)
  int lr_decay_patience = 1;
  int virtual_shards = 0;   // 0: each batch in one piece (train/data_parallel.h)

  template <class V>
  void VisitFields(V& v) {
    v.Field("epochs", epochs, "passes over the training samples (in file order)",
            InRange(0, 100000));
    v.Field("batch", batch, "samples per step", InRange(1, 1 << 22));
    v.Field("optimizer", optimizer, "embedding rows: sgd, rowwise_adagrad or adagrad");
    v.Field("lr", lr, "learning rate of the embedding rows", InRange(0.0, 1e6));
    v.Field("adagrad_init", adagrad_init,
            "initial Adagrad state of every row (as TensorFlow's initial_accumulator_value): "
            "rows seen a few times move less, so their label noise is not memorised",
            InRange(0.0, 1e6));
    v.Field("dense_optimizer", dense_optimizer, "MLPs: sgd, adam or adagrad");
    v.Field("dense_lr", dense_lr, "learning rate of the MLPs", InRange(0.0, 1e6));
    v.Field("seed", seed, "seed of the initial rows and MLP weights");
    v.Field("max_steps", max_steps, "train at most this many steps per epoch (0: all)");
    MaxMinutesField(v, max_minutes);
    LrDecayFields(v, lr_decay, lr_decay_patience);
    VirtualShardsField(v, virtual_shards);
  }
};

struct DlrmEvalConfig {
  int every = 1;           // evaluate every N epochs (0: never)
  int first_epochs = 0;    // also evaluate after each of the first N epochs
  int patience = 0;        // stop after N evaluations without a better AUC (0: never)
  std::string split = "valid";  // validation split; the test split is used when it is absent
  uint64_t max_samples = 0;     // 0: all

  template <class V>
  void VisitFields(V& v) {
    v.Field("every", every, "evaluate every N epochs (0: never)", InRange(0, 100000));
    v.Field("first_epochs", first_epochs,
            "also evaluate after each of the first N epochs, where the best model may come early (0: none)",
            InRange(0, 100000));
    v.Field("patience", patience, "early stop after N evaluations without a better AUC (0: off)",
            InRange(0, 100000));
    v.Field("split", split, "split evaluated during training (test when the dataset has no valid)");
    v.Field("max_samples", max_samples, "evaluate at most this many samples (0: all)");
  }
};

struct DlrmStorageConfig {
  StorageMode mode = StorageMode::kOutOfCore;
  TableBackend backend = TableBackend::kRowFile;
  Bytes budget{1ull << 30};
  uint64_t cache_rows = 0;  // 0 = from the budget
  PlannerKind planner = PlannerKind::kAuto;
  int window = 0;  // 0: from the budget and the first steps
  int run_ahead = 2;
  Bytes rocksdb_cache{32ull << 20};
  Bytes rocksdb_memtable{16ull << 20};
  double write_back_share = 0.5;
  uint64_t write_back_rows = 0;  // 0 = from the share
  double preload_share = 0;  // off: it pays only when disk reads bound training (see the docs)
  int preload_horizon = 32;
  bool carry_over = true;  // the oracle's window reaches into the next epoch
  double carry_rows = 0.7;  // share of the cache the next epoch's first rows may keep

  template <class V>
  void VisitFields(V& v) {
    v.Field("mode", mode, "out_of_core (tables on disk, rows through the cache) or in_memory");
    v.Field("backend", backend, "where tables live on disk: rowfile (dense rows) or rocksdb");
    v.Field("budget", budget, "memory budget of the whole process (e.g. 1GiB)",
            InRange(Bytes{1 << 20}, Bytes{uint64_t{1} << 50}));
    v.Field("cache_rows", cache_rows,
            "rows in the cache (experiments; below the steps in flight, a step that does not fit beside them "
            "waits for them); 0 = as many as the budget holds");
    v.Field("planner", planner,
            "cache planner: auto (oracle, or LRU with read-ahead, as a cost model measured at "
            "start-up predicts the cheaper; the summary says why), oracle (lookahead) or lru",
            OneOfEnum({PlannerKind::kAuto, PlannerKind::kOracle, PlannerKind::kLru}));
    v.Field("window", window,
            "oracle lookahead in steps; 0 (the default): sized at start-up, the window among 2, "
            "4, ... 64 whose ring fits the budget and whose cache (the budget's rest) loads the "
            "fewest rows over the first 512 steps, simulated (the summary lists them)",
            InRange(0, 100000));
    v.Field("run_ahead", run_ahead, "steps of io issued ahead of compute", InRange(0, 1000));
    v.Field("rocksdb_cache", rocksdb_cache, "RocksDB block cache (counted in the budget)");
    v.Field("rocksdb_memtable", rocksdb_memtable, "RocksDB memtable size (two count in the budget)");
    v.Field("write_back_share", write_back_share,
            "share of the rows' memory that stages evicted rows for sorted sweeps of the row file "
            "(rowfile backend; 0: each eviction is written to its page at once)",
            InRange(0.0, 0.9));
    v.Field("write_back_rows", write_back_rows,
            "rows in the write-back buffer (experiments); 0 = from write_back_share");
    v.Field("preload_share", preload_share,
            "share of the rows' memory that holds rows read ahead of the cache's loads, region by "
            "region (rowfile backend, either planner; 0, the default: loads read each missing row at once; "
            "try 0.25 when the run's summary shows thousands of disk reads per step; with planner "
            "auto: the share read-ahead gets when chosen, 0 meaning 0.25)",
            InRange(0.0, 0.9));
    v.Field("preload_horizon", preload_horizon,
            "steps ahead whose rows are read ahead; every region of the row file is read once per "
            "horizon", InRange(1, 100000));
    v.Field("carry_over", carry_over,
            "the oracle's window carries over epoch boundaries: an epoch's last steps are planned "
            "seeing the next epoch's first steps (every epoch reads the samples in one order), so "
            "the rows those use stay cached (false: the window ends with the epoch)");
    v.Field("carry_rows", carry_rows,
            "oracle, with carry_over and more than one epoch: the rows of the epoch's first steps "
            "(which the next epoch needs first) are evicted after every other row outside the "
            "window, as many first steps as fit this share of the cache, when at least 16 do "
            "(0: none)",
            InRange(0.0, 0.9));
  }
};

struct DlrmConfig {
  DlrmConfig() { threads.compute = 1; }

  std::string task = "recommendation";
  std::string dataset;
  std::string run_dir = "runs/dlrm";
  double checkpoint_every = 1;  // epochs (see VisitRunFields)
  bool checkpoint_incremental = true;
  bool progress = true;
  bool step_log = false;
  DlrmModelConfig model;
  DlrmTrainConfig train;
  DlrmEvalConfig eval;
  DlrmStorageConfig storage;
  ThreadConfig threads;
  DeviceConfig device;
  DistConfig dist;
  IoConfig io;

  template <class V>
  void VisitFields(V& v) {
    v.Field("task", task, "the workload: recommendation here", OneOf({"recommendation"}));
    VisitRunFields(v, *this);
  }
};

}  // namespace sluice
