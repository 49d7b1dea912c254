#include "train/sharded_rows.h"

#include <algorithm>
#include <string>

#include "train/data_parallel.h"
#include "train/model_step.h"

namespace sluice {

ShardedRows::ShardedRows(DataParallel* dp, std::vector<uint64_t> bounds, uint64_t width)
    : dp_(dp), bounds_(std::move(bounds)), width_(width) {}

int ShardedRows::OwnerOf(uint64_t row) const {
  const auto it = std::upper_bound(bounds_.begin(), bounds_.end(), row);
  return static_cast<int>(it - bounds_.begin()) - 1;
}

Status ShardedRows::Fetch(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
                          std::span<const uint64_t> use_begin, std::span<float* const> own,
                          std::span<const uint64_t> own_rows, bool every_row) {
  const int world = dp_->world_size(), me = dp_->rank();
  const uint64_t w = width_;
  const size_t n = rows.size();
  owner_.resize(n);
  local_of_.assign(n, -1);
  int64_t k = 0;
  bool same = own_rows.size() == own.size();
  for (size_t u = 0; u < n; ++u) {
    owner_[u] = OwnerOf(rows[u]);
    if (owner_[u] != me) continue;
    same = same && static_cast<size_t>(k) < own_rows.size() && own_rows[static_cast<size_t>(k)] == rows[u];
    local_of_[u] = k++;
  }
  if (static_cast<size_t>(k) != own.size() || !same) {
    return FailedPrecondition("data parallel: step " + std::to_string(step) + " has " + std::to_string(k) +
                              " rows of this rank but " + std::to_string(own.size()) +
                              " were loaded, or not the same rows in the same order (a bug)");
  }
  own_rows_ = own.size();
  uses_.assign(uses.begin(), uses.end());
  use_begin_.assign(use_begin.begin(), use_begin.end());
  use_grads_.clear();
  // Which rows each rank's shards use: every one (evaluation), or their uses'.
  needs_.resize(static_cast<size_t>(world));  // reused: no allocation per step once grown
  for (std::vector<char>& need : needs_) need.assign(n, every_row);
  if (!every_row) {
    for (int q = 0; q < world; ++q) {
      for (uint64_t i = use_begin_[static_cast<size_t>(q)]; i < use_begin_[static_cast<size_t>(q) + 1]; ++i) {
        needs_[static_cast<size_t>(q)][static_cast<size_t>(uses_[i])] = 1;
      }
    }
  }
  std::vector<float> send;
  std::vector<uint64_t> send_counts(static_cast<size_t>(world), 0), recv_counts(static_cast<size_t>(world), 0);
  for (int q = 0; q < world; ++q) {
    const std::vector<char>& need = needs_[static_cast<size_t>(q)];
    for (size_t u = 0; u < n; ++u) {
      if (!need[u] || owner_[u] != me) continue;
      const float* row = own[static_cast<size_t>(local_of_[u])];
      send.insert(send.end(), row, row + w);
      send_counts[static_cast<size_t>(q)] += w;
    }
  }
  const std::vector<char>& need = needs_[static_cast<size_t>(me)];
  for (size_t u = 0; u < n; ++u) {
    if (need[u]) recv_counts[static_cast<size_t>(owner_[u])] += w;
  }
  SLUICE_ASSIGN_OR_RETURN(const std::vector<float> got, dp_->AllToAll(send, send_counts, recv_counts, "the step's rows"));
  std::vector<uint64_t> at(static_cast<size_t>(world), 0);  // where each owner's rows start in `got`
  for (int r = 1; r < world; ++r) at[static_cast<size_t>(r)] = at[static_cast<size_t>(r) - 1] + recv_counts[static_cast<size_t>(r) - 1];
  values_.resize(n * w);
  ptrs_.assign(n, nullptr);
  needed_ = 0;
  for (size_t u = 0; u < n; ++u) {
    if (!need[u]) continue;
    uint64_t& from = at[static_cast<size_t>(owner_[u])];
    std::copy_n(got.data() + from, w, values_.data() + u * w);
    from += w;
    ptrs_[u] = values_.data() + u * w;
    ++needed_;
  }
  if (!every_row) dp_->CountRowsNeeded(needed_, uses_.size());  // training's steps
  return Status::Ok();
}

Result<torch::Tensor> ShardedRows::SumOwnGrads() {
  const int world = dp_->world_size(), me = dp_->rank();
  const uint64_t w = width_;
  const uint64_t first = use_begin_[static_cast<size_t>(me)], end = use_begin_[static_cast<size_t>(me) + 1];
  if (use_grads_.size() != (end - first) * w) {
    return FailedPrecondition("data parallel: " + std::to_string(use_grads_.size() / std::max<uint64_t>(w, 1)) +
                              " use gradients for " + std::to_string(end - first) + " uses (a bug)");
  }
  // This rank's uses' gradients to their rows' owners, in use order.
  std::vector<float> send;
  std::vector<uint64_t> send_counts(static_cast<size_t>(world), 0), recv_counts(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    for (uint64_t i = first; i < end; ++i) {
      if (owner_[static_cast<size_t>(uses_[i])] != r) continue;
      const float* g = use_grads_.data() + (i - first) * w;
      send.insert(send.end(), g, g + w);
      send_counts[static_cast<size_t>(r)] += w;
    }
  }
  // What comes back: every rank's uses of this rank's rows, ranks (so uses) in order.
  std::vector<int64_t> use_rows;
  for (int q = 0; q < world; ++q) {
    for (uint64_t i = use_begin_[static_cast<size_t>(q)]; i < use_begin_[static_cast<size_t>(q) + 1]; ++i) {
      const auto u = static_cast<size_t>(uses_[i]);
      if (owner_[u] != me) continue;
      use_rows.push_back(local_of_[u]);
      recv_counts[static_cast<size_t>(q)] += w;
    }
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<float> grads, dp_->AllToAll(send, send_counts, recv_counts, "the rows' gradients"));
  const auto d = static_cast<int64_t>(w);
  std::vector<torch::Tensor> pieces;
  if (!use_rows.empty()) pieces.push_back(torch::from_blob(grads.data(), {static_cast<int64_t>(use_rows.size()), d}));
  return SumRowGrads({use_rows}, pieces, static_cast<int64_t>(own_rows_), d);
}

Result<std::vector<float>> ShardedRows::GatherAll(std::span<const float> own) {
  const int world = dp_->world_size(), me = dp_->rank();
  const uint64_t w = width_;
  const auto rows_of = [&](int q) { return bounds_[static_cast<size_t>(q) + 1] - bounds_[static_cast<size_t>(q)]; };
  if (own.size() != rows_of(me) * w) {
    return FailedPrecondition("data parallel: " + std::to_string(own.size()) + " floats of this rank's rows, " +
                              std::to_string(rows_of(me) * w) + " expected (a bug)");
  }
  std::vector<float> send;
  std::vector<uint64_t> send_counts(static_cast<size_t>(world), 0), recv_counts(static_cast<size_t>(world), 0);
  for (int q = 0; q < world; ++q) {
    if (q == me) continue;
    send.insert(send.end(), own.begin(), own.end());
    send_counts[static_cast<size_t>(q)] = own.size();
    recv_counts[static_cast<size_t>(q)] = rows_of(q) * w;
  }
  SLUICE_ASSIGN_OR_RETURN(const std::vector<float> got, dp_->AllToAll(send, send_counts, recv_counts, "its rows for evaluation"));
  std::vector<float> all(bounds_.back() * w);
  const float* from = got.data();
  for (int q = 0; q < world; ++q) {
    const uint64_t n = rows_of(q) * w;
    std::copy_n(q == me ? own.data() : from, n, all.data() + bounds_[static_cast<size_t>(q)] * w);
    if (q != me) from += n;
  }
  return all;
}

void ShardedRows::AddUseGrads(const std::vector<torch::Tensor>& pieces, float share) {
  for (const torch::Tensor& piece : pieces) {
    const torch::Tensor x = (piece * share).contiguous();
    use_grads_.insert(use_grads_.end(), x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  }
}

}  // namespace sluice
