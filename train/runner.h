#pragma once
// The runner: one run lifecycle for every task (train/task.h).
//
// Training, in order:
//   1. the run directory is locked (a second trainer is refused in one line); one that holds
//      checkpoints is refused unless --resume (continue) or --overwrite (discard them, the
//      tables, metrics and summary, and start over);
//   2. the thread plan is applied;
//   3. with --resume, the latest checkpoint is opened and verified (every file's CRC-32), and
//      the resume rule checked (train/fingerprint.h): another config or dataset is refused in
//      one line, other threads.* are accepted with a warning;
//   4. only then is config.yaml written and are the tables prepared;
//   5. epochs: progress, metrics.jsonl (a JSON line per epoch), validation every eval.every
//      epochs, the best checkpoint (by the task's score), early stopping after eval.patience
//      validations without a better one, a checkpoint every checkpoint_every epochs and at the
//      end. The checkpoint store keeps the two newest checkpoints and `best`;
//   6. Ctrl-C or SIGTERM: the step finishes, a checkpoint is written, Train returns Aborted and
//      the process exits 130 or 143 (InterruptExitCode). A non-finite loss stops the run with an
//      error naming the epoch and step; the last checkpoint stays;
//   7. summary.txt and summary.json, written once.

#include <cstdint>
#include <string>

#include "common/status.h"
#include "train/task.h"

namespace sluice {

// TrainOptions and InterruptExitCode are public (sluice/run.h).

// Trains `task` (not yet opened) as its settings say. Returns Aborted after an interrupt (a
// checkpoint was written).
Status Train(Task& task, const TrainOptions& options);

// Opens a trained run for eval/export/predict: `which` is "default" (best when it exists, else
// latest), "latest", "best" or a checkpoint's name. The checkpoint is verified (CRC-32 of every
// file, fingerprints of config and dataset) before the task reads it. Returns its name.
Result<std::string> OpenTrained(Task& task, const std::string& which);

}  // namespace sluice
