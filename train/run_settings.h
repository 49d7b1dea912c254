#pragma once
// The settings every task's config has, as the runner reads them (torch-free, so the config
// structs that fill them are too: the config fuzzer builds without libtorch).

#include <cstdint>
#include <string>

#include "common/thread_plan.h"
#include "train/dist_config.h"

namespace sluice {

// The settings every task's config has, as the runner needs them.
struct RunSettings {
  std::string task;      // "link_prediction", "recommendation", ...
  std::string dataset;   // dataset directory
  std::string run_dir;
  int epochs = 1;
  double max_minutes = 0;    // training time budget (0: none)
  double lr_decay = 1;       // learning rates x this on a plateau (1: never)
  int lr_decay_patience = 1;  // validations without a better score before a decay
  bool lr_decay_restore = false;  // a decay first restores the best checkpoint (link prediction)
  // Epochs between checkpoints: a whole number, or a fraction below 1 (a checkpoint every that
  // share of an epoch's units); 0: only at the end; -1: never.
  double checkpoint_every = 1;
  bool checkpoint_incremental = true;  // table copies rewrite only the pages written since
  bool progress = true;
  bool step_log = false;  // RUN/steps.tsv, a line per step
  int eval_every = 1;  // validate every N epochs (0: never)
  int eval_first_epochs = 0;  // and after each of the first N epochs
  int patience = 0;    // stop after N validations without a better score (0: never)
  uint64_t seed = 1;
  ThreadConfig threads;
  DistConfig dist;
};

}  // namespace sluice
