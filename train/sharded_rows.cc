#include "train/sharded_rows.h"

#include <algorithm>
#include <string>

#include "train/model_step.h"

namespace sluice {

ShardedRows::ShardedRows(DataParallel* dp, std::vector<uint64_t> bounds, uint64_t width)
    : dp_(dp), bounds_(std::move(bounds)), width_(width) {}

int ShardedRows::OwnerOf(uint64_t row) const {
  const auto it = std::upper_bound(bounds_.begin(), bounds_.end(), row);
  return static_cast<int>(it - bounds_.begin()) - 1;
}

Status ShardedRows::MakePlan(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
                             std::span<const uint64_t> use_begin, std::span<const uint64_t> own_rows, uint64_t own,
                             bool every_row, Plan& plan) const {
  const int world = dp_->world_size(), me = dp_->rank();
  const size_t n = rows.size();
  plan.owner.resize(n);
  plan.local_of.assign(n, -1);
  int64_t k = 0;
  bool same = own_rows.size() == own;
  for (size_t u = 0; u < n; ++u) {
    plan.owner[u] = OwnerOf(rows[u]);
    if (plan.owner[u] != me) continue;
    same = same && static_cast<size_t>(k) < own_rows.size() && own_rows[static_cast<size_t>(k)] == rows[u];
    plan.local_of[u] = k++;
  }
  if (static_cast<uint64_t>(k) != own || !same) {
    return FailedPrecondition("data parallel: step " + std::to_string(step) + " has " + std::to_string(k) +
                              " rows of this rank but " + std::to_string(own) +
                              " were loaded, or not the same rows in the same order (a bug)");
  }
  // Which rows each rank's shards use: every one (evaluation), or their uses'.
  plan.needs.resize(static_cast<size_t>(world));  // reused: no allocation per step once grown
  for (std::vector<char>& need : plan.needs) need.assign(n, every_row);
  if (!every_row) {
    for (int q = 0; q < world; ++q) {
      for (uint64_t i = use_begin[static_cast<size_t>(q)]; i < use_begin[static_cast<size_t>(q) + 1]; ++i) {
        plan.needs[static_cast<size_t>(q)][static_cast<size_t>(uses[i])] = 1;
      }
    }
  }
  return Status::Ok();
}

void ShardedRows::Pack(const Plan& plan, std::span<float* const> own, std::span<const char> ahead, char which,
                       std::vector<float>& send, std::vector<uint64_t>& send_counts,
                       std::vector<uint64_t>& recv_counts) const {
  const int world = dp_->world_size(), me = dp_->rank();
  const uint64_t w = width_;
  const size_t n = plan.owner.size();
  const auto travels = [&](size_t u) { return ahead.empty() || ahead[u] == which; };
  send.clear();
  send_counts.assign(static_cast<size_t>(world), 0);
  recv_counts.assign(static_cast<size_t>(world), 0);
  for (int q = 0; q < world; ++q) {
    const std::vector<char>& need = plan.needs[static_cast<size_t>(q)];
    for (size_t u = 0; u < n; ++u) {
      if (!need[u] || plan.owner[u] != me || !travels(u)) continue;
      const float* row = own[static_cast<size_t>(plan.local_of[u])];
      send.insert(send.end(), row, row + w);
      send_counts[static_cast<size_t>(q)] += w;
    }
  }
  const std::vector<char>& need = plan.needs[static_cast<size_t>(me)];
  for (size_t u = 0; u < n; ++u) {
    if (need[u] && travels(u)) recv_counts[static_cast<size_t>(plan.owner[u])] += w;
  }
}

Status ShardedRows::Fetch(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
                          std::span<const uint64_t> use_begin, std::span<float* const> own,
                          std::span<const uint64_t> own_rows, RowsTo to) {
  const bool every_row = to == RowsTo::kEveryRank;
  const int world = dp_->world_size(), me = dp_->rank();
  const uint64_t w = width_;
  const size_t n = rows.size();
  SLUICE_RETURN_IF_ERROR(MakePlan(step, rows, uses, use_begin, own_rows, own.size(), every_row, plan_));
  own_rows_ = own.size();
  uses_.assign(uses.begin(), uses.end());
  use_begin_.assign(use_begin.begin(), use_begin.end());
  use_grads_.clear();
  // The rows that travelled ahead (Prefetch), if this step's did.
  std::vector<float> early;
  std::span<const char> ahead;
  if (ahead_pending_) {
    if (every_row || ahead_step_ != step || !std::equal(rows.begin(), rows.end(), ahead_rows_.begin(), ahead_rows_.end())) {
      return FailedPrecondition("data parallel: step " + std::to_string(step) + " fetched, but step " +
                                std::to_string(ahead_step_) + "'s rows were sent ahead (a bug)");
    }
    ahead_pending_ = false;
    SLUICE_ASSIGN_OR_RETURN(early, dp_->FinishAllToAll(ahead_op_));
    ahead = ahead_;
  }
  std::vector<float> send;
  std::vector<uint64_t> send_counts, recv_counts;
  Pack(plan_, own, ahead, /*which=*/0, send, send_counts, recv_counts);
  SLUICE_ASSIGN_OR_RETURN(const std::vector<float> got, dp_->AllToAll(send, send_counts, recv_counts, "the step's rows"));
  // Where each owner's rows start in `got` and in `early`.
  std::vector<uint64_t> at(static_cast<size_t>(world), 0), at_early(static_cast<size_t>(world), 0);
  std::vector<uint64_t> early_counts(static_cast<size_t>(world), 0);
  const std::vector<char>& need = plan_.needs[static_cast<size_t>(me)];
  if (!ahead.empty()) {
    for (size_t u = 0; u < n; ++u) {
      if (need[u] && ahead[u]) early_counts[static_cast<size_t>(plan_.owner[u])] += w;
    }
  }
  for (int r = 1; r < world; ++r) {
    at[static_cast<size_t>(r)] = at[static_cast<size_t>(r) - 1] + recv_counts[static_cast<size_t>(r) - 1];
    at_early[static_cast<size_t>(r)] = at_early[static_cast<size_t>(r) - 1] + early_counts[static_cast<size_t>(r) - 1];
  }
  // Only the rows this rank's uses read take room (an evaluation round's are one step's of N).
  values_.resize(static_cast<size_t>(std::count(need.begin(), need.end(), char{1})) * w);
  ptrs_.assign(n, nullptr);
  needed_ = 0;
  uint64_t remote = 0, remote_early = 0;
  for (size_t u = 0; u < n; ++u) {
    if (!need[u]) continue;
    const bool is_early = !ahead.empty() && ahead[u];
    uint64_t& from = (is_early ? at_early : at)[static_cast<size_t>(plan_.owner[u])];
    float* slot = values_.data() + needed_ * w;
    std::copy_n((is_early ? early : got).data() + from, w, slot);
    from += w;
    ptrs_[u] = slot;
    ++needed_;
    if (plan_.owner[u] != me) ++remote, remote_early += is_early;
  }
  if (to == RowsTo::kTrainingUses) {
    dp_->CountRowsNeeded(needed_, uses_.size());
    dp_->CountRemoteRows(remote, remote_early);
  }
  if (world > 1) rows_.assign(rows.begin(), rows.end());
  return Status::Ok();
}

Status ShardedRows::Prefetch(uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
                             std::span<const uint64_t> use_begin, std::span<float* const> own,
                             std::span<const uint64_t> own_rows) {
  if (dp_->world_size() == 1) return Status::Ok();
  if (ahead_pending_) return FailedPrecondition("data parallel: a second step prefetched before the first was fetched (a bug)");
  Plan plan;
  SLUICE_RETURN_IF_ERROR(MakePlan(step, rows, uses, use_begin, own_rows, own.size(), /*every_row=*/false, plan));
  // A row the step in hand uses is updated after it: it travels at its own step.
  ahead_.resize(rows.size());
  // (A bit per table row marks the step in hand's, set and cleared here: O(rows of both steps).)
  used_.resize((bounds_.back() + 63) / 64);
  const auto bit = [](uint64_t row) { return uint64_t{1} << (row % 64); };
  for (uint64_t row : rows_) used_[row / 64] |= bit(row);
  for (size_t u = 0; u < rows.size(); ++u) ahead_[u] = (used_[rows[u] / 64] & bit(rows[u])) == 0;
  for (uint64_t row : rows_) used_[row / 64] &= ~bit(row);
  std::vector<float> send;
  std::vector<uint64_t> send_counts, recv_counts;
  Pack(plan, own, ahead_, /*which=*/1, send, send_counts, recv_counts);
  SLUICE_ASSIGN_OR_RETURN(ahead_op_, dp_->StartAllToAll(send, send_counts, recv_counts, "the next step's rows"));
  ahead_pending_ = true;
  ahead_step_ = step;
  ahead_rows_.assign(rows.begin(), rows.end());
  return Status::Ok();
}

Status ShardedRows::DropPrefetch() {
  if (!ahead_pending_) return Status::Ok();
  ahead_pending_ = false;
  return dp_->FinishAllToAll(ahead_op_).status();
}

uint64_t ShardedRows::StepBytes(uint64_t uses, uint64_t my_uses, uint64_t width, int world, uint64_t total_rows) {
  const uint64_t rows = uses, n = static_cast<uint64_t>(world);
  const uint64_t grads = (2 * my_uses + uses + rows) * width * 4;  // gathered, sent, received; sums
  const uint64_t fetched = world > 1 ? 2 * rows * width * 4 : 0;
  // Per use: its distinct row, its row in the sums (int64 each); per distinct row: its number
  // now and ahead, owner, place among the own rows, pointer, travels-ahead flag and who needs it.
  const uint64_t book = uses * 16 + rows * (8 + 8 + 4 + 8 + 8 + 1 + n) + total_rows / 8;
  return grads + fetched + book;
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
      if (plan_.owner[static_cast<size_t>(uses_[i])] != r) continue;
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
      if (plan_.owner[u] != me) continue;
      use_rows.push_back(plan_.local_of[u]);
      recv_counts[static_cast<size_t>(q)] += w;
    }
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<float> grads, dp_->AllToAll(send, send_counts, recv_counts, "the rows' gradients"));
  const auto d = static_cast<int64_t>(w);
  std::vector<torch::Tensor> pieces;
  if (!use_rows.empty()) pieces.push_back(torch::from_blob(grads.data(), {static_cast<int64_t>(use_rows.size()), d}));
  return SumRowGrads({use_rows}, pieces, static_cast<int64_t>(own_rows_), d);
}

