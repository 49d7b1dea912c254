#pragma once
// The node-classification task (task: node_classification): a GNN over k-hop sampled blocks
// of the in-neighbour graph, trained on a seeded order of the training nodes; node features
// read from the dataset (float32 or float16, never written) through the row cache out of
// core, or held in RAM. See docs/node_classification.md.

#include <memory>

#include "train/nc/nc_config.h"
#include "train/task.h"

namespace sluice {

std::unique_ptr<Task> MakeNcTask(const NcConfig& config);

}  // namespace sluice
