#include "train/lp/lp_step.h"

#include "common/clock.h"
#include "train/data_parallel.h"
#include "train/model_step.h"
#include "train/sharded_rows.h"

namespace sluice {

LpStepper::LpStepper(const LpConfig& config, const NodeTableLayout& layout, uint64_t num_relations,
                     std::shared_ptr<Model> user, torch::Device device)
    : cfg_(config), layout_(layout), model_(std::move(user)) {
  if (model_ == nullptr) {
    auto builtin = std::make_shared<LinkModel>(config, num_relations, layout.num_nodes());
    builtin_ = builtin.get();
    model_ = std::move(builtin);
    if (config.model.encoder == LpEncoder::kGraphSage) {
      encoder_ = std::make_shared<SageLinkEncoder>(config.model.dim, config.train.seed);
      // A step's seeds (queries' heads and tails, the negatives), their neighbours' rows (at
      // most every node) and the sampled uses: the rows gathered and their gradients, the
      // neighbours' gather, and the seeds' sums, means, encodings and their gradients.
      const uint64_t n = layout.num_nodes(), d = static_cast<uint64_t>(config.model.dim);
      const uint64_t queries = static_cast<uint64_t>(config.train.batch) * (config.model.reciprocal ? 2 : 1);
      const uint64_t negatives = config.train.scoring == Scoring::kAll
                                     ? n
                                     : static_cast<uint64_t>(config.train.chunks) *
                                           static_cast<uint64_t>(config.train.negatives) *
                                           (config.model.reciprocal ? 1 : 2);
      const uint64_t seeds = std::min(n, 2 * queries + negatives);
      const uint64_t fanout = static_cast<uint64_t>(config.model.fanout);
      const uint64_t rows = std::min(n, seeds * (1 + fanout));
      encoder_->set_step_bytes(rows * d * 4 * 2 + seeds * fanout * d * 4 * 2 + seeds * d * 4 * 6);
      model_ = std::make_shared<EncodedModel>(encoder_, std::move(model_));
    }
  }
  model_->to(device);
  std::vector<torch::Tensor> params = model_->parameters();
  if (cfg_.train.relation_optimizer == DenseOptimizer::kAdam) {
    rel_opt_ = std::make_unique<torch::optim::Adam>(params,
                                                    torch::optim::AdamOptions(cfg_.train.relation_lr));
  } else {
    rel_opt_ = std::make_unique<torch::optim::Adagrad>(
        params, torch::optim::AdagradOptions(cfg_.train.relation_lr));
  }
}

void LpStepper::UseDevice(DeviceRows* rows) {
  device_rows_ = rows;
  if (device_rows_ != nullptr) device_rows_->set_lr(RowLr());
}

void LpStepper::SetLrScale(double scale) {
  lr_scale_ = scale;
  SetOptimizerLr(*rel_opt_, cfg_.train.relation_lr * scale);
  if (device_rows_ != nullptr) device_rows_->set_lr(RowLr());
}

float* LpStepper::RowAddress(int64_t v, const std::vector<std::byte*>& base) const {
  const BlockId blk = layout_.block_of(v);
  return reinterpret_cast<float*>(base[blk] + (static_cast<uint64_t>(v) - layout_.bounds[blk]) * layout_.row_bytes);
}

std::vector<float*> LpStepper::RowAddresses(const LinkBatch& b,
                                            const std::vector<std::byte*>& base) const {
  std::vector<float*> rows(b.unique.size());
  for (size_t i = 0; i < b.unique.size(); ++i) rows[i] = RowAddress(b.unique[i], base);
  return rows;
}

namespace {

torch::Tensor IdsOf(std::vector<int64_t>& v) {
  return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kInt64);
}

}  // namespace

// 1vsAll: each query's true candidate's column among the negatives (ids "tail_col", "head_col").
void LpStepper::AddColumns(LinkBatch& b, ModelInput& in) {
  if (!b.tail_col.empty()) in.ids["tail_col"] = IdsOf(b.tail_col);
  if (!b.head_col.empty()) in.ids["head_col"] = IdsOf(b.head_col);
}

