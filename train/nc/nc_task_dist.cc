// Node classification in virtual shards, in one process or across several (docs/distributed.md):
// features are each rank's own copy of the dataset and only the dense gradients are exchanged;
// learnable node embeddings are sharded by row range, each rank keeping its rows in its own
// cache (see nc_task_impl.h).
#include <filesystem>
#include <numeric>
#include <unordered_map>

#include "common/clock.h"
#include "train/model_step.h"
#include "train/nc/nc_task_impl.h"

namespace sluice {

Status NcTask::SetUpDataParallel() {
  SLUICE_ASSIGN_OR_RETURN(const bool sharded, TrainsInShards(purpose_ == Purpose::kTrain, cfg_.train.virtual_shards,
                                                              group_, cfg_.train.batch, "training nodes", cfg_.device));
  if (!sharded) return Status::Ok();
  dp_ = std::make_unique<DataParallel>(group_, cfg_.train.virtual_shards);
  dp_->set_dense_floats(DenseFloats(net_->parameters()));
  if (!embeddings_) {
    ProbeShardUnits();
    return Status::Ok();
  }
  const int world = dp_->world_size();
  std::vector<uint64_t> bounds;
  for (int r = 0; r <= world; ++r) bounds.push_back(DataParallel::RowRange(r, world, num_nodes_).first);
  bounds.back() = num_nodes_;
  std::tie(own_begin_, own_end_) = dp_->MyRows(num_nodes_);
  sharded_ = std::make_unique<ShardedRows>(dp_.get(), std::move(bounds), static_cast<uint64_t>(feature_dim_));
  ProbeWholeSteps();
  return Status::Ok();
}

void NcTask::SampleWholeStep(const Pass& pass, uint64_t step, Batch& b) {
  const std::span<const int64_t> seeds = pass.Seeds(step);
  const auto shards = static_cast<size_t>(pass.shards);
  b.parts.resize(shards);
  b.step_rows.clear(), b.uses.clear();
  b.part_uses.assign(shards + 1, 0);
  std::unordered_map<int64_t, int64_t> index;
  index.reserve(b.parts.empty() ? 0 : seeds.size() * 8);
  for (size_t v = 0; v < shards; ++v) {
    const auto [lo, hi] = DataParallel::ShardSamples(static_cast<int>(v), pass.shards, seeds.size());
    SampledSubgraph& sub = b.parts[v];
    sub = SampledSubgraph{};
    if (lo < hi) {  // keyed as each rank's shards are: step x shards + shard
      sub = pass.sampler->Sample(seeds.subspan(lo, hi - lo), {pass.seed, pass.epoch, step * shards + v}, *pass.options);
      for (int64_t node : sub.nodes()) {
        const auto [it, fresh] = index.try_emplace(node, static_cast<int64_t>(b.step_rows.size()));
        if (fresh) b.step_rows.push_back(static_cast<uint64_t>(node));
        b.uses.push_back(it->second);
      }
      // Compute reads the seeds and the nodes: the layers between would only take ring memory.
      for (size_t l = 1; l + 1 < sub.layers.size(); ++l) std::vector<int64_t>().swap(sub.layers[l]);
    }
    b.part_uses[v + 1] = b.uses.size();
  }
  b.rows.samples = static_cast<uint32_t>(seeds.size());
  for (uint64_t row : b.step_rows) {
    if (row >= pass.own_begin && row < pass.own_end) b.rows.keys.push_back(RowKey{row, 0});
  }
  b.rows.keys_distinct = true;
}

// Epoch 0's first steps sampled whole: this rank's rows a step and over consecutive steps (the
// cache's plan), and a ring slot's words.
void NcTask::ProbeWholeSteps() {
  std::vector<int64_t> nodes;
  Pass pass = TrainPass(0, 0, nodes);
  pass.whole_steps = true;
  pass.shards = dp_->shards();
  pass.own_begin = own_begin_, pass.own_end = own_end_;
  std::vector<std::vector<int64_t>> own;
  probe_nodes_ = probe_slot_words_ = 0;
  for (uint64_t t = 0; t < kProbeSteps && t < pass.steps(); ++t) {
    Batch b;
    SampleWholeStep(pass, t, b);
    uint64_t words = 3 * b.uses.size() + b.step_rows.size();
    for (const SampledSubgraph& s : b.parts) words += SlotWords(s);
    probe_nodes_ = std::max<uint64_t>(probe_nodes_, b.rows.keys.size());
    probe_slot_words_ = std::max(probe_slot_words_, words);
    auto& rows = own.emplace_back();
    for (const RowKey& k : b.rows.keys) rows.push_back(static_cast<int64_t>(k.id));
  }
  ProbeUnions(own);
}

// Features in virtual shards: the pipeline's units are this rank's shards, each a sample of a
// shard's seeds, so the plans (a unit's rows, the units in flight, the spill's packs) are
// measured on epoch 0's first units rather than on whole steps (V / N times theirs).
void NcTask::ProbeShardUnits() {
  std::vector<int64_t> nodes;
  Pass pass = TrainPass(0, 0, nodes);
  pass.shards = dp_->shards();
  const std::vector<std::pair<uint64_t, int>> units = ShardUnits(pass);
  pass.units = &units;
  std::vector<std::vector<int64_t>> probed;
  probe_nodes_ = probe_slot_words_ = 0;
  // As many seeds as the whole steps' probe: a shard's few seeds vary more from unit to unit.
  const uint64_t probe_units = kProbeSteps * static_cast<uint64_t>(dp_->end_shard() - dp_->first_shard());
  for (uint64_t t = 0; t < probe_units && t < units.size(); ++t) {
    SampledSubgraph s = sampler_->Sample(pass.UnitSeeds(t), pass.UnitKey(t), train_options_);
    probe_nodes_ = std::max<uint64_t>(probe_nodes_, s.nodes().size());
    probe_slot_words_ = std::max(probe_slot_words_, SlotWords(s));
    probed.push_back(std::move(s.layers.back()));
  }
  ProbeUnions(probed);
}

std::vector<std::pair<uint64_t, int>> NcTask::ShardUnits(const Pass& pass) const {
  std::vector<std::pair<uint64_t, int>> units;
  for (uint64_t s = pass.first_step; s < pass.steps(); ++s) {
    const uint64_t n = pass.Seeds(s).size();
    for (int v = dp_->first_shard(); v < dp_->end_shard(); ++v) {
      const auto [lo, hi] = DataParallel::ShardSamples(v, dp_->shards(), n);
      if (lo < hi) units.emplace_back(s, v);
    }
  }
  return units;
}

Result<double> NcTask::TrainShardedStep(Pipeline& p, const Pass& pass, uint64_t step, uint64_t& unit) {
  const uint64_t n = pass.Seeds(step).size();
  const int shards = dp_->shards();
  ShardGradients grads(*dp_, net_->parameters());
  net_->train();
  for (int v = dp_->first_shard(); v < dp_->end_shard(); ++v) {
    const auto [lo, hi] = DataParallel::ShardSamples(v, shards, n);
    if (lo == hi) {  // a batch with fewer nodes than shards: an empty shard
      grads.AddEmpty();
      continue;
    }
    auto start = SteadyClock::now();
    Status st;
    const Batch* b = p.WaitReady(unit, st);
    if (b == nullptr) return st;
    SLUICE_ASSIGN_OR_RETURN(ModelInput in, StepInput(*b, pass, pass.UnitKey(unit).step, /*training=*/true,
                                                     FeatureSource()));
    gather_s_ += SecondsSince(start);
    start = SteadyClock::now();
    opt_->zero_grad();
    SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*net_, in, /*allow_fused=*/false));
    grads.Add(g.loss, hi - lo, n);
    compute_s_ += SecondsSince(start);
    p.Computed(unit++);
  }
  StepTimer timer(*dp_);
  SLUICE_ASSIGN_OR_RETURN(const double loss, grads.Finish());
  opt_->step();
  timer.Lap(compute_s_);
  return loss / static_cast<double>(n);
}


