#pragma once
// Link prediction's epoch schedule, and the reading of its edges.
//
// The partition schedule: per buffer state (a set of resident partitions, from
// cache/partition_order), the edges of its buckets shuffled together, in batches; a step needs
// its state's partitions (its negatives come from them too). Only one state's edges are in
// memory at a time, plus the next one's, read ahead by an EdgeReader on its own thread
// through the io layer. The global shuffle: one permutation of every edge (all in memory), in
// batches, one state holding every partition. Each epoch's ordering begins with the partitions
// the previous one ended with, so the buffer carries over the boundary. Everything is a pure
// function of (seed, epoch), so in-memory and out-of-core runs, and a run and its resumed copy,
// train the same steps.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache/partition_order.h"
#include "cache/trace.h"
#include "common/status.h"
#include "prefetch/run_ahead_ring.h"
#include "storage/dataset.h"
#include "storage/io_session.h"
#include "storage/row_file.h"

namespace sluice {

struct EdgeScheduleOptions {
  uint64_t batch = 1000;       // edges per step
  bool shuffle = false;        // the global shuffle (else the partition schedule)
  OrderingKind ordering = OrderingKind::kRolling;
  uint64_t seed = 1;
  uint64_t max_steps = 0;      // an epoch trains its first max_steps steps (0: all)
  bool chain = true;           // each epoch's ordering begins where the previous one ended
  IoConfig io;
};

// One training step: edges [begin, end) of its state's order.
struct EdgeStep {
  uint32_t state = 0;
  uint64_t begin = 0, end = 0;
};

// A buffer state: its partitions (the blocks its steps need, the ranges of their negatives)
// and the dataset ranges of its buckets' edges.
struct EdgeState {
  std::vector<BlockId> blocks;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) into edges.train.*
  uint64_t edges = 0;
  uint64_t group = 0;  // shuffle key
};

// The edges a state trains and their order. With the global shuffle the columns stay empty and
// the order indexes the schedule's own edges.
struct StateEdges {
  std::vector<int64_t> src, rel, dst;
  std::vector<int64_t> order;
};

class EdgeSchedule {
 public:
  // Reads the bucket index, and every training edge (global shuffle) or opens the edge columns
  // (partition schedule). `bounds`: partition k is nodes [bounds[k], bounds[k+1]).
  Status Open(const Dataset& dataset, std::vector<uint64_t> bounds, EdgeScheduleOptions options);
  // Partitions resident per buffer state (the partition schedule; from the memory plan).
  void set_resident(uint32_t resident) { resident_ = resident; }
  uint32_t resident() const { return resident_; }
  uint32_t partitions() const { return static_cast<uint32_t>(bounds_.size() - 1); }
  uint64_t num_nodes() const { return bounds_.back(); }
  const std::vector<uint64_t>& bounds() const { return bounds_; }

  // The epoch's steps and its buffer states.
  std::vector<EdgeStep> EpochSteps(uint64_t epoch, std::vector<EdgeState>& states) const;
  // Reads a state's edges with `io` (checking every id) and orders them.
  Status LoadStateEdges(IoSession& io, uint64_t epoch, const EdgeState& state,
                        StateEdges& out) const;
  // The edges of the largest buffer state of an epoch (for the memory plan).
  uint64_t LargestStateEdges() const;
  // Node ranges [begin, end) of a state's partitions, in partition order (its negatives').
  std::vector<std::pair<int64_t, int64_t>> NodeRanges(const EdgeState& state) const;
  // A state holding every training edge among `state`'s partitions (each bucket (i, j) with both
  // resident, whole, in (i, j) order), whatever share of them `state` trains: its graph
  // (model.encoder's neighbours). Read it with LoadStateEdges.
  EdgeState ResidentState(const EdgeState& state) const;
  // The most edges ResidentState holds over epoch 0's states (the memory plan).
  uint64_t LargestResidentEdges() const;

  uint64_t num_train_edges() const { return num_train_edges_; }
  uint64_t num_relations() const { return num_relations_; }
  const EdgeScheduleOptions& options() const { return options_; }
  // The global shuffle's edges (empty for the partition schedule).
  const std::vector<int64_t>& src() const { return src_; }
  const std::vector<int64_t>& rel() const { return rel_; }
  const std::vector<int64_t>& dst() const { return dst_; }

 private:
  std::vector<EdgeStep> ShuffleSteps(std::vector<EdgeState>& states) const;
  // The partition schedule's buffer states of an epoch.
  PartitionOrder EpochOrder(uint64_t epoch) const;
  // Edges [begin, end) of edges.train.* that a state trains of its k-th bucket.
  std::pair<int64_t, int64_t> BucketRange(const BufferState& buffer, size_t k) const;
  Status CheckIds(const EdgeState& state, const StateEdges& edges) const;

  std::string dataset_dir_;
  EdgeScheduleOptions options_;
  std::vector<uint64_t> bounds_;
  uint32_t resident_ = 0;
  uint64_t num_train_edges_ = 0, num_relations_ = 1;
  std::vector<int64_t> src_, rel_, dst_;
  std::vector<int64_t> buckets_;
  // src, rel (absent: relation 0), dst, as arrays read through the io layer.
  std::unique_ptr<RowFile> columns_[3];
};

// Reads split `split`'s edges whole (relation 0 when the dataset has no relation column).
Status LoadEdges(const Dataset& dataset, const std::string& split, std::vector<int64_t>& src,
                 std::vector<int64_t>& rel, std::vector<int64_t>& dst);

// The largest run-ahead d (at most `run_ahead`) such that every d + 1 consecutive steps need
// at most `slots` blocks together (the planner protects the blocks of the last d steps).
uint32_t EffectiveRunAhead(const std::vector<EdgeStep>& steps, const std::vector<EdgeState>& states,
                           uint32_t partitions, uint32_t slots, uint32_t run_ahead);

// Reads buffer states' edges on its own thread (its own io ring), a state ahead of the
// sampler: Prefetch starts reading a state; Take waits for it (or reads it at once when it was
// not the one prefetched). Thread safety: Prefetch and Take from one thread (the sampler).
class EdgeReader {
 public:
  EdgeReader(const EdgeSchedule* schedule, uint64_t epoch);
  ~EdgeReader();
  EdgeReader(const EdgeReader&) = delete;
  EdgeReader& operator=(const EdgeReader&) = delete;

  void Prefetch(uint32_t index, const EdgeState* state);
  // Moves state `index`'s edges into `out`.
  Status Take(uint32_t index, const EdgeState& state, StateEdges& out);
  // The reader thread's time: busy reading and ordering, waiting for a request.
  StageTime time() const;

 private:
  void Run();

  const EdgeSchedule* schedule_;
  const uint64_t epoch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  const EdgeState* request_ GUARDED_BY(mu_) = nullptr;  // a state to read
  uint32_t requested_ GUARDED_BY(mu_) = ~uint32_t{0};   // its index
  bool done_ GUARDED_BY(mu_) = false;                   // the request's edges are in `next_`
  bool quit_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  StateEdges next_;  // written by the thread while a request is open, then by Take
  StageTime time_ GUARDED_BY(mu_);
  std::unique_ptr<IoSession> own_io_;  // Take's, for a state that was not prefetched
  // Last, and started in the constructor's body: the thread locks mu_ and waits on cv_, which
  // must be constructed first (started in the initializer list it raced their construction
  // and could lose its lock state and its wake-up: a hang seen on the 20M-edge graph).
  std::thread thread_;
};

}  // namespace sluice