namespace {

UseParts ShardParts(const LinkBatch& b, const LinkShard& s) {
  const std::span<const int64_t> head(b.head), tail(b.tail), tneg(b.tail_neg), hneg(b.head_neg);
  UseParts parts = {head.subspan(s.query_begin, s.queries), tail.subspan(s.query_begin, s.queries),
                    tneg.subspan(s.tail_neg_begin, s.tail_neg_end - s.tail_neg_begin)};
  if (s.head_neg_end > s.head_neg_begin) parts.push_back(hneg.subspan(s.head_neg_begin, s.head_neg_end - s.head_neg_begin));
  return parts;
}

}  // namespace

Status LpStepper::ShardedUses(const LinkBatch& b, const std::vector<std::byte*>* own, ShardedStep& out) const {
  const int world = dp_->world_size(), me = dp_->rank(), shards = dp_->shards();
  out.rows.resize(b.unique.size());  // table rows (node v is row layout.row_of(v))
  out.own.clear(), out.own_rows.clear();
  for (size_t u = 0; u < b.unique.size(); ++u) {
    out.rows[u] = layout_.row_of(b.unique[u]);
    if (sharded_->OwnerOf(out.rows[u]) != me) continue;
    out.own_rows.push_back(out.rows[u]);
    if (own == nullptr) {
      out.own.push_back(reinterpret_cast<float*>(held_base_ + (out.rows[u] - held_first_) * layout_.row_bytes));
    }
  }
  if (own != nullptr) {
    if (out.own_rows.size() != own->size()) {
      return FailedPrecondition("data parallel: the row cache holds " + std::to_string(own->size()) +
                                " of this rank's rows for the step, which uses " + std::to_string(out.own_rows.size()) +
                                " (a bug)");
    }
    for (std::byte* row : *own) out.own.push_back(reinterpret_cast<float*>(row));
  }
  std::vector<uint64_t> shard_begin;  // shard v's first use
  out.uses.clear();
  for (const LinkShard& s : b.shards) {
    shard_begin.push_back(out.uses.size());
    for (std::span<const int64_t> part : ShardParts(b, s)) out.uses.insert(out.uses.end(), part.begin(), part.end());
  }
  shard_begin.push_back(out.uses.size());
  out.use_begin.resize(static_cast<size_t>(world) + 1);
  for (int q = 0; q <= world; ++q) out.use_begin[static_cast<size_t>(q)] = shard_begin[static_cast<size_t>(shards * q / world)];
  return Status::Ok();
}

bool LpStepper::sends_rows_ahead(RowPrefetch setting) const { return SendsRowsAhead(dp_, setting); }

Status LpStepper::DropPrefetch() { return sharded_ != nullptr ? sharded_->DropPrefetch() : Status::Ok(); }

