#pragma once
// The configuration of a link-prediction run (`sluice train` with task link_prediction).
// Every key is listed once here; `sluice train --print-config` shows them with their docs.

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/thread_plan.h"
#include "cache/partition_order.h"
#include "cache/planner.h"
#include "storage/io_session.h"
#include "train/run_config.h"

namespace sluice {

enum class Decoder { kDistMult, kComplEx, kTransE, kDot };
template <>
struct EnumNames<Decoder> {
  static constexpr std::pair<Decoder, const char*> kNames[] = {
      {Decoder::kDistMult, "distmult"}, {Decoder::kComplEx, "complex"},
      {Decoder::kTransE, "transe"}, {Decoder::kDot, "dot"}};
};
enum class LossKind { kSoftmax, kLogistic, kMargin };
template <>
struct EnumNames<LossKind> {
  static constexpr std::pair<LossKind, const char*> kNames[] = {
      {LossKind::kSoftmax, "softmax"}, {LossKind::kLogistic, "logistic"},
      {LossKind::kMargin, "margin"}};
};
enum class Regularizer { kNone, kL2, kN3 };
template <>
struct EnumNames<Regularizer> {
  static constexpr std::pair<Regularizer, const char*> kNames[] = {
      {Regularizer::kNone, "none"}, {Regularizer::kL2, "l2"}, {Regularizer::kN3, "n3"}};
};
// sampled: each chunk of queries scores its shared uniform negatives; all (1vsAll): every
// query scores every node of its step's partitions (the global shuffle: every node), its true
// candidate taken out of the negatives, so the softmax is a cross-entropy over all entities.
// auto: all when training edges x nodes (an epoch's scores) is at most train.all_max_pairs,
// sampled above (resolved at open).
enum class Scoring { kSampled, kAll, kAuto };
template <>
struct EnumNames<Scoring> {
  static constexpr std::pair<Scoring, const char*> kNames[] = {
      {Scoring::kSampled, "sampled"}, {Scoring::kAll, "all"}, {Scoring::kAuto, "auto"}};
};
enum class Schedule { kPartitions, kShuffle };
template <>
struct EnumNames<Schedule> {
  static constexpr std::pair<Schedule, const char*> kNames[] = {
      {Schedule::kPartitions, "partitions"}, {Schedule::kShuffle, "shuffle"}};
};

// An encoder in front of the decoder: none (each node is its embedding row) or graphsage (one
// GraphSage layer, mean aggregator: a node is W_self x_v + W_neigh mean(x_u) + b over up to
// model.fanout sampled in- and out-neighbours, x the learnable rows; MariusGNN's link prediction).
enum class LpEncoder { kNone, kGraphSage };
template <>
struct EnumNames<LpEncoder> {
  static constexpr std::pair<LpEncoder, const char*> kNames[] = {
      {LpEncoder::kNone, "none"}, {LpEncoder::kGraphSage, "graphsage"}};
};

struct LpModelConfig {
  Decoder decoder = Decoder::kDistMult;
  int dim = 50;
  bool reciprocal = false;  // train (t, r^-1, h) for every (h, r, t); score tails only
  double init_scale = 0.001;
  double relation_init_scale = 0;  // DistMult/ComplEx relations: 0 = 1 +- 0.1; else +-this
  double entity_dropout = 0.0;    // on the query's entity (h of (h, r, ?), t of (?, r, t))
  double relation_dropout = 0.0;  // on the query's relation
  double candidate_dropout = 0.0; // on the scored candidates (negatives and the true one)
  LpEncoder encoder = LpEncoder::kNone;
  int fanout = 10;  // graphsage: neighbours drawn per node (in and out together)

