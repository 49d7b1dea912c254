#include "train/lp/lp_schedule.h"

#include <algorithm>
#include <cstring>

#include "cache/partition_order.h"
#include "common/check.h"
#include "sampler/batch_order.h"

namespace sluice {
namespace {

OrderingKind OrderingOf(const std::string& name) {
  if (name == "beta") return OrderingKind::kBeta;
  if (name == "randomized") return OrderingKind::kRandomized;
  if (name == "spread") return OrderingKind::kSpread;
  return OrderingKind::kSplit;
}

}  // namespace

Status LoadEdges(const Dataset& dataset, const std::string& split, std::vector<int64_t>& src,
                 std::vector<int64_t>& rel, std::vector<int64_t>& dst) {
  SLUICE_ASSIGN_OR_RETURN(src, dataset.ReadInt64("edges." + split + ".src"));
  SLUICE_ASSIGN_OR_RETURN(dst, dataset.ReadInt64("edges." + split + ".dst"));
  if (dataset.Has("edges." + split + ".rel")) {
    SLUICE_ASSIGN_OR_RETURN(rel, dataset.ReadInt64("edges." + split + ".rel"));
  } else {
    rel.assign(src.size(), 0);
  }
  return Status::Ok();
}

Status LpSchedule::Open(const Dataset& dataset, const LpConfig& config,
                        const NodeTableLayout& layout) {
  dataset_ = &dataset;
  cfg_ = config;
  layout_ = layout;
  const Manifest& m = dataset.manifest();
  num_train_edges_ = m.edges.count("train") ? m.edges.at("train") : 0;
  SLUICE_ASSIGN_OR_RETURN(buckets_, dataset.ReadInt64("edges.train.buckets"));
  if (cfg_.train.schedule == "shuffle") return LoadEdges(dataset, "train", src_, rel_, dst_);
  for (const char* column : {"src", "rel", "dst"}) {  // streamed per buffer state
    const std::string role = std::string("edges.train.") + column;
    if (!dataset.Has(role)) {
      edge_files_.emplace_back();
      continue;
    }
    SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset.File(role));
    if (f->dtype != DType::kInt32 && f->dtype != DType::kInt64) {
      return InvalidArgument("dataset " + cfg_.dataset + ": " + role + " is " +
                             DTypeName(f->dtype) + ", expected int32 or int64");
    }
    SLUICE_ASSIGN_OR_RETURN(File file, File::Open(dataset.PathOf(*f), OpenMode::kRead, false));
    edge_files_.push_back({std::move(file), f->dtype});
  }
  return Status::Ok();
}

std::vector<LpStep> LpSchedule::ShuffleSteps(std::vector<LpState>& states) const {
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  LpState all;
  for (BlockId b = 0; b < layout_.num_blocks(); ++b) all.blocks.push_back(b);
  all.edges = src_.size();
  states.push_back(all);
  std::vector<LpStep> steps;
  for (uint64_t b = 0; b < all.edges; b += batch) {
    steps.push_back({0, b, std::min<uint64_t>(b + batch, all.edges)});
  }
  return steps;
}

std::vector<LpStep> LpSchedule::EpochSteps(uint64_t epoch, std::vector<LpState>& states) const {
  states.clear();
  if (cfg_.train.schedule == "shuffle") return ShuffleSteps(states);
  const uint64_t batch = static_cast<uint64_t>(cfg_.train.batch);
  const uint32_t p = layout_.num_blocks();
  auto made = MakePartitionOrder(p, std::max<uint32_t>(resident_, std::min<uint32_t>(p, 2)),
                                 OrderingOf(cfg_.train.ordering), cfg_.train.seed + epoch);
  SLUICE_CHECK(made.ok(), "%s", made.status().ToString().c_str());
  std::vector<LpStep> steps;
  for (size_t g = 0; g < made->states.size(); ++g) {
    const BufferState& buffer = made->states[g];
    LpState state;
    for (size_t k = 0; k < buffer.buckets.size(); ++k) {
      const auto [i, j] = buffer.buckets[k];
      int64_t begin = buckets_[uint64_t{i} * p + j], end = buckets_[uint64_t{i} * p + j + 1];
      if (!buffer.pieces.empty()) {  // split: this state's piece of the bucket
        const auto [piece, pieces] = buffer.pieces[k];
        const int64_t n = end - begin;
        end = begin + n * (piece + 1) / pieces;
        begin += n * piece / pieces;
      }
      if (begin < end) {
        state.ranges.push_back({begin, end});
        state.edges += static_cast<uint64_t>(end - begin);
      }
    }
    if (state.edges == 0) continue;
    state.blocks.assign(buffer.resident.begin(), buffer.resident.end());
    state.group = epoch * 1'000'003 + g;
    const uint32_t index = static_cast<uint32_t>(states.size());
    for (uint64_t b = 0; b < state.edges; b += batch) {
      steps.push_back({index, b, std::min<uint64_t>(b + batch, state.edges)});
    }
    states.push_back(std::move(state));
  }
  return steps;
}

