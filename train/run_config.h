#pragma once
// What every task's config shares, listed once: the top-level keys after `task` (dataset,
// run_dir, checkpoint_every, progress and the model/train/eval/storage/threads/io sections),
// and the RunSettings the runner reads from them. A task's config struct calls
// VisitRunFields from its VisitFields; its train section has `epochs` and `seed`, its eval
// section `every` and `patience`.

#include "common/config.h"
#include "train/device_config.h"
#include "train/dist_config.h"
#include "train/run_settings.h"

namespace sluice {

// Where a task's learnable tables live.
enum class StorageMode { kOutOfCore, kInMemory };
template <>
struct EnumNames<StorageMode> {
  static constexpr std::pair<StorageMode, const char*> kNames[] = {
      {StorageMode::kOutOfCore, "out_of_core"}, {StorageMode::kInMemory, "in_memory"}};
};

// The optimizer of a model's dense parameters (libtorch's).
enum class DenseOptimizer { kSgd, kAdam, kAdagrad };
template <>
struct EnumNames<DenseOptimizer> {
  static constexpr std::pair<DenseOptimizer, const char*> kNames[] = {
      {DenseOptimizer::kSgd, "sgd"}, {DenseOptimizer::kAdam, "adam"},
      {DenseOptimizer::kAdagrad, "adagrad"}};
};

// checkpoint_every: -1, 0, a fraction in (0, 1), or a whole number of epochs.
inline std::string CheckpointEveryCheck(const double& v) {
  if (v == -1 || (v >= 0 && v < 1) || (v >= 1 && v <= 100000 && v == static_cast<double>(static_cast<int64_t>(v)))) {
    return {};
  }
  return "must be -1 (never), 0 (at the end), a fraction of an epoch below 1, or a whole number "
         "of epochs up to 100000, got " + ShortestValue(v);
}

// train.max_minutes, the same key in every task's train section.
template <class V>
void MaxMinutesField(V& v, double& max_minutes) {
  v.Field("max_minutes", max_minutes,
          "training time budget in minutes (0: none): no epoch starts that the previous one's "
          "time (training, validation, checkpoint) says would end past it", InRange(0.0, 1e7));
}

// train.virtual_shards, the same key in every task that trains data-parallel (train/data_parallel.h).
template <class V>
void VirtualShardsField(V& v, int& virtual_shards) {
  v.Field("virtual_shards", virtual_shards,
          "cut each batch into this many shards computed apart and summed in a fixed order, so "
          "runs across any number of processes up to it train bitwise the same model "
          "(docs/distributed.md; needed by a run across processes, e.g. 12); 0: each batch in one piece",
          InRange(0, 4096));
}

// train.lr_decay and train.lr_decay_patience, the same keys in every task's train section:
// every learning rate of the run (rows and dense parameters) is multiplied by lr_decay after
// lr_decay_patience validations in a row without a better score (the runner, train/runner.cc).
template <class V>
void LrDecayFields(V& v, double& lr_decay, int& lr_decay_patience) {
  v.Field("lr_decay", lr_decay,
          "multiply every learning rate by this after lr_decay_patience validations without a "
          "better score (1: never; 0.5 halves them on a plateau)", InRange(0.01, 1.0));
  v.Field("lr_decay_patience", lr_decay_patience,
          "validations in a row without a better score before the learning rates decay "
          "(counted again from each decay)", InRange(1, 1000));
}

template <class V, class Config>
void VisitRunFields(V& v, Config& c) {
  v.Field("dataset", c.dataset, "dataset directory (written by scripts/sluice_prep.py)");
  v.Field("run_dir", c.run_dir, "run directory: tables, checkpoints, metrics, summary");
  v.Field("checkpoint_every", c.checkpoint_every,
          "checkpoint every N epochs, or within epochs at a fraction below 1 (0.1: every tenth "
          "of an epoch and at its end); 0: at the end only; -1: never (for benchmarks: the run "
          "cannot be resumed, evaluated or exported)", CheckpointEveryCheck);
  v.Field("checkpoint_incremental", c.checkpoint_incremental,
          "a checkpoint rewrites only the table pages written since the checkpoint it replaces "
          "(docs/training.md); false: it copies the whole table");
  v.Field("progress", c.progress, "print a progress bar on stderr");
  v.Field("step_log", c.step_log,
          "write RUN/steps.tsv: every step's epoch, step, wall seconds, units and mean loss");
  v.Section("model", c.model, "the model");
  v.Section("train", c.train, "training");
  v.Section("eval", c.eval, "evaluation");
  v.Section("storage", c.storage, "where the tables live");
  v.Section("threads", c.threads, "thread plan");
  v.Section("io", c.io, "io layer");
  v.Section("device", c.device, "the compute device");
  v.Section("dist", c.dist, "runs across processes (docs/distributed.md)");
}

template <class Config>
RunSettings RunSettingsOf(const Config& c) {
  RunSettings s;
  s.task = c.task;
  s.dataset = c.dataset;
  s.run_dir = c.run_dir;
  s.epochs = c.train.epochs;
  s.max_minutes = c.train.max_minutes;
  s.lr_decay = c.train.lr_decay;
  s.lr_decay_patience = c.train.lr_decay_patience;
  if constexpr (requires { c.train.lr_decay_restore; }) s.lr_decay_restore = c.train.lr_decay_restore;
  s.checkpoint_every = c.checkpoint_every;
  s.checkpoint_incremental = c.checkpoint_incremental;
  s.progress = c.progress;
  s.step_log = c.step_log;
  s.eval_every = c.eval.every;
  s.eval_first_epochs = c.eval.first_epochs;
  s.patience = c.eval.patience;
  s.seed = c.train.seed;
  s.threads = c.threads;
  s.dist = c.dist;
  return s;
}

}  // namespace sluice