  template <class V>
  void VisitFields(V& v) {
    v.Field("decoder", decoder, "distmult, complex, transe or dot");
    v.Field("dim", dim, "embedding dimension (even for complex)", InRange(1, 4096));
    v.Field("reciprocal", reciprocal,
            "add reciprocal relations: (t, r^-1, h) per edge, corrupt tails only");
    v.Field("init_scale", init_scale, "rows start uniform in [-init_scale, init_scale]",
            InRange(0.0, 10.0));
    v.Field("relation_init_scale", relation_init_scale,
            "distmult/complex: relations start uniform in [-s, s] (0: near one, 1 +- 0.1, so "
            "every relation starts as a weighted dot product; a symmetric relation needs "
            "negative weights to rank a query's own entity below its neighbours, which a start "
            "near one rarely finds); transe: unused (relations start like rows)",
            InRange(0.0, 10.0));
    v.Field("entity_dropout", entity_dropout,
            "dropout on the query's entity embedding in training (the candidates: candidate_dropout)",
            InRange(0.0, 0.95));
    v.Field("relation_dropout", relation_dropout,
            "dropout on the query's relation embedding in training", InRange(0.0, 0.95));
    v.Field("candidate_dropout", candidate_dropout,
            "dropout on the scored candidates' embeddings in training: the negatives and the "
            "true candidate (a negative's mask is shared by the queries that score it; 1vsAll: "
            "the true candidate takes its column's)",
            InRange(0.0, 0.95));
    v.Field("encoder", encoder,
            "none (a node is its embedding row) or graphsage (one GraphSage layer, mean "
            "aggregator, over up to `fanout` sampled in- and out-neighbours of every node a step "
            "scores, negatives included; neighbours from every training edge among the step's "
            "resident partitions, or the whole graph under the shuffle; evaluation encodes every "
            "node over the whole training graph)");
    v.Field("fanout", fanout, "graphsage: neighbours drawn per node, in and out together",
            InRange(1, 256));
  }
};

struct LpTrainConfig {
  int epochs = 10;
  int batch = 1000;
  int chunks = 10;          // negatives are shared by the edges of a chunk
  int negatives = 500;      // per chunk, for each corrupted side
  Scoring scoring = Scoring::kSampled;
  bool own_negative = false;  // sampled softmax: each query also scores its own entity
  uint64_t all_max_pairs = 10'000'000'000;  // scoring auto: 1vsAll up to this many edge x node pairs
  double label_smoothing = 0.0;
  double relation_prediction = 0.0;  // weight of the relation-prediction loss (0: off)
  double max_minutes = 0;   // training time budget (0: none)
  double lr_decay = 1;      // every learning rate x this on a plateau (1: never)
  int lr_decay_patience = 1;
  bool lr_decay_restore = false;  // a decay goes back to the best checkpoint first
  uint64_t max_steps = 0;   // per epoch, 0 = all
  LossKind loss = LossKind::kSoftmax;
  double margin = 1.0;
  double lr = 0.1;           // Adagrad, node embeddings (state in the row)
  DenseOptimizer relation_optimizer = DenseOptimizer::kAdam;
  double relation_lr = 0.1;
  Regularizer regularizer = Regularizer::kNone;
  double regularization = 0.0;
  Schedule schedule = Schedule::kPartitions;
  OrderingKind ordering = OrderingKind::kRolling;
  uint64_t seed = 1;
  int virtual_shards = 0;  // 0: each batch in one piece (train/data_parallel.h)