// Its time goes to gather_s_ (the rows) and compute_s_ without the exchanges (the summary's
// data-parallel line has those).
Result<double> NcTask::TrainRowShardedStep(const Batch& b, const Pass& pass, uint64_t step, const Batch* next) {
  StepTimer timer(*dp_);
  const int world = dp_->world_size(), shards = dp_->shards();
  // A step's uses per rank, and its rows this rank owns (their numbers in own_rows).
  const auto plan = [&](const Batch& x, std::vector<uint64_t>& use_begin, std::vector<uint64_t>& own_rows) {
    use_begin.resize(static_cast<size_t>(world) + 1);
    for (int q = 0; q <= world; ++q) use_begin[static_cast<size_t>(q)] = x.part_uses[static_cast<size_t>(shards * q / world)];
    own_rows.resize(x.rows.rows.size());
    for (size_t k = 0; k < own_rows.size(); ++k) own_rows[k] = x.rows.unique[k].id;
    return std::span<float* const>(reinterpret_cast<float* const*>(x.rows.rows.data()), x.rows.rows.size());
  };
  std::vector<uint64_t> use_begin;
  const std::span<float* const> own = plan(b, use_begin, own_rows_);
  SLUICE_RETURN_IF_ERROR(sharded_->Fetch(step, b.step_rows, b.uses, use_begin, own, own_rows_, RowsTo::kTrainingUses));
  if (next != nullptr) {
    std::vector<uint64_t> next_begin, next_own;
    const std::span<float* const> next_rows = plan(*next, next_begin, next_own);
    SLUICE_RETURN_IF_ERROR(sharded_->Prefetch(step + 1, next->step_rows, next->uses, next_begin, next_rows, next_own));
  }
  timer.Lap(gather_s_);
  const uint64_t n = b.rows.samples;
  ShardGradients grads(*dp_, net_->parameters());
  net_->train();
  const std::span<const int64_t> uses(b.uses);
  for (int v = dp_->first_shard(); v < dp_->end_shard(); ++v) {
    const auto [lo, hi] = DataParallel::ShardSamples(v, shards, n);
    if (lo == hi) {  // a batch with fewer nodes than shards: an empty shard
      grads.AddEmpty();
      continue;
    }
    const auto u = static_cast<size_t>(v);
    ModelInput in;
    in.tables.push_back(GatherUses(sharded_->ptrs(), {uses.subspan(b.part_uses[u], b.part_uses[u + 1] - b.part_uses[u])},
                                   feature_dim_, /*requires_grad=*/true));
    AddSample(b.parts[u], in);
    in.key = {pass.seed, pass.epoch, step * static_cast<uint64_t>(shards) + static_cast<uint64_t>(v)};
    in.training = true;
    opt_->zero_grad();
    SLUICE_ASSIGN_OR_RETURN(StepGrads g, RunModel(*net_, in, /*allow_fused=*/false));
    // The shard's mean loss weighs its share of the batch: gradients x nodes / n.
    grads.Add(g.loss, hi - lo, n);
    sharded_->AddUseGrads(g.use_grads[0], static_cast<float>(hi - lo) / static_cast<float>(n));
  }
  SLUICE_ASSIGN_OR_RETURN(const double loss, grads.Finish());
  opt_->step();
  SLUICE_ASSIGN_OR_RETURN(const torch::Tensor sums, sharded_->SumOwnGrads());
  ApplyRowOptimizer(cfg_.train.embedding_optimizer, own, sums, feature_dim_,
                    static_cast<float>(cfg_.train.embedding_lr * lr_scale_));
  timer.Lap(compute_s_);
  return loss / static_cast<double>(n);
}