Result<std::vector<float>> ShardedRows::Trade(const std::function<std::vector<uint64_t>(int)>& wanted,
                                              const std::function<const float*(uint64_t)>& own_row,
                                              const char* what) {
  const int world = dp_->world_size(), me = dp_->rank();
  const uint64_t w = width_;
  std::vector<float> send;
  std::vector<uint64_t> send_counts(static_cast<size_t>(world), 0), recv_counts(static_cast<size_t>(world), 0);
  std::vector<uint64_t> mine;
  for (int q = 0; q < world; ++q) {
    std::vector<uint64_t> rows = wanted(q);
    if (q == me) {
      for (const uint64_t row : rows) {
        const int owner = OwnerOf(row);
        if (owner != me) recv_counts[static_cast<size_t>(owner)] += w;
      }
      mine = std::move(rows);
      continue;
    }
    // This rank's rows among them: a range of the sorted list.
    const auto lo = std::lower_bound(rows.begin(), rows.end(), bounds_[static_cast<size_t>(me)]);
    const auto hi = std::lower_bound(lo, rows.end(), bounds_[static_cast<size_t>(me) + 1]);
    for (auto it = lo; it != hi; ++it) {
      const float* x = own_row(*it);
      send.insert(send.end(), x, x + w);
    }
    send_counts[static_cast<size_t>(q)] = static_cast<uint64_t>(hi - lo) * w;
  }
  SLUICE_ASSIGN_OR_RETURN(const std::vector<float> got, dp_->AllToAll(send, send_counts, recv_counts, what));
  send = {};
  std::vector<uint64_t> at(static_cast<size_t>(world), 0);  // where each owner's rows start in `got`
  for (int r = 1; r < world; ++r) at[static_cast<size_t>(r)] = at[static_cast<size_t>(r) - 1] + recv_counts[static_cast<size_t>(r) - 1];
  std::vector<float> out(mine.size() * w);
  for (size_t i = 0; i < mine.size(); ++i) {
    const int owner = OwnerOf(mine[i]);
    const float* x = owner == me ? own_row(mine[i]) : got.data() + at[static_cast<size_t>(owner)];
    if (owner != me) at[static_cast<size_t>(owner)] += w;
    std::copy_n(x, w, out.data() + i * w);
  }
  return out;
}

