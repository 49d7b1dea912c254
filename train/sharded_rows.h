#pragma once
// A data-parallel step's rows across the ranks that own them (train/data_parallel.h), for every
// task whose learnable table is sharded by row range (recommendation, link prediction): the rows
// each rank's shards use come from their owners by all-to-all; after the step each use's
// gradient goes back to its row's owner by all-to-all, ranks (so uses) in order, and the owner
// adds each row's in global use order. The owner alone applies the sums to its rows.
//
// Ahead (Prefetch): while step t computes, the rows of step t + 1 that step t does not use
// travel already, by an all-to-all started before t computes and finished at t + 1's Fetch: no
// step between the fetch and the use updates them (step t's updates touch only step t's rows),
// so they are the values t + 1 would fetch. Fetch(t + 1) then moves only the rows both steps use.
// Every rank knows every step's rows, so all agree without asking which rows go ahead.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "train/data_parallel.h"

namespace sluice {

// Which ranks receive a step's rows: those whose uses read them (a training step, counted in the
// summary's row statistics; or an evaluation step, not counted), or every rank.
enum class RowsTo { kTrainingUses, kEvaluationUses, kEveryRank };

class ShardedRows {
 public:
  // `bounds`: world + 1 row numbers, rank r owning rows [bounds[r], bounds[r + 1]); `width`: the
  // floats of a row the model reads (the rest of a row, its optimizer state, stays with its owner).
  ShardedRows(DataParallel* dp, std::vector<uint64_t> bounds, uint64_t width);

  // The most a step holds here, for the memory plan: `uses` a step's uses (every rank's), of
  // which `my_uses` this rank's shards', `width` floats a row, `total_rows` in the table. At
  // most a distinct row per use; the uses' gradients as gathered, sent and received (this rank's
  // rows may take every use), the sums; across processes the fetched rows twice (as received
  // and in place); the step's bookkeeping.
  static uint64_t StepBytes(uint64_t uses, uint64_t my_uses, uint64_t width, int world, uint64_t total_rows);

  int OwnerOf(uint64_t row) const;
  const std::vector<uint64_t>& bounds() const { return bounds_; }
  DataParallel* dp() const { return dp_; }
  uint64_t width() const { return width_; }

  // Step `step`'s rows to where they are used. `rows`: its distinct rows (global numbers);
  // `uses`: each use's index in `rows`, every shard's uses end to end in shard order;
  // `use_begin`: world + 1 positions, rank q's shards using uses [use_begin[q], use_begin[q + 1]);
  // `own`: the addresses of this rank's rows among `rows`, in their order there, and
  // `own_rows` their numbers (checked: a loaded row that is not the one used is a bug). `to`:
  // who receives which rows (RowsTo).
  Status Fetch(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
               std::span<const uint64_t> use_begin, std::span<float* const> own,
               std::span<const uint64_t> own_rows, RowsTo to);
  // Step `step` (the next one Fetch will be asked for, its arguments as Fetch's) while the step
  // of the last Fetch computes: its rows the last Fetch's step does not use start travelling now.
  // One process: nothing (no row is another rank's).
  Status Prefetch(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
                  std::span<const uint64_t> use_begin, std::span<float* const> own,
                  std::span<const uint64_t> own_rows);
  // A prefetched step that will not be fetched (the pass stopped before it): waits for its
  // all-to-all, as every rank does.
  Status DropPrefetch();
  // Per distinct row of the step: its floats (null where this rank's uses read none of it).
  std::span<float* const> ptrs() const { return ptrs_; }
  // Distinct rows this rank's uses read.
  uint64_t rows_needed() const { return needed_; }
  // This rank's uses' gradients, `width` floats each in use order, appended by the task as it
  // computes its shards (Fetch clears them).
  std::vector<float>& use_grads() { return use_grads_; }
  // Appends a shard's use gradients (pieces covering its uses in order, as RunModel gives them)
  // times `share`, the shard's share of the step (its mean loss weighs that much of the batch's).
  void AddUseGrads(const std::vector<torch::Tensor>& pieces, float share);
  // Sends them to their rows' owners; returns [own.size(), width]: each of this rank's rows'
  // sum of every rank's uses of it, added in global use order.
  Result<torch::Tensor> SumOwnGrads();
  // Rows outside a step, each rank asking for its own (evaluation split across processes):
  // `wanted(q)` the rows rank q needs, sorted and distinct (every rank computes every rank's
  // alike; called once for each rank), `own_row(row)` this rank's row's `width` floats. Returns
  // wanted(rank())'s floats in its order; this rank's own rows among them are copied locally.
  Result<std::vector<float>> Trade(const std::function<std::vector<uint64_t>(int)>& wanted,
                                   const std::function<const float*(uint64_t)>& own_row, const char* what);

