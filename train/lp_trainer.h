#pragma once
// Link prediction: training, evaluation, export and prediction over a run directory.
//
// A run directory holds: config.yaml (the effective config), tables/nodes.bin (the node table,
// trained in place through the cache), checkpoints/ (snapshots, renamed into place when
// complete; `latest` names the newest), metrics.jsonl (one JSON object per epoch), summary.txt
// (where the time went, the thread and memory plans, peak RSS).

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "train/lp_config.h"

namespace sluice {

struct LpMetrics {
  uint64_t edges = 0;
  double mrr = 0, hits1 = 0, hits3 = 0, hits10 = 0;
  bool exact = true;     // ranked against every node (else against sampled nodes)
  bool filtered = true;  // other true edges removed from the rankings
  std::string ToString() const;
  std::string ToJson() const;
};

struct LpTrainOptions {
  bool resume = false;            // continue from the run directory's latest checkpoint
  int64_t stop_after_steps = -1;  // tests: stop (like Ctrl-C) after this many steps in all
};

// Trains as the config says; writes the run directory.
Status RunLpTrain(const LpConfig& config, const LpTrainOptions& options = {});

// Evaluates the run directory's current tables (its latest checkpoint) on `split`.
Result<LpMetrics> RunLpEval(const std::string& run_dir, const std::string& split);

// Writes embeddings as .npy (nodes, relations) and the original-id maps beside them.
Status RunLpExport(const std::string& run_dir, const std::string& out_dir);

// The k best tails of (head, relation), by original names when the dataset has them.
Result<std::string> RunLpPredict(const std::string& run_dir, const std::string& head,
                                 const std::string& relation, int k);

// Reads the run directory's config.yaml.
Result<LpConfig> LoadRunConfig(const std::string& run_dir);

// The node table's embeddings (no optimizer state), nodes x dim, from a run directory.
Result<std::vector<float>> ReadNodeEmbeddings(const std::string& run_dir);

}  // namespace sluice