// Every rank samples every shard (so it knows every use of its rows) and computes its own: each
// shard's loss and gradients through the model seam, its use gradients weighed by its share of
// the step's edges; then the exchange (train/data_parallel.h, train/sharded_rows.h).
Result<double> LpStepper::TrainSharded(LinkBatch& b, uint64_t epoch, uint64_t step) {
  StepTimer timer(*dp_);
  const int64_t d = cfg_.model.dim;
  const int shards = dp_->shards();
  if (b.shards.size() != static_cast<size_t>(shards)) {
    return FailedPrecondition("data parallel: step " + std::to_string(step) + " was sampled in " +
                              std::to_string(b.shards.size()) + " shards, not " + std::to_string(shards) + " (a bug)");
  }
  SLUICE_RETURN_IF_ERROR(ShardedUses(b, step_own_, cur_));
  SLUICE_RETURN_IF_ERROR(sharded_->Fetch(step, cur_.rows, cur_.uses, cur_.use_begin, cur_.own, cur_.own_rows,
                                         RowsTo::kTrainingUses));
  if (next_batch_ != nullptr) {  // its rows this step does not use travel while it computes
    if (next_batch_->shards.size() != static_cast<size_t>(shards)) {
      return FailedPrecondition("data parallel: step " + std::to_string(next_step_) + " was sampled in " +
                                std::to_string(next_batch_->shards.size()) + " shards, not " +
                                std::to_string(shards) + " (a bug)");
    }
    SLUICE_RETURN_IF_ERROR(ShardedUses(*next_batch_, next_own_, next_));
    SLUICE_RETURN_IF_ERROR(sharded_->Prefetch(next_step_, next_.rows, next_.uses, next_.use_begin, next_.own,
                                              next_.own_rows));
    next_batch_ = nullptr;
  }
  timer.Lap(times_.gather_s);
  const std::span<float* const> rows = sharded_->ptrs();
  ShardGradients grads(*dp_, model_->parameters());
  const bool fused = builtin_ != nullptr && builtin_->fused();
  for (int v = dp_->first_shard(); v < dp_->end_shard(); ++v) {
    const LinkShard& s = b.shards[static_cast<size_t>(v)];
    if (s.queries == 0) {  // a step with fewer edges than shards
      grads.AddEmpty();
      continue;
    }
    const UseParts parts = ShardParts(b, s);
    ModelInput in;
    in.tables.push_back(GatherUses(rows, parts, d, /*requires_grad=*/!fused));
    in.ids["relation"] = torch::from_blob(b.rel.data() + s.query_begin, {static_cast<int64_t>(s.queries)}, torch::kInt64);
    in.sizes = {{"queries", static_cast<int64_t>(s.queries)},
                {"chunks", s.chunks},
                {"per_chunk", s.per_chunk},
                {"head_negatives", s.head_neg_end > s.head_neg_begin ? 1 : 0}};
    in.key = {cfg_.train.seed, epoch, step * static_cast<uint64_t>(shards) + static_cast<uint64_t>(v)};
    rel_opt_->zero_grad();
    SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*model_, in, fused));
    grads.Add(g.loss, s.edges, b.edges);
    const float share = static_cast<float>(s.edges) / static_cast<float>(b.edges);
    std::vector<float>& out = sharded_->use_grads();
    for (const torch::Tensor& piece : g.use_grads[0]) {  // this shard's uses, in use order
      const torch::Tensor x = (piece * share).contiguous();
      out.insert(out.end(), x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    }
  }
  SLUICE_ASSIGN_OR_RETURN(const double loss, grads.Finish());
  rel_opt_->step();
  timer.Lap(times_.compute_s);
  SLUICE_ASSIGN_OR_RETURN(const torch::Tensor sums, sharded_->SumOwnGrads());
  ApplyRowOptimizer(RowOptimizer::kAdagrad, cur_.own, sums, d, RowLr());
  timer.Lap(times_.update_s);
  return loss / static_cast<double>(b.edges);
}

