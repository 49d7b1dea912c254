#pragma once
// A data-parallel step's rows across the ranks that own them (train/data_parallel.h), for every
// task whose learnable table is sharded by row range (recommendation, link prediction): the rows
// each rank's shards use come from their owners by all-to-all, at the step (never ahead, so no
// update is missed); after the step each use's gradient goes back to its row's owner by
// all-to-all, ranks (so uses) in order, and the owner adds each row's in global use order. The
// owner alone applies the sums to its rows.

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace sluice {

class DataParallel;

class ShardedRows {
 public:
  // `bounds`: world + 1 row numbers, rank r owning rows [bounds[r], bounds[r + 1]); `width`: the
  // floats of a row the model reads (the rest of a row, its optimizer state, stays with its owner).
  ShardedRows(DataParallel* dp, std::vector<uint64_t> bounds, uint64_t width);

  int OwnerOf(uint64_t row) const;
  const std::vector<uint64_t>& bounds() const { return bounds_; }
  uint64_t width() const { return width_; }

  // Step `step`'s rows to where they are used. `rows`: its distinct rows (global numbers);
  // `uses`: each use's index in `rows`, every shard's uses end to end in shard order;
  // `use_begin`: world + 1 positions, rank q's shards using uses [use_begin[q], use_begin[q + 1]);
  // `own`: the addresses of this rank's rows among `rows`, in their order there, and
  // `own_rows` their numbers (checked: a loaded row that is not the one used is a bug). With
  // `every_row` every rank receives every row (evaluation: each scores the whole batch).
  Status Fetch(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
               std::span<const uint64_t> use_begin, std::span<float* const> own,
               std::span<const uint64_t> own_rows, bool every_row);
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
  // Every row on every rank (evaluation over every node): `own` holds this rank's rows, `width`
  // floats each in row order; returns all T rows' floats in row order.
  Result<std::vector<float>> GatherAll(std::span<const float> own);

 private:
  DataParallel* dp_;
  std::vector<uint64_t> bounds_;
  uint64_t width_;
  // The step's (Fetch).
  std::vector<int> owner_;          // per distinct row
  std::vector<int64_t> local_of_;   // per distinct row: its index in `own` (-1: another rank's)
  std::vector<int64_t> uses_;       // per use: its distinct row
  std::vector<uint64_t> use_begin_;
  uint64_t own_rows_ = 0, needed_ = 0;
  std::vector<std::vector<char>> needs_;  // per rank: which distinct rows its shards use
  std::vector<float> values_;             // the rows' floats from their owners
  std::vector<float*> ptrs_;
  std::vector<float> use_grads_;
};

}  // namespace sluice