std::vector<uint64_t> NcTask::EvalStepBounds(uint64_t steps) const {
  const int world = across_processes() ? dp_->world_size() : 1;
  std::vector<uint64_t> bounds;
  for (int r = 0; r <= world; ++r) bounds.push_back(DataParallel::RowRange(r, world, steps).first);
  bounds.back() = steps;
  return bounds;
}

void NcTask::SplitEvalPass(Pass& pass, std::vector<std::pair<uint64_t, int>>& rounds) const {
  if (!across_processes()) return;
  const std::vector<uint64_t> bounds = EvalStepBounds(pass.steps());
  const int me = dp_->rank();
  if (!pass.own_keys) {  // features, or a layer's outputs: every rank holds every row it reads
    pass.first_step = bounds[static_cast<size_t>(me)], pass.end_step = bounds[static_cast<size_t>(me) + 1];
    return;
  }
  // Round k: the k-th step of each rank's part (ranks whose part is shorter have none).
  rounds.clear();
  const int world = dp_->world_size();
  for (uint64_t k = 0;; ++k) {
    bool any = false;
    for (int q = 0; q < world; ++q) {
      if (bounds[static_cast<size_t>(q)] + k >= bounds[static_cast<size_t>(q) + 1]) continue;
      rounds.emplace_back(bounds[static_cast<size_t>(q)] + k, 0);
      any = true;
    }
    if (!any) break;
  }
  pass.units = &rounds, pass.shards = 1;  // a unit is a whole step, keyed on it
}