Result<double> LpStepper::Train(LinkBatch& b, const std::vector<std::byte*>& block_base,
                                uint64_t epoch, uint64_t step) {
  if (dp_ != nullptr) return TrainSharded(b, epoch, step);
  auto t0 = SteadyClock::now();
  const int64_t d = cfg_.model.dim;
  const std::vector<float*> rows = RowAddresses(b, block_base);
  UseParts parts = {b.head, b.tail, b.tail_neg};
  if (!b.head_neg.empty()) parts.push_back(b.head_neg);
  const bool fused = builtin_ != nullptr && builtin_->fused();
  ModelInput in;
  if (encoder_ != nullptr) {  // every row once; the encoder gathers the decoder's uses
    uses_.clear();
    for (std::span<const int64_t> part : parts) uses_.insert(uses_.end(), part.begin(), part.end());
    all_rows_.resize(b.unique.size());
    for (size_t i = 0; i < all_rows_.size(); ++i) all_rows_[i] = static_cast<int64_t>(i);
    parts = {all_rows_};
    in.ids["uses"] = IdsOf(uses_);
    in.ids["nbr_offsets"] = IdsOf(b.nbr_offsets);
    in.ids["nbr"] = IdsOf(b.nbr);
    in.sizes["seeds"] = static_cast<int64_t>(b.seeds);
  }
  // Through an encoder the rows' gradients come from autograd, whatever computes the loss.
  in.tables.push_back(GatherUses(rows, parts, d, /*requires_grad=*/!fused || encoder_ != nullptr));
  in.ids["relation"] = torch::from_blob(b.rel.data(), {static_cast<int64_t>(b.rel.size())}, torch::kInt64);
  AddColumns(b, in);
  in.sizes["queries"] = static_cast<int64_t>(b.queries);
  in.sizes["chunks"] = b.chunks;
  in.sizes["per_chunk"] = b.per_chunk;
  in.sizes["head_negatives"] = b.head_neg.empty() ? 0 : 1;
  in.key = {cfg_.train.seed, epoch, step};
  auto t1 = SteadyClock::now();
  times_.gather_s += std::chrono::duration<double>(t1 - t0).count();
  // The fused loss sets the relations' gradient; an encoder's weights accumulate theirs.
  if (!fused || encoder_ != nullptr) rel_opt_->zero_grad();
  SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*model_, in, fused));
  const torch::Tensor sums = SumRowGrads(parts, g.use_grads[0], static_cast<int64_t>(rows.size()), d);
  auto t2 = SteadyClock::now();
  times_.compute_s += std::chrono::duration<double>(t2 - t1).count();
  // Row-wise Adagrad into the rows (state in the second half of the row).
  ApplyRowOptimizer(RowOptimizer::kAdagrad, rows, sums, d, RowLr());
  rel_opt_->step();
  times_.update_s += SecondsSince(t2);
  return g.loss;
}

Status LpStepper::Stage(LinkBatch& b, const std::vector<std::byte*>& block_base) {
  const auto start = SteadyClock::now();
  const std::vector<float*> rows = RowAddresses(b, block_base);
  keys_.resize(b.unique.size());
  for (size_t i = 0; i < b.unique.size(); ++i) keys_[i] = RowKey{static_cast<uint64_t>(b.unique[i]), 0};
  UseParts parts = {b.head, b.tail, b.tail_neg};
  if (!b.head_neg.empty()) parts.push_back(b.head_neg);
  const torch::Tensor rel = torch::from_blob(b.rel.data(), {static_cast<int64_t>(b.rel.size())}, torch::kInt64);
  // Extras: the relations, then 1vsAll's columns (tail, head) when the step has them.
  std::vector<torch::Tensor> extras = {rel};
  if (!b.tail_col.empty()) extras.push_back(IdsOf(b.tail_col));
  if (!b.head_col.empty()) extras.push_back(IdsOf(b.head_col));
  SLUICE_RETURN_IF_ERROR(device_rows_->Stage(keys_, rows, parts, extras));
  times_.gather_s += SecondsSince(start);
  return Status::Ok();
}

Status LpStepper::Launch(LinkBatch& b, uint64_t epoch, uint64_t step) {
  const auto start = SteadyClock::now();
  DeviceStep staged = device_rows_->Begin(/*training=*/true);
  ModelInput in;
  in.tables.push_back(std::move(staged.table));
  in.ids["relation"] = staged.extras[0];
  if (!b.tail_col.empty()) in.ids["tail_col"] = staged.extras.at(1);
  if (!b.head_col.empty()) in.ids["head_col"] = staged.extras.at(2);
  in.sizes = {{"queries", static_cast<int64_t>(b.queries)},
              {"chunks", b.chunks},
              {"per_chunk", b.per_chunk},
              {"head_negatives", b.head_neg.empty() ? 0 : 1}};
  in.key = {cfg_.train.seed, epoch, step};
  rel_opt_->zero_grad();
  SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*model_, in, /*allow_fused=*/false, /*defer_loss=*/true));
  rel_opt_->step();
  device_rows_->Update(g.use_grads.at(0));
  loss_ = g.loss_value;
  times_.compute_s += SecondsSince(start);
  return Status::Ok();
}

Result<double> LpStepper::Finish() {
  const auto start = SteadyClock::now();
  SLUICE_RETURN_IF_ERROR(device_rows_->Finish());
  const double loss = loss_.item<double>();
  times_.update_s += SecondsSince(start);
  return loss;
}

}  // namespace sluice
