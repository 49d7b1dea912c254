#include "prefetch/edge_schedule.h"

#include <algorithm>
#include <cstring>

#include "cache/partition_order.h"
#include "common/check.h"
#include "common/thread_plan.h"
#include "common/clock.h"
#include "sampler/batch_order.h"

namespace sluice {
namespace {

// Appends rows [begin, end) of an int32 or int64 column to `out` (widened to int64).
Status ReadColumn(IoSession& io, const RowFile& file, int64_t begin, int64_t end,
                  std::vector<int64_t>& out) {
  const auto n = static_cast<uint64_t>(end - begin);
  const size_t base = out.size();
  out.resize(base + n);
  if (file.row_bytes() == 8) {
    return file.ReadRange(io, static_cast<uint64_t>(begin), n,
                          reinterpret_cast<std::byte*>(out.data() + base));
  }
  std::vector<int32_t> narrow(n);
  SLUICE_RETURN_IF_ERROR(file.ReadRange(io, static_cast<uint64_t>(begin), n,
                                        reinterpret_cast<std::byte*>(narrow.data())));
  for (uint64_t i = 0; i < n; ++i) out[base + i] = narrow[i];
  return Status::Ok();
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
  const Manifest& m = dataset.manifest();
  const int64_t nodes = static_cast<int64_t>(m.num_nodes);
  const int64_t relations = static_cast<int64_t>(std::max<uint64_t>(m.num_relations, 1));
  if (src.size() != dst.size() || rel.size() != src.size()) {
    return Corruption("dataset " + dataset.dir() + ": edges." + split + ".src/rel/dst hold " +
                      std::to_string(src.size()) + "/" + std::to_string(rel.size()) + "/" +
                      std::to_string(dst.size()) + " ids, expected one per edge");
  }
  for (size_t i = 0; i < src.size(); ++i) {
    const char* bad = src[i] < 0 || src[i] >= nodes   ? "src"
                      : dst[i] < 0 || dst[i] >= nodes ? "dst"
                      : rel[i] < 0 || rel[i] >= relations ? "rel"
                                                          : nullptr;
    if (bad == nullptr) continue;
    const int64_t v = bad[0] == 's' ? src[i] : bad[0] == 'd' ? dst[i] : rel[i];
    return Corruption("dataset " + dataset.dir() + ": edges." + split + "." + bad + "[" +
                      std::to_string(i) + "] is " + std::to_string(v) + ", outside [0, " +
                      std::to_string(bad[0] == 'r' ? relations : nodes) + ")");
  }
  return Status::Ok();
}

Status EdgeSchedule::Open(const Dataset& dataset, std::vector<uint64_t> bounds,
                          EdgeScheduleOptions options) {
  dataset_dir_ = dataset.dir();
  options_ = std::move(options);
  bounds_ = std::move(bounds);
  const Manifest& m = dataset.manifest();
  num_train_edges_ = m.edges.count("train") ? m.edges.at("train") : 0;
  num_relations_ = std::max<uint64_t>(m.num_relations, 1);
  SLUICE_ASSIGN_OR_RETURN(buckets_, dataset.ReadInt64("edges.train.buckets"));
  if (options_.shuffle) return LoadEdges(dataset, "train", src_, rel_, dst_);
  const char* names[3] = {"src", "rel", "dst"};
  for (int c = 0; c < 3; ++c) {  // streamed per buffer state
    const std::string role = std::string("edges.train.") + names[c];
    if (!dataset.Has(role)) continue;
    SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset.File(role));
    if (f->dtype != DType::kInt32 && f->dtype != DType::kInt64) {
      return InvalidArgument("dataset " + dataset_dir_ + ": " + role + " is " +
                             DTypeName(f->dtype) + ", expected int32 or int64");
    }
    SLUICE_ASSIGN_OR_RETURN(columns_[c], RowFile::OpenArray(dataset.PathOf(*f),
                                                            f->dtype == DType::kInt32 ? 4 : 8,
                                                            f->elements(), RowFileOptionsFrom(options_.io)));
  }
  if (!columns_[0] || !columns_[2]) {
    return InvalidArgument("dataset " + dataset_dir_ + " has no edges.train.src/dst");
  }
  return Status::Ok();
}

std::vector<EdgeStep> EdgeSchedule::ShuffleSteps(std::vector<EdgeState>& states) const {
  EdgeState all;
  for (BlockId b = 0; b < partitions(); ++b) all.blocks.push_back(b);
  all.edges = src_.size();
  states.push_back(all);
  std::vector<EdgeStep> steps;
  for (uint64_t b = 0; b < all.edges; b += options_.batch) {
    steps.push_back({0, b, std::min<uint64_t>(b + options_.batch, all.edges)});
  }
  return steps;
}

std::pair<int64_t, int64_t> EdgeSchedule::BucketRange(const BufferState& buffer, size_t k) const {
  const uint32_t p = partitions();
  const auto [i, j] = buffer.buckets[k];
  int64_t begin = buckets_[uint64_t{i} * p + j], end = buckets_[uint64_t{i} * p + j + 1];
  if (!buffer.pieces.empty()) {  // split: this state's piece of the bucket
    const auto [piece, pieces] = buffer.pieces[k];
    const int64_t n = end - begin;
    end = begin + n * (piece + 1) / pieces;
    begin += n * piece / pieces;
  }
  return {begin, end};
}

// Epoch 0's ordering as made; each later epoch's renamed to begin with the partitions the
// previous epoch's last trained state held, so the partition buffer carries over the boundary
// (a chain, so still a pure function of seed and epoch).
PartitionOrder EdgeSchedule::EpochOrder(uint64_t epoch) const {
  const uint32_t p = partitions();
  const uint32_t c = std::max<uint32_t>(resident_, std::min<uint32_t>(p, 2));
  PartitionOrder order;
  for (uint64_t e = options_.chain ? 0 : epoch; e <= epoch; ++e) {
    auto made = MakePartitionOrder(p, c, options_.ordering, options_.seed + e);
    SLUICE_CHECK(made.ok(), "%s", made.status().ToString().c_str());
    // The previous epoch's trained states (within max_steps).
    std::vector<BufferState> trained;
    uint64_t steps = 0;
    for (const BufferState& st : order.states) {
      if (options_.max_steps > 0 && steps >= options_.max_steps) break;
      uint64_t edges = 0;
      for (size_t k = 0; k < st.buckets.size(); ++k) {
        const auto [begin, end] = BucketRange(st, k);
        edges += static_cast<uint64_t>(end - begin);
      }
      if (edges == 0) continue;
      trained.push_back(st);
      steps += (edges + options_.batch - 1) / options_.batch;
    }
    order = trained.empty() ? std::move(*made) : StartingWith(std::move(*made), RecentFirst(trained), p);
  }
  return order;
}

std::vector<EdgeStep> EdgeSchedule::EpochSteps(uint64_t epoch, std::vector<EdgeState>& states) const {
  states.clear();
  if (options_.shuffle) return ShuffleSteps(states);
  const PartitionOrder order = EpochOrder(epoch);
  std::vector<EdgeStep> steps;
  for (size_t g = 0; g < order.states.size(); ++g) {
    const BufferState& buffer = order.states[g];
    EdgeState state;
    for (size_t k = 0; k < buffer.buckets.size(); ++k) {
      const auto [begin, end] = BucketRange(buffer, k);
      if (begin < end) {
        state.ranges.push_back({begin, end});
        state.edges += static_cast<uint64_t>(end - begin);
      }
    }
    if (state.edges == 0) continue;
    state.blocks.assign(buffer.resident.begin(), buffer.resident.end());
    state.group = epoch * 1'000'003 + g;
    const uint32_t index = static_cast<uint32_t>(states.size());
    for (uint64_t b = 0; b < state.edges; b += options_.batch) {
      steps.push_back({index, b, std::min<uint64_t>(b + options_.batch, state.edges)});
    }
    states.push_back(std::move(state));
  }
  if (options_.max_steps > 0 && steps.size() > options_.max_steps) steps.resize(options_.max_steps);
  return steps;
}

uint64_t EdgeSchedule::LargestStateEdges() const {
  std::vector<EdgeState> states;
  EpochSteps(0, states);
  uint64_t most = 0;
  for (const EdgeState& st : states) most = std::max(most, st.edges);
  return most;
}

EdgeState EdgeSchedule::ResidentState(const EdgeState& state) const {
  EdgeState whole;
  whole.blocks = state.blocks;
  std::sort(whole.blocks.begin(), whole.blocks.end());
  const uint32_t p = partitions();
  for (BlockId i : whole.blocks) {
    for (BlockId j : whole.blocks) {
      const int64_t begin = buckets_[uint64_t{i} * p + j], end = buckets_[uint64_t{i} * p + j + 1];
      if (begin < end) whole.ranges.emplace_back(begin, end);
      whole.edges += static_cast<uint64_t>(end - begin);
    }
  }
  whole.group = state.group;
  return whole;
}

uint64_t EdgeSchedule::LargestResidentEdges() const {
  std::vector<EdgeState> states;
  EpochSteps(0, states);
  uint64_t most = 0;
  for (const EdgeState& st : states) most = std::max(most, ResidentState(st).edges);
  return most;
}

std::vector<std::pair<int64_t, int64_t>> EdgeSchedule::NodeRanges(const EdgeState& state) const {
  std::vector<BlockId> sorted(state.blocks.begin(), state.blocks.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (BlockId k : sorted) {
    if (bounds_[k] < bounds_[k + 1]) {
      ranges.emplace_back(static_cast<int64_t>(bounds_[k]), static_cast<int64_t>(bounds_[k + 1]));
    }
  }
  return ranges;
}

Status EdgeSchedule::CheckIds(const EdgeState& state, const StateEdges& out) const {
  const int64_t n = static_cast<int64_t>(out.src.size());
  const int64_t nodes = static_cast<int64_t>(num_nodes());
  for (int64_t i = 0; i < n; ++i) {
    if (out.src[i] < 0 || out.src[i] >= nodes || out.dst[i] < 0 || out.dst[i] >= nodes ||
        out.rel[i] < 0 || static_cast<uint64_t>(out.rel[i]) >= num_relations_) {
      return Corruption("dataset " + dataset_dir_ + ": training edge " +
                        std::to_string(state.ranges.front().first + i) + " has an id out of range");
    }
  }
  return Status::Ok();
}

Status EdgeSchedule::LoadStateEdges(IoSession& io, uint64_t epoch, const EdgeState& state,
                                    StateEdges& out) const {
  if (options_.shuffle) {
    out.order = EpochPermutation(src_.size(), options_.seed, epoch);
    return Status::Ok();
  }
  out.src.clear(), out.rel.clear(), out.dst.clear();
  for (auto [begin, end] : state.ranges) {
    SLUICE_RETURN_IF_ERROR(ReadColumn(io, *columns_[0], begin, end, out.src));
    SLUICE_RETURN_IF_ERROR(ReadColumn(io, *columns_[2], begin, end, out.dst));
    if (columns_[1]) {
      SLUICE_RETURN_IF_ERROR(ReadColumn(io, *columns_[1], begin, end, out.rel));
    } else {
      out.rel.resize(out.rel.size() + static_cast<uint64_t>(end - begin), 0);
    }
  }
  SLUICE_RETURN_IF_ERROR(CheckIds(state, out));
  const int64_t n = static_cast<int64_t>(out.src.size());
  std::vector<std::vector<std::pair<int64_t, int64_t>>> one = {{{0, n}}};
  out.order = GroupedOrder(one, options_.seed, state.group);
  return Status::Ok();
}

uint32_t EffectiveRunAhead(const std::vector<EdgeStep>& steps, const std::vector<EdgeState>& states,
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

EdgeReader::EdgeReader(const EdgeSchedule* schedule, uint64_t epoch)
    : schedule_(schedule), epoch_(epoch) {
  thread_ = std::thread([this] {
    NameThisThread("sluice-edges");
    Run();
  });
}

EdgeReader::~EdgeReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EdgeReader::Run() {
  // A ring belongs to the thread that submits to it.
  Result<std::unique_ptr<IoSession>> io = IoSession::Create(schedule_->options().io);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const auto wait = SteadyClock::now();
    cv_.wait(lock, [&] { return quit_ || (request_ != nullptr && !done_); });
    time_.wait_s += SecondsSince(wait);
    if (quit_) return;
    const EdgeState* state = request_;
    lock.unlock();
    const auto busy = SteadyClock::now();
    Status s = io.ok() ? schedule_->LoadStateEdges(**io, epoch_, *state, next_) : io.status();
    lock.lock();
    time_.busy_s += SecondsSince(busy);
    status_ = std::move(s);
    done_ = true;
    cv_.notify_all();
  }
}

void EdgeReader::Prefetch(uint32_t index, const EdgeState* state) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return request_ == nullptr || done_; });  // (one read at a time)
  request_ = state;
  requested_ = index;
  done_ = false;
  cv_.notify_all();
}

Status EdgeReader::Take(uint32_t index, const EdgeState& state, StateEdges& out) {
  std::unique_lock<std::mutex> lock(mu_);
  if (requested_ == index && request_ != nullptr) {
    cv_.wait(lock, [&] { return done_; });
    std::swap(out, next_);
    request_ = nullptr;
    requested_ = ~uint32_t{0};
    return status_;
  }
  lock.unlock();
  if (own_io_ == nullptr) {
    SLUICE_ASSIGN_OR_RETURN(own_io_, IoSession::Create(schedule_->options().io));
  }
  return schedule_->LoadStateEdges(*own_io_, epoch_, state, out);
}

StageTime EdgeReader::time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return time_;
}

}  // namespace sluice