Status NcTask::RunEvalPass(Pipeline& p, const Pass& pass, const RowSource& source, const EvalCompute& compute) {
  eval_steps_.steps += pass.steps(), ++eval_steps_.passes;
  if (pass.units != nullptr) return RunEvalRounds(p, pass, compute);
  const uint64_t end = std::min(pass.end_step, pass.steps());
  for (uint64_t t = 0; pass.first_step + t < end; ++t) {
    const uint64_t step = pass.first_step + t;
    Status s;
    Batch* b = p.WaitReady(t, s);
    if (b != nullptr) {
      Result<ModelInput> in = StepInput(*b, pass, step, false, source);
      s = in.ok() ? compute(step, *in, b->sub) : in.status();
      ++eval_steps_.computed;
    }
    SLUICE_RETURN_IF_ERROR(s);
    p.Computed(t);
  }
  return Status::Ok();
}

// Every rank samples every step and loads its rows of it: they go to the rank that computes the
// step, one all-to-all for a round of a step of each rank's part (EvalRound). A rank computes its
// own step of the round.
Status NcTask::RunEvalRounds(Pipeline& p, const Pass& pass, const EvalCompute& compute) {
  const int world = dp_->world_size(), me = dp_->rank();
  const std::vector<uint64_t> bounds = EvalStepBounds(pass.steps());
  EvalRound round(sharded_.get());
  std::vector<uint64_t> rows;
  std::vector<int64_t> uses;
  SampledSubgraph mine;
  uint64_t t = 0, my_step = 0;
  for (uint64_t k = 0; t < pass.units->size(); ++k) {
    bool have_mine = false;
    for (int q = 0; q < world && t < pass.units->size(); ++q) {  // the round's steps, in rank order
      const uint64_t step = (*pass.units)[t].first;
      if (step < bounds[static_cast<size_t>(q)] || step >= bounds[static_cast<size_t>(q) + 1]) continue;
      Status s;
      Batch* b = p.WaitReady(t, s);
      if (b == nullptr) return s;
      const std::vector<int64_t>& nodes = b->sub.layers.back();  // distinct: each node once
      rows.assign(nodes.begin(), nodes.end());
      uses.resize(nodes.size());
      std::iota(uses.begin(), uses.end(), int64_t{0});
      own_rows_.resize(b->rows.rows.size());
      for (size_t i = 0; i < own_rows_.size(); ++i) own_rows_[i] = b->rows.unique[i].id;
      SLUICE_RETURN_IF_ERROR(round.Add(
          q, step, rows, uses, {reinterpret_cast<float* const*>(b->rows.rows.data()), b->rows.rows.size()}, own_rows_));
      if (q == me) mine = b->sub, my_step = step, have_mine = true;
      p.Computed(t++);
    }
    SLUICE_RETURN_IF_ERROR(round.Fetch(k));
    if (!have_mine) continue;
    ModelInput in;
    in.tables.push_back(GatherUses(round.ptrs(), {round.MyUses()}, feature_dim_, /*requires_grad=*/false));
    AddSample(mine, in);
    in.key = {pass.seed, pass.epoch, my_step};
    in.training = false;
    SLUICE_RETURN_IF_ERROR(compute(my_step, in, mine));
    ++eval_steps_.computed;
  }
  return Status::Ok();
}

// What the sinks keep travels in rounds of at most 1 MiB a rank, so the exchange adds a few MiB
// beside them whatever the split's size.
Status NcTask::ShareLogits(LogitSink& sink, uint64_t n, const std::function<int(uint64_t)>& owner) {
  if (!across_processes()) return Status::Ok();
  const int world = dp_->world_size(), me = dp_->rank();
  std::vector<std::vector<uint64_t>> at(static_cast<size_t>(world));  // each rank's positions
  for (uint64_t i = 0; i < n; ++i) at[static_cast<size_t>(owner(i))].push_back(i);
  std::vector<uint64_t> counts;
  for (const std::vector<uint64_t>& positions : at) counts.push_back(positions.size());
  const std::vector<uint64_t>& mine = at[static_cast<size_t>(me)];
  const uint64_t width = sink.item_floats();
  return dp_->AllGatherItems(
      counts, width, (1 << 20) / (width * 4),
      [&](uint64_t k, uint64_t items, float* out) {
        for (uint64_t j = 0; j < items; ++j) sink.Pack(mine[k + j], out + j * width);
        return Status::Ok();
      },
      [&](int q, uint64_t k, uint64_t items, const float* from) {
        for (uint64_t j = 0; j < items; ++j) sink.Unpack(at[static_cast<size_t>(q)][k + j], from + j * width);
        return Status::Ok();
      },
      "the evaluation's logits");
}

