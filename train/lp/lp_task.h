#pragma once
// Link prediction as a task of the training core (train/task.h): node embeddings in a table in
// the run directory (tables/nodes.bin: one row per node, its embedding then its Adagrad state),
// trained in place through the partition cache out of core, or wholly in memory; relation
// embeddings and their optimizer as dense state. Checkpoints hold nodes.bin, relations.pt and
// relation_optimizer.pt.

#include <memory>
#include <string>

#include "train/lp/lp_config.h"
#include "train/task.h"

namespace sluice {

std::unique_ptr<Task> MakeLpTask(const LpConfig& config);

}  // namespace sluice
