#pragma once
// Recommendation (DLRM): training, evaluation, export and prediction over a run directory.
//
// A run directory holds: config.yaml (the effective config), tables/ (the embedding tables:
// rows.bin, one row file with every table's rows one after another, or kv/, a RocksDB table
// keyed by (table, id); each row holds its optimizer state after the embedding),
// checkpoints/ (snapshots renamed into place when complete; `latest` names the newest),
// metrics.jsonl (one JSON object per epoch) and summary.txt.

#include <cstdint>
#include <string>

#include "common/status.h"
#include "train/dlrm_config.h"

namespace sluice {

struct DlrmMetrics {
  uint64_t samples = 0;
  double auc = 0, logloss = 0, accuracy = 0;
  std::string ToString() const;
  std::string ToJson() const;
};

struct DlrmTrainOptions {
  bool resume = false;            // continue from the run directory's latest checkpoint
  int64_t stop_after_steps = -1;  // tests: stop (like Ctrl-C) after this many steps in all
};

Status RunDlrmTrain(const DlrmConfig& config, const DlrmTrainOptions& options = {});

// Evaluates the run directory's latest checkpoint on `split` (never writes a row).
Result<DlrmMetrics> RunDlrmEval(const std::string& run_dir, const std::string& split);

// Writes each table's embeddings as .npy (dense tables: rows x dim; raw ids: the rows created
// so far, with their ids beside them) and the dense model's parameters.
Status RunDlrmExport(const std::string& run_dir, const std::string& out_dir);

// Click probabilities of the first `count` samples of `split`, one line each with the label.
Result<std::string> RunDlrmPredict(const std::string& run_dir, const std::string& split,
                                   uint64_t count);

// AUC by the rank-sum formula (ties get their mean rank); NaN when a class is absent.
double AreaUnderRoc(const float* scores, const float* labels, uint64_t n);

}  // namespace sluice