  template <class V>
  void VisitFields(V& v) {
    v.Field("epochs", epochs, "passes over the training edges", InRange(0, 100000));
    v.Field("batch", batch, "edges per step", InRange(1, 10'000'000));
    v.Field("chunks", chunks, "negative chunks per batch (negatives shared within a chunk)",
            InRange(1, 100000));
    v.Field("negatives", negatives, "negatives per chunk per corrupted side", InRange(1, 1'000'000));
    v.Field("scoring", scoring,
            "sampled: each chunk scores `negatives` shared uniform nodes; all (1vsAll): each "
            "query scores every node of its step's partitions (every node under the shuffle) "
            "except its true candidate; chunks and negatives are then unused; auto: all when "
            "training edges x nodes is at most all_max_pairs, else sampled");
    v.Field("own_negative", own_negative,
            "sampled scoring: each query also scores its own entity as a negative (h of (h, r, ?), "
            "t of (?, r, t); not on a self-loop, where it is the answer). On sparse knowledge "
            "graphs the own entity is often the top wrong answer and uniform negatives almost "
            "never contain it (1vsAll scores it anyway; unused there); softmax loss, built-in "
            "decoders");
    v.Field("all_max_pairs", all_max_pairs,
            "scoring auto: score every node when training edges x nodes (an epoch's scores) is "
            "at most this (FB15k-237: 4e9, about a minute per epoch at dim 128 on 2 cores)");
    v.Field("label_smoothing", label_smoothing,
            "softmax loss: the target puts 1 - e on the true candidate and e spread evenly over "
            "the negatives", InRange(0.0, 0.99));
    v.Field("relation_prediction", relation_prediction,
            "weight of an auxiliary loss in training: each edge's relation predicted from its head "
            "and tail (a cross-entropy over every relation, scored by the decoder; with reciprocal "
            "relations over those of the query's direction), added to the mean loss; distmult, "
            "complex or transe (0: off)",
            InRange(0.0, 1000.0));
    MaxMinutesField(v, max_minutes);
    LrDecayFields(v, lr_decay, lr_decay_patience);
    v.Field("lr_decay_restore", lr_decay_restore,
            "at each decay, training goes on from the best checkpoint (rows, relations, optimizer "
            "state) at the lower rates, not from the last epoch's model; needs checkpoints "
            "(checkpoint_every >= 0) and one process");
    v.Field("max_steps", max_steps,
            "train at most this many steps per epoch, the first of its schedule (0: all; "
            "benchmarks and smoke runs)");
    v.Field("loss", loss, "softmax (cross-entropy over negatives), logistic or margin");
    v.Field("margin", margin, "margin of the margin ranking loss", InRange(0.0, 1e6));
    v.Field("lr", lr, "Adagrad learning rate of the node embeddings", InRange(0.0, 1e6));
    v.Field("relation_optimizer", relation_optimizer, "adam or adagrad",
            OneOfEnum({DenseOptimizer::kAdam, DenseOptimizer::kAdagrad}));
    v.Field("relation_lr", relation_lr, "learning rate of the relation embeddings",
            InRange(0.0, 1e6));
    v.Field("regularizer", regularizer, "none, l2 or n3 (on the embeddings a step uses)");
    v.Field("regularization", regularization, "regularization weight", InRange(0.0, 1e6));
    v.Field("schedule", schedule,
            "partitions: edges grouped by bucket, negatives from the bucket's partitions; "
            "shuffle: a global shuffle with negatives from all nodes (every table in memory)");
    v.Field("ordering", ordering,
            "bucket ordering of the partition schedule: beta (fixed), randomized (a new "
            "partition order each epoch), spread (randomized, each bucket in a random one of "
            "the buffer states that hold its partitions), split (randomized, each bucket's "
            "edges shared out among all of those states) or rolling (one partition swapped per "
            "state, the longest resident leaving, so every partition comes back throughout the "
            "epoch; buckets shared out as split; more swaps than split, about 2x the bound at 32 "
            "resident and more)");
    v.Field("seed", seed, "seed of initial rows, batch order and negatives");
    VirtualShardsField(v, virtual_shards);
  }
};

struct LpEvalConfig {
  int every = 1;                 // validate every N epochs (0: never)
  int first_epochs = 0;          // also validate after each of the first N epochs
  int patience = 0;              // stop after N validations without improvement (0: never)
  uint64_t exact_max_nodes = 50'000'000;  // rank against all nodes up to this many
  int sampled_negatives = 1000;  // otherwise against this many uniform nodes
  bool filtered = true;
  uint64_t max_edges = 0;        // evaluate at most this many edges per split (0: all)

