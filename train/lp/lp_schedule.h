#pragma once
// Link prediction's epoch schedule: which edges each step trains, in which buffer state.
//
// The partition schedule: per buffer state (a set of resident partitions, from
// cache/partition_order), the edges of its buckets shuffled together, in batches; negatives
// come from the state's partitions (as Marius does). Only one state's edges are in memory at a
// time (read from the dataset when the state begins). The global shuffle: one permutation of
// every edge (all in memory), in batches, one state holding every partition.
// Everything is a pure function of (seed, epoch), so in-memory and out-of-core runs, and a run
// and its resumed copy, train the same steps.

#include <cstdint>
#include <utility>
#include <vector>

#include "cache/trace.h"
#include "common/status.h"
#include "storage/dataset.h"
#include "storage/file.h"
#include "train/lp/lp_config.h"
#include "train/lp/node_table.h"

namespace sluice {

// One training step: edges [begin, end) of its state's order.
struct LpStep {
  uint32_t state = 0;
  uint64_t begin = 0, end = 0;
};

// A buffer state: its partitions (the blocks its steps need, the ranges of their negatives)
// and the dataset ranges of its buckets' edges.
struct LpState {
  std::vector<BlockId> blocks;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) into edges.train.*
  uint64_t edges = 0;
  uint64_t group = 0;  // shuffle key
};

// The edges a state trains (read when the state begins) and their order. With the global
// shuffle the columns stay empty and the order indexes the schedule's edges in memory.
struct StateEdges {
  std::vector<int64_t> src, rel, dst;
  std::vector<int64_t> order;
  std::vector<std::byte> scratch;  // read buffer
};

class LpSchedule {
 public:
  // Reads the bucket index, and every training edge (global shuffle) or opens the edge files
  // (partition schedule).
  Status Open(const Dataset& dataset, const LpConfig& config, const NodeTableLayout& layout);
  // Partitions resident per buffer state (the partition schedule; from the memory plan).
  void set_resident(uint32_t resident) { resident_ = resident; }
  uint32_t resident() const { return resident_; }

  // The epoch's steps and its buffer states.
  std::vector<LpStep> EpochSteps(uint64_t epoch, std::vector<LpState>& states) const;
  // Reads a state's edges (checking every id) and orders them. Thread-safe for distinct `out`.
  Status LoadStateEdges(uint64_t epoch, const LpState& state, StateEdges& out) const;
  // The edges of the largest buffer state of an epoch (for the memory plan).
  uint64_t LargestStateEdges() const;

  uint64_t num_train_edges() const { return num_train_edges_; }
  // The global shuffle's edges (empty for the partition schedule).
  const std::vector<int64_t>& src() const { return src_; }
  const std::vector<int64_t>& rel() const { return rel_; }
  const std::vector<int64_t>& dst() const { return dst_; }

 private:
  struct EdgeFile {
    File file;
    DType dtype = DType::kInt64;
  };
  std::vector<LpStep> ShuffleSteps(std::vector<LpState>& states) const;
  Status ReadEdgeRange(int64_t begin, int64_t end, StateEdges& out) const;
  Status CheckIds(const LpState& state, const StateEdges& edges) const;

  const Dataset* dataset_ = nullptr;
  LpConfig cfg_;
  NodeTableLayout layout_;
  uint32_t resident_ = 0;
  uint64_t num_train_edges_ = 0;
  std::vector<int64_t> src_, rel_, dst_;
  std::vector<int64_t> buckets_;
  std::vector<EdgeFile> edge_files_;  // src, rel (may be absent), dst
};

// Reads split `split`'s edges (relation 0 when the dataset has no relation column).
Status LoadEdges(const Dataset& dataset, const std::string& split, std::vector<int64_t>& src,
                 std::vector<int64_t>& rel, std::vector<int64_t>& dst);

// The largest run-ahead d (at most `run_ahead`) such that every d + 1 consecutive steps need
// at most `slots` blocks together (the planner protects the blocks of the last d steps).
uint32_t EffectiveRunAhead(const std::vector<LpStep>& steps, const std::vector<LpState>& states,
                           uint32_t partitions, uint32_t slots, uint32_t run_ahead);

}  // namespace sluice