uint64_t LpSchedule::LargestStateEdges() const {
  std::vector<LpState> states;
  EpochSteps(0, states);
  uint64_t most = 0;
  for (const LpState& st : states) most = std::max(most, st.edges);
  return most;
}

Status LpSchedule::ReadEdgeRange(int64_t begin, int64_t end, StateEdges& out) const {
  const uint64_t n = static_cast<uint64_t>(end - begin);
  std::vector<int64_t>* columns[3] = {&out.src, &out.rel, &out.dst};
  for (int c = 0; c < 3; ++c) {
    std::vector<int64_t>& col = *columns[c];
    const size_t base = col.size();
    col.resize(base + n);
    if (!edge_files_[c].file.valid()) continue;  // no relation column: relation 0
    const uint32_t width = edge_files_[c].dtype == DType::kInt32 ? 4 : 8;
    out.scratch.resize(n * width);
    SLUICE_RETURN_IF_ERROR(PreadFull(edge_files_[c].file, out.scratch.data(), n * width,
                                     static_cast<uint64_t>(begin) * width));
    if (width == 8) {
      std::memcpy(col.data() + base, out.scratch.data(), n * 8);
    } else {
      const int32_t* narrow = reinterpret_cast<const int32_t*>(out.scratch.data());
      for (uint64_t i = 0; i < n; ++i) col[base + i] = narrow[i];
    }
  }
  return Status::Ok();
}

Status LpSchedule::CheckIds(const LpState& state, const StateEdges& out) const {
  const int64_t n = static_cast<int64_t>(out.src.size());
  const int64_t nodes = static_cast<int64_t>(layout_.num_nodes());
  const uint64_t relations = std::max<uint64_t>(dataset_->manifest().num_relations, 1);
  for (int64_t i = 0; i < n; ++i) {
    if (out.src[i] < 0 || out.src[i] >= nodes || out.dst[i] < 0 || out.dst[i] >= nodes ||
        out.rel[i] < 0 || static_cast<uint64_t>(out.rel[i]) >= relations) {
      return Corruption("dataset " + cfg_.dataset + ": training edge " +
                        std::to_string(state.ranges.front().first + i) + " has an id out of range");
    }
  }
  return Status::Ok();
}

Status LpSchedule::LoadStateEdges(uint64_t epoch, const LpState& state, StateEdges& out) const {
  if (cfg_.train.schedule == "shuffle") {
    out.order = EpochPermutation(src_.size(), cfg_.train.seed, epoch);
    return Status::Ok();
  }
  out.src.clear(), out.rel.clear(), out.dst.clear();
  for (auto [begin, end] : state.ranges) SLUICE_RETURN_IF_ERROR(ReadEdgeRange(begin, end, out));
  SLUICE_RETURN_IF_ERROR(CheckIds(state, out));
  const int64_t n = static_cast<int64_t>(out.src.size());
  std::vector<std::vector<std::pair<int64_t, int64_t>>> one = {{{0, n}}};
  out.order = GroupedOrder(one, cfg_.train.seed, state.group);
  return Status::Ok();
}

uint32_t EffectiveRunAhead(const std::vector<LpStep>& steps, const std::vector<LpState>& states,
                           uint32_t partitions, uint32_t slots, uint32_t run_ahead) {
  std::vector<uint32_t> count(partitions, 0);
  uint32_t distinct = 0;
  uint64_t best = run_ahead;
  uint64_t start = 0;
  for (uint64_t t = 0; t < steps.size(); ++t) {
    for (BlockId b : states[steps[t].state].blocks) distinct += count[b]++ == 0;
    while (distinct > slots) {
      for (BlockId b : states[steps[start++].state].blocks) distinct -= --count[b] == 0;
    }
    best = std::min<uint64_t>(best, t - start);
  }
  return static_cast<uint32_t>(best);
}

}  // namespace sluice