  template <class V>
  void VisitFields(V& v) {
    v.Field("every", every, "validate every N epochs (0: never)", InRange(0, 100000));
    v.Field("first_epochs", first_epochs,
            "also validate after each of the first N epochs, where the best model may come early (0: none)",
            InRange(0, 100000));
    v.Field("patience", patience, "early stop after N validations without a better MRR (0: off)",
            InRange(0, 100000));
    v.Field("exact_max_nodes", exact_max_nodes,
            "rank against every node when there are at most this many (else sampled)");
    v.Field("sampled_negatives", sampled_negatives, "nodes ranked against when sampled",
            InRange(1, 10'000'000));
    v.Field("filtered", filtered, "drop other true edges (train, valid, test) from rankings");
    v.Field("max_edges", max_edges, "evaluate at most this many edges per split (0: all)");
  }
};

struct LpStorageConfig {
  StorageMode mode = StorageMode::kOutOfCore;
  Bytes budget{2ull << 30};
  int resident = 0;  // partitions the schedule keeps resident; 0 = from the budget
  int slots = 0;     // cache slots (partitions in memory); 0 = from the budget
  PlannerKind planner = PlannerKind::kOracle;
  int run_ahead = 8;  // steps of io issued before compute reaches them
  bool carry_over = true;  // the partition buffer carries over epoch boundaries
  uint64_t cache_rows = 0;  // data parallel out of core: the row cache's rows; 0 = from the budget

  template <class V>
  void VisitFields(V& v) {
    v.Field("mode", mode, "out_of_core (tables on disk, through the cache) or in_memory");
    v.Field("budget", budget, "memory budget of the whole process (e.g. 2.5GiB)",
            InRange(Bytes{1 << 20}, Bytes{uint64_t{1} << 50}));
    v.Field("resident", resident, "partitions resident at once; 0 = as many as the budget holds",
            InRange(0, 1 << 20));
    v.Field("slots", slots, "partition slots in memory (experiments); 0 = as many as the budget holds",
            InRange(0, 1 << 20));
    v.Field("planner", planner, "cache planner: oracle, lru, none",
            OneOfEnum({PlannerKind::kOracle, PlannerKind::kLru, PlannerKind::kNone}));
    v.Field("run_ahead", run_ahead, "steps of io issued ahead of compute", InRange(0, 100000));
    v.Field("carry_over", carry_over,
            "the partition schedule's buffer carries over epoch boundaries: each epoch's ordering "
            "begins with the partitions the previous one ended with, which stay resident (false: "
            "every epoch starts from an empty buffer with an ordering of its own)");
    v.Field("cache_rows", cache_rows,
            "train.virtual_shards out of core: rows in each process's row cache (experiments); 0 = as "
            "many as the budget holds");
  }
};

struct LpConfig {
  // One libtorch/OpenBLAS thread per TBB task: the step's chunks (and corrupted sides) are the
  // parallel work. (Measured on FB15k-237, 2 cores, when the two sides were the tasks: 2.35
  // s/epoch; 2 intra-op threads each: 6.7 s/epoch, the OpenMP and OpenBLAS pools spin against
  // each other on small matrix products.)
  LpConfig() { threads.compute = 1; }

  std::string task = "link_prediction";
  std::string dataset;
  std::string run_dir = "runs/lp";
  double checkpoint_every = 1;  // epochs (see VisitRunFields)
  bool checkpoint_incremental = true;
  bool progress = true;
  bool step_log = false;
  LpModelConfig model;
  LpTrainConfig train;
  LpEvalConfig eval;
  LpStorageConfig storage;
  ThreadConfig threads;
  DeviceConfig device;
  DistConfig dist;
  IoConfig io;

  template <class V>
  void VisitFields(V& v) {
    v.Field("task", task, "the workload: link_prediction (the default), recommendation or node_classification",
            OneOf({"link_prediction"}));
    VisitRunFields(v, *this);
  }
};

}  // namespace sluice