 private:
  // Who owns and who needs a step's rows.
  struct Plan {
    std::vector<int> owner;          // per distinct row
    std::vector<int64_t> local_of;   // per distinct row: its index in `own` (-1: another rank's)
    std::vector<std::vector<char>> needs;  // per rank: which distinct rows its shards use
  };
  Status MakePlan(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
                  std::span<const uint64_t> use_begin, std::span<const uint64_t> own_rows, uint64_t own,
                  bool every_row, Plan& plan) const;
  // The all-to-all's counts and this rank's sends: the rows each rank needs of this rank's,
  // those with `ahead[u]` == `which` (every row when `ahead` is empty).
  void Pack(const Plan& plan, std::span<float* const> own, std::span<const char> ahead, char which,
            std::vector<float>& send, std::vector<uint64_t>& send_counts, std::vector<uint64_t>& recv_counts) const;

  DataParallel* dp_;
  std::vector<uint64_t> bounds_;
  uint64_t width_;
  // The step's (Fetch).
  Plan plan_;
  std::vector<int64_t> uses_;       // per use: its distinct row
  std::vector<uint64_t> use_begin_;
  std::vector<uint64_t> rows_;      // its distinct rows (what the next step's prefetch leaves)
  std::vector<uint64_t> used_;      // a bit per table row: zero between Prefetch calls
  uint64_t own_rows_ = 0, needed_ = 0;
  std::vector<float> values_;             // the rows' floats from their owners
  // The next step's, started ahead (Prefetch).
  bool ahead_pending_ = false;
  uint64_t ahead_step_ = 0;
  std::vector<uint64_t> ahead_rows_;  // its distinct rows (Fetch checks it is asked for these)
  std::vector<char> ahead_;           // per distinct row: 1 if it travels ahead
  DataParallel::PendingAllToAll ahead_op_;
  std::vector<float*> ptrs_;
  std::vector<float> use_grads_;
};

// Evaluation split between the ranks, each step computed by one rank while every rank loads its
// own rows of every step: a round of steps, at most one of each rank, whose rows (each once, in
// first-use order across the round) travel by one all-to-all, each to the ranks whose steps use
// it. Node classification and recommendation split their evaluation so.
class EvalRound {
 public:
  explicit EvalRound(ShardedRows* sharded) : sharded_(sharded) {}

  // Rank q's step of the round (q ascending; a rank without one adds nothing), its arguments as
  // ShardedRows::Fetch's. This rank's rows are copied now: the step's batch may go after.
  Status Add(int q, uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
             std::span<float* const> own, std::span<const uint64_t> own_rows);
  // The round's all-to-all; then ptrs() as ShardedRows::ptrs() and this rank's step's uses
  // index it. Starts the next round.
  Status Fetch(uint64_t round);
  std::span<const int64_t> MyUses() const { return my_uses_; }
  std::span<float* const> ptrs() const { return sharded_->ptrs(); }

 private:
  ShardedRows* sharded_;
  std::vector<uint64_t> rows_, own_rows_, use_begin_;
  std::vector<int64_t> uses_, my_uses_, place_;  // place_: a step's distinct rows in the round's
  std::vector<float> own_values_;
  std::unordered_map<uint64_t, int64_t> index_;  // a row -> its place in rows_
  int next_rank_ = 0;
};

}  // namespace sluice