void ShardedRows::AddUseGrads(const std::vector<torch::Tensor>& pieces, float share) {
  for (const torch::Tensor& piece : pieces) {
    const torch::Tensor x = (piece * share).contiguous();
    use_grads_.insert(use_grads_.end(), x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  }
}

Status EvalRound::Add(int q, uint64_t step, std::span<const uint64_t> rows, std::span<const int64_t> uses,
                      std::span<float* const> own, std::span<const uint64_t> own_rows) {
  const int me = sharded_->dp()->rank();
  const uint64_t w = sharded_->width();
  use_begin_.resize(static_cast<size_t>(sharded_->dp()->world_size()) + 1, 0);
  for (; next_rank_ <= q; ++next_rank_) use_begin_[static_cast<size_t>(next_rank_)] = uses_.size();
  place_.resize(rows.size());
  size_t k = 0;  // this rank's rows of the step, in their order among `rows`
  for (size_t u = 0; u < rows.size(); ++u) {
    const bool mine = sharded_->OwnerOf(rows[u]) == me;
    if (mine && (k >= own_rows.size() || own_rows[k] != rows[u])) {
      return FailedPrecondition("evaluation step " + std::to_string(step) + ": row " + std::to_string(rows[u]) +
                                " is not the row loaded in its place (a bug)");
    }
    const auto [it, fresh] = index_.emplace(rows[u], static_cast<int64_t>(rows_.size()));
    if (fresh) {
      rows_.push_back(rows[u]);
      if (mine) own_rows_.push_back(rows[u]), own_values_.insert(own_values_.end(), own[k], own[k] + w);
    }
    k += mine;
    place_[u] = it->second;
  }
  if (k != own_rows.size()) {
    return FailedPrecondition("evaluation step " + std::to_string(step) + " loaded " + std::to_string(own_rows.size()) +
                              " rows of this rank but uses " + std::to_string(k) + " (a bug)");
  }
  for (const int64_t u : uses) uses_.push_back(place_[static_cast<size_t>(u)]);
  return Status::Ok();
}

Status EvalRound::Fetch(uint64_t round) {
  const int world = sharded_->dp()->world_size(), me = sharded_->dp()->rank();
  use_begin_.resize(static_cast<size_t>(world) + 1, 0);
  for (; next_rank_ <= world; ++next_rank_) use_begin_[static_cast<size_t>(next_rank_)] = uses_.size();
  const uint64_t w = sharded_->width();
  std::vector<float*> own(own_rows_.size());
  for (size_t i = 0; i < own.size(); ++i) own[i] = own_values_.data() + i * w;
  SLUICE_RETURN_IF_ERROR(sharded_->Fetch(round, rows_, uses_, use_begin_, own, own_rows_, RowsTo::kEvaluationUses));
  const uint64_t lo = use_begin_[static_cast<size_t>(me)], hi = use_begin_[static_cast<size_t>(me) + 1];
  my_uses_.assign(uses_.begin() + static_cast<int64_t>(lo), uses_.begin() + static_cast<int64_t>(hi));
  rows_.clear(), own_rows_.clear(), uses_.clear(), own_values_.clear(), index_.clear();
  next_rank_ = 0;
  return Status::Ok();
}

}  // namespace sluice
