#pragma once
// Recommendation (DLRM) as a task of the training core (train/task.h): embedding tables in the
// run directory (tables/rows.bin, one row file with every table's rows one after another, or
// tables/kv/, a RocksDB table keyed by (table, id); each row holds its optimizer state after
// the embedding) trained through the lookahead row cache out of core, or wholly in memory; the
// dense network and its optimizer as dense state. Checkpoints hold the tables (rows.bin, kv/,
// or rows.kv for in-memory raw ids), dense.pt and dense_optimizer.pt.

#include <memory>

#include "train/dlrm/dlrm_config.h"
#include "train/task.h"

namespace sluice {

std::unique_ptr<Task> MakeDlrmTask(const DlrmConfig& config);

}  // namespace sluice