Status NcTask::ShareLayer(uint32_t width, uint64_t batch, MemoryRows* memory, RowFile* file, IoSession* io) {
  const int world = dp_->world_size(), me = dp_->rank();
  const std::vector<uint64_t> steps = EvalStepBounds((num_nodes_ + batch - 1) / batch);
  std::vector<uint64_t> begin(steps.size());  // rank q computed nodes [begin[q], begin[q + 1])
  for (size_t q = 0; q < steps.size(); ++q) begin[q] = std::min(steps[q] * batch, num_nodes_);
  std::vector<uint64_t> counts;
  for (int q = 0; q < world; ++q) counts.push_back(begin[static_cast<size_t>(q) + 1] - begin[static_cast<size_t>(q)]);
  const uint64_t row_bytes = uint64_t{width} * 4;
  std::vector<uint64_t> ids;
  // 1 MiB a collective: each rank's next rows, read from its copy and written into the others'.
  return dp_->AllGatherItems(
      counts, width, (1 << 20) / row_bytes / static_cast<uint64_t>(world),
      [&](uint64_t k, uint64_t n, float* out) -> Status {
        const uint64_t node = begin[static_cast<size_t>(me)] + k;
        if (memory == nullptr) return file->ReadRange(*io, node, n, reinterpret_cast<std::byte*>(out));
        std::memcpy(out, memory->Row(RowKey{node, 0}), n * row_bytes);
        return Status::Ok();
      },
      [&](int q, uint64_t k, uint64_t n, const float* from) -> Status {
        const uint64_t node = begin[static_cast<size_t>(q)] + k;
        if (memory != nullptr) {
          std::memcpy(memory->Row(RowKey{node, 0}), from, n * row_bytes);
          return Status::Ok();
        }
        ids.resize(n);
        std::iota(ids.begin(), ids.end(), node);
        return file->WriteRows(*io, ids, reinterpret_cast<const std::byte*>(from));
      },
      "a layer's outputs");
}

std::pair<uint64_t, uint64_t> NcTask::RowsToLoad() const {
  if (sharded_ != nullptr && across_processes()) return {own_begin_, own_end_};  // features: every row
  return {0, num_nodes_};
}

Status NcTask::LoadMemoryRows(const std::string& dir, uint64_t lo, uint64_t hi) {
  if (!CheckpointRows::Sharded(dir, "nodes.bin")) return LoadDenseRows(*memory_, dir + "/nodes.bin", num_nodes_);
  SLUICE_ASSIGN_OR_RETURN(const CheckpointRows rows, CheckpointRows::Open(dir, "nodes.bin", row_bytes_, num_nodes_));
  return rows.ReadEach(lo, hi - lo, [this](uint64_t row) { return memory_->Row(RowKey{row, 0}); });
}

Status NcTask::RestoreRows(const std::string& dir, uint64_t lo, uint64_t hi) {
  if (!CheckpointRows::Sharded(dir, "nodes.bin")) return RestoreRowFile(dir, "nodes.bin", tables_dir_);
  SLUICE_ASSIGN_OR_RETURN(const CheckpointRows rows, CheckpointRows::Open(dir, "nodes.bin", row_bytes_, num_nodes_));
  std::error_code ec;
  std::filesystem::create_directories(tables_dir_, ec);
  if (ec) return IoError("resume: create " + tables_dir_ + ": " + ec.message());
  return rows.WriteRowFile(tables_dir_ + "/nodes.bin", lo, hi - lo).WithContext("resume");  // other rows zero
}

RowRangeReader NcTask::HeldRowsReader() {
  auto io = std::make_shared<std::unique_ptr<IoSession>>();
  return [this, io](uint64_t at, uint64_t n, std::byte* out) -> Status {
    if (memory_) {
      for (uint64_t i = 0; i < n; ++i) std::memcpy(out + i * row_bytes_, memory_->Row(RowKey{at + i, 0}), row_bytes_);
      return Status::Ok();
    }
    if (*io == nullptr) {  // the first read, inside the collective: the cache's dirty rows go home first
      SLUICE_RETURN_IF_ERROR(SyncRows());
      SLUICE_ASSIGN_OR_RETURN(*io, IoSession::Create(cfg_.io));
    }
    return row_file_->ReadRange(**io, at, n, out);
  };
}

// A rank other than 0: its rows of the embedding table into the checkpoint rank 0 writes.
Status NcTask::SaveShard(const std::string& checkpoint_dir) {
  if (!embeddings_ || !across_processes()) return Status::Ok();
  return SendRowShard(*dp_, checkpoint_dir, "nodes.bin", own_begin_, own_end_ - own_begin_, row_bytes_,
                      HeldRowsReader());
}

}  // namespace sluice
