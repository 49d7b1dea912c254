#include "train/device_rows.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/units.h"
#include "train/run_summary.h"

namespace sluice {
namespace {

constexpr int64_t kAlign = 64;
int64_t Align(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Rows in, their load slots, every row's slot, every use's row, extras.
int64_t StagedBytes(int64_t row_floats, int64_t loads, int64_t rows, int64_t uses, int64_t extra_bytes) {
  return Align(loads * row_floats * 4) + Align((loads + rows + uses) * 8) + extra_bytes;
}

// The row optimizers of train/row_optimizers.h as tensor operations on rows [u, row_floats]
// (value, then state) with the rows' summed gradients g [u, d]; the same formulas.
void ApplyOnDevice(RowOptimizer opt, torch::Tensor& rows, const torch::Tensor& g, int64_t d, float lr) {
  torch::Tensor value = rows.narrow(1, 0, d);
  switch (opt) {
    case RowOptimizer::kSgd:
      value.sub_(g * lr);
      return;
    case RowOptimizer::kRowwiseAdagrad: {
      torch::Tensor state = rows.narrow(1, d, 1);
      state.add_(g.square().sum(1, /*keepdim=*/true) / static_cast<float>(d));
      value.sub_(g * (lr / (state.sqrt() + 1e-10f)));
      return;
    }
    case RowOptimizer::kAdagrad: {
      torch::Tensor state = rows.narrow(1, d, d);
      state.add_(g.square());
      value.sub_(g * lr / (state.sqrt() + 1e-10f));
      return;
    }
  }
}

// Grows a staging pair to hold `bytes` (a quarter more, so steps of varying size settle).
void Reserve(Accelerator& acc, torch::Tensor& host, torch::Tensor* dev, int64_t bytes) {
  if (host.defined() && host.numel() >= bytes) return;
  const int64_t size = Align(bytes + bytes / 4 + kAlign);
  host = acc.HostBytes(size);
  if (dev != nullptr) *dev = acc.DeviceBytes(size);
}

// Rows the oracle's window may hold besides the cached ones: the appended steps' rows.
uint64_t DeviceWindowRows(const DeviceRowsOptions& o) {
  return o.planner == PlannerKind::kOracle && !o.direct ? uint64_t{kDeviceLookahead + 1} * o.max_step_rows : 0;
}

}  // namespace

uint32_t DeviceCacheShards(const DeviceRowsOptions& o) {
  if (o.direct) return 1;
  const auto threads = static_cast<uint32_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  return ShardedRowCache::Shards(o.planner, o.capacity_rows, /*protect_steps=*/1, o.max_step_rows, o.total_rows,
                                 threads, DeviceWindowRows(o));
}

uint64_t DeviceStagingHostBytes(const DeviceRowsOptions& o, uint64_t max_uses, uint64_t max_rows,
                                uint64_t extra_bytes) {
  const auto in = static_cast<uint64_t>(StagedBytes(o.row_floats, static_cast<int64_t>(max_rows),
                                                    static_cast<int64_t>(max_rows),
                                                    static_cast<int64_t>(max_uses),
                                                    static_cast<int64_t>(extra_bytes)));
  const uint64_t out = max_rows * static_cast<uint64_t>(o.row_floats) * 4;
  return 2 * (in + out) * 5 / 4;
}

uint64_t DeviceRowsBytes(const DeviceRowsOptions& o, uint64_t max_uses, uint64_t max_rows,
                         uint64_t extra_bytes) {
  const uint64_t slots = o.capacity_rows * static_cast<uint64_t>(o.row_floats) * 4;
  // Two lanes' staged bytes, and a step's gathered uses, sums and updated rows.
  const uint64_t staged = DeviceStagingHostBytes(o, max_uses, max_rows, extra_bytes);
  const uint64_t step = (max_uses + max_rows) * static_cast<uint64_t>(o.dim) * 4 * 2 +
                        max_rows * static_cast<uint64_t>(o.row_floats) * 4 * 2 + max_uses * 16;
  return slots + staged + step;
}

Result<uint64_t> DeviceCapacityRows(const DeviceConfig& config, const DeviceRowsOptions& options,
                                    uint64_t max_uses, uint64_t max_rows, uint64_t extra_bytes) {
  // Every row of the table fits in total_rows slots: a larger cache would hold nothing more.
  // (direct: two lanes of a step's rows each, whatever the table's size.)
  const uint64_t all = options.total_rows != 0 && !options.direct ? options.total_rows : UINT64_MAX;
  const uint64_t min_rows = std::min(2 * max_rows, all);
  if (config.gpu_budget.value == 0 || config.planner == PlannerKind::kNone) return min_rows;
  DeviceRowsOptions fixed = options;
  fixed.capacity_rows = 0;
  const uint64_t reserved = DeviceRowsBytes(fixed, max_uses, max_rows, extra_bytes);
  const uint64_t row_bytes = static_cast<uint64_t>(options.row_floats) * 4;
  if (config.gpu_budget.value < reserved + min_rows * row_bytes) {
    return InvalidArgument("device.gpu_budget " + FormatBytes(config.gpu_budget.value) +
                           " cannot hold two steps' rows (" + FormatBytes(min_rows * row_bytes) +
                           ") and their staging (" + FormatBytes(reserved) +
                           "); raise it, or set 0 for the steps in flight only");
  }
  return std::min((config.gpu_budget.value - reserved) / row_bytes, all);
}

Result<DevicePlan> PlanDevice(const DeviceConfig& config, DeviceRowsOptions options,
                              const DeviceStepShape& shape, bool device_is_host,
                              uint64_t model_step_bytes) {
  if (config.planner == PlannerKind::kStatic && !options.ranked) {
    return InvalidArgument("device.planner: static keeps a fixed ranking of rows on the device, which only "
                           "node classification's feature rows have (by in-degree); use lru or none");
  }
  DevicePlan plan;
  options.max_step_rows = shape.rows;
  SLUICE_ASSIGN_OR_RETURN(options.capacity_rows,
                          DeviceCapacityRows(config, options, shape.uses, shape.rows, shape.extra_bytes));
  plan.options = options;
  plan.host_bytes = DeviceStagingHostBytes(options, shape.uses, shape.rows, shape.extra_bytes) +
                    ShardedRowCache::IndexBytes(options.planner, options.capacity_rows, DeviceCacheShards(options),
                                                options.total_rows, DeviceWindowRows(options));
  if (device_is_host) {
    plan.host_bytes += DeviceRowsBytes(options, shape.uses, shape.rows, shape.extra_bytes) + model_step_bytes;
  }
  return plan;
}

void SummarizeDevice(RunSummary& s, const Accelerator& acc, const DeviceRows& rows, double wall_s) {
  const AcceleratorTimes& t = acc.times();
  const DeviceRowsStats& r = rows.stats();
  const double hidden_s = std::max(0.0, t.copy_s - t.stall_s);
  const double hit_rate = r.rows > 0 ? 1.0 - static_cast<double>(r.loads) / static_cast<double>(r.rows) : 0;
  const double lookahead = r.steps > 0 ? static_cast<double>(r.lookahead_steps) / static_cast<double>(r.steps) : 0;
  char planner[64];
  if (rows.wants_lookahead()) {
    std::snprintf(planner, sizeof planner, "oracle looking %.1f steps ahead", lookahead);
  } else {
    std::snprintf(planner, sizeof planner, "%s", EnumName(rows.planner()));
  }
  char line[640];
  std::snprintf(line, sizeof line,
                "device: %s; busy %.3f s of %.3f s (%.0f%%); copies in %.3f s, %.3f s of them hidden "
                "behind compute; %llu of %llu step rows copied in (device cache %llu rows in %u shards, %s, "
                "hits %.1f%%); "
                "staging on the host: cache plan %.3f s, packing %.3f s; peak device memory %s",
                acc.Describe().c_str(), t.busy_s, wall_s, wall_s > 0 ? 100 * t.busy_s / wall_s : 0.0,
                t.copy_s, hidden_s, static_cast<unsigned long long>(r.loads),
                static_cast<unsigned long long>(r.rows), static_cast<unsigned long long>(rows.capacity_rows()),
                rows.cache_shards(), rows.direct() ? "direct" : planner, 100 * hit_rate, r.plan_s, r.pack_s,
                FormatBytes(acc.PeakDeviceBytes()).c_str());
  s.Line(line);
  if (r.shared_steps > 0 && !rows.direct()) {  // (direct: every row is copied each step anyway)
    std::snprintf(line, sizeof line,
                  "device: %llu of %llu steps did not fit the device slots beside the running step and took its "
                  "slots (its rows were copied in again when next used; a larger device.gpu_budget keeps them)",
                  static_cast<unsigned long long>(r.shared_steps), static_cast<unsigned long long>(r.steps));
    s.Line(line);
  }
  s.Set("device", "shared_steps", r.shared_steps);
  s.Set("device", "name", acc.Describe());
  s.Set("device", "steps", t.steps), s.Set("device", "wall_s", wall_s);
  s.Set("device", "busy_s", t.busy_s), s.Set("device", "copy_s", t.copy_s);
  s.Set("device", "copy_stall_s", t.stall_s), s.Set("device", "copy_hidden_s", hidden_s);
  s.Set("device", "bytes_in", t.bytes_in), s.Set("device", "bytes_out", t.bytes_out);
  s.Set("device", "rows", r.rows), s.Set("device", "rows_loaded", r.loads);
  s.Set("device", "cache_rows", rows.capacity_rows());
  s.Set("device", "cache_shards", rows.cache_shards());
  s.Set("device", "planner", std::string(rows.direct() ? "direct" : EnumName(rows.planner())));
  s.Set("device", "lookahead_steps", lookahead);
  s.Set("device", "stage_plan_s", r.plan_s), s.Set("device", "stage_pack_s", r.pack_s);
  s.Set("device", "peak_device_bytes", acc.PeakDeviceBytes());
}

DeviceRows::DeviceRows(Accelerator* accelerator, const DeviceRowsOptions& options)
    : acc_(accelerator), options_(options) {
  SLUICE_CHECK(options.capacity_rows > 0 && options.row_floats >= options.dim && options.dim > 0,
               "device rows: bad options (capacity %llu, row %lld floats, dim %lld)",
               static_cast<unsigned long long>(options.capacity_rows),
               static_cast<long long>(options.row_floats), static_cast<long long>(options.dim));
  slots_ = torch::zeros({static_cast<int64_t>(options.capacity_rows), options.row_floats},
                        torch::TensorOptions().device(acc_->device()));
  loading_.assign(options.capacity_rows, 0);
  Reset();
}

Status DeviceRows::PlanSlots(std::span<const RowKey> keys, Lane& lane) {
  if (keys.size() > options_.capacity_rows) {
    return FailedPrecondition("device rows: a step has " + std::to_string(keys.size()) + " rows, more than the " +
                              std::to_string(options_.capacity_rows) +
                              " slots device.gpu_budget holds (raise device.gpu_budget)");
  }
  if (options_.direct) {  // slots [lane * half, lane * half + rows): every row loaded
    const uint64_t half = options_.capacity_rows / 2;
    // A step larger than its half takes every slot from 0 (see Stage: Begin writes them after
    // the running step's compute, and a direct step's rows are never written back).
    const bool shared = keys.size() > half;
    stats_.shared_steps += shared ? 1 : 0;
    const auto base = shared ? 0u : static_cast<uint32_t>(static_cast<uint64_t>(&lane - lanes_) * half);
    plan_.slots.resize(keys.size());  // Pack loads every row: no load_slots to list
    for (size_t k = 0; k < keys.size(); ++k) plan_.slots[k] = base + static_cast<uint32_t>(k);
    lane.rows = lane.loads = static_cast<int64_t>(keys.size());
    stats_.rows += keys.size(), stats_.loads += keys.size();
    ++stats_.steps;
    return Status::Ok();
  }
  if (wants_lookahead()) {
    if (cache_->appended_unplanned() == 0) cache_->Append(keys);  // (a task without lookahead)
    stats_.lookahead_steps += cache_->appended_unplanned() - 1;
  }
  Status s = cache_->Plan(keys, /*writes=*/false, plan_);
  if (!s.ok() && cache_->step_unplaced()) {
    // The running step's rows give up their slots (keep 0 steps): see Stage.
    // (Pack needs the set of slots loaded only; the first call's loads are kept aside.)
    first_loads_.assign(plan_.load_slots.begin(), plan_.load_slots.end());
    s = cache_->PlaceAfterDrain(keys, /*keep_steps=*/0, plan_);
    plan_.load_slots.insert(plan_.load_slots.end(), first_loads_.begin(), first_loads_.end());
    if (s.ok()) NoteSharedStep(keys.size());
    if (!s.ok()) {
      const uint32_t k = cache_->shards();
      return FailedPrecondition(
          "device row cache: a step of " + std::to_string(keys.size()) + " rows does not fit its " +
          std::to_string(options_.capacity_rows) + " slots even with the running step's rows released" +
          (k > 1 ? " (planned in " + std::to_string(k) + " shards of about " +
                       std::to_string(options_.capacity_rows / k) +
                       " slots: a shard's share of the step is larger than its slots)"
                 : "") +
          "; raise device.gpu_budget");
    }
  }
  if (!s.ok()) {
    return FailedPrecondition("device row cache: " + s.message() + " (device.gpu_budget holds " +
                              std::to_string(options_.capacity_rows) + " rows; a step has " +
                              std::to_string(keys.size()) + ")");
  }
  lane.rows = static_cast<int64_t>(keys.size());
  lane.loads = static_cast<int64_t>(plan_.load_slots.size());
  stats_.rows += keys.size();
  stats_.loads += plan_.load_slots.size();
  ++stats_.steps;
  return Status::Ok();
}

void DeviceRows::NoteSharedStep(size_t rows) {
  if (stats_.shared_steps++ == 0) {
    SLUICE_LOG(kWarning,
               "device row cache: a step of %zu rows did not fit its %llu slots beside the running step's rows; "
               "it took their slots (the run stays exact; those rows are copied in again when next used; a "
               "larger device.gpu_budget keeps them)",
               rows, static_cast<unsigned long long>(options_.capacity_rows));
  }
}

void DeviceRows::Pack(std::span<float* const> host, const UseParts& parts,
                      const std::vector<torch::Tensor>& extras, Lane& lane) {
  const int64_t rf = options_.row_floats;
  lane.uses = 0;
  for (const auto& p : parts) lane.uses += static_cast<int64_t>(p.size());
  int64_t extra_bytes = 0;
  for (const torch::Tensor& e : extras) extra_bytes += Align(e.numel() * e.element_size());
  lane.load_off = 0;
  lane.slot_off = Align(lane.loads * rf * 4);
  lane.use_off = lane.slot_off + (lane.loads + lane.rows) * 8;
  int64_t end = Align(lane.use_off + lane.uses * 8);
  lane.extra_offsets.clear();
  for (const torch::Tensor& e : extras) {
    lane.extra_offsets.push_back(end);
    end += Align(e.numel() * e.element_size());
  }
  acc_->WaitCopyIn(static_cast<int>(&lane - lanes_));  // the lane's last copy has read its buffer
  Reserve(*acc_, lane.host_in, &lane.dev_in, end);
  std::byte* base = reinterpret_cast<std::byte*>(lane.host_in.data_ptr<uint8_t>());
  auto* load_slots = reinterpret_cast<int64_t*>(base + lane.slot_off);
  int64_t* row_slots = load_slots + lane.loads;
  // The loaded rows: the step's rows (in step order) whose slots this plan loads (direct: all).
  std::vector<int64_t> loaded;
  if (!options_.direct) {
    for (uint32_t s : plan_.load_slots) loading_[s] = 1;
    loaded.reserve(static_cast<size_t>(lane.loads));
    for (size_t k = 0; k < plan_.slots.size(); ++k) {
      if (loading_[plan_.slots[k]] != 0) loaded.push_back(static_cast<int64_t>(k));
    }
    for (uint32_t s : plan_.load_slots) loading_[s] = 0;
  }
  std::copy(plan_.slots.begin(), plan_.slots.end(), row_slots);
  auto* rows_in = reinterpret_cast<float*>(base + lane.load_off);
  const bool direct = options_.direct;
  tbb::parallel_for(tbb::blocked_range<size_t>(0, static_cast<size_t>(lane.loads), 256), [&](const auto& r) {
    for (size_t i = r.begin(); i < r.end(); ++i) {
      const size_t k = direct ? i : static_cast<size_t>(loaded[i]);
      load_slots[i] = plan_.slots[k];
      std::memcpy(rows_in + static_cast<int64_t>(i) * rf, host[k], static_cast<size_t>(rf) * 4);
    }
  });
  auto* use_rows = reinterpret_cast<int64_t*>(base + lane.use_off);
  for (const auto& p : parts) use_rows = std::copy(p.begin(), p.end(), use_rows);
  for (size_t i = 0; i < extras.size(); ++i) {
    std::memcpy(base + lane.extra_offsets[i], extras[i].data_ptr(),
                static_cast<size_t>(extras[i].numel() * extras[i].element_size()));
  }
  lane.extra_shapes = extras;
  acc_->CopyIn(static_cast<int>(&lane - lanes_), lane.host_in.narrow(0, 0, end), lane.dev_in.narrow(0, 0, end));
}

Status DeviceRows::Stage(std::span<const RowKey> keys, std::span<float* const> host,
                         const UseParts& parts, const std::vector<torch::Tensor>& extras) {
  Lane& lane = lanes_[staged_lane_];
  SLUICE_CHECK(!lane.staged && staged_lane_ != running_, "device rows: a step is staged already");
  auto start = SteadyClock::now();
  SLUICE_RETURN_IF_ERROR(PlanSlots(keys, lane));
  stats_.plan_s += SecondsSince(start);
  start = SteadyClock::now();
  lane.host_rows.assign(host.begin(), host.end());
  Pack(host, parts, extras, lane);
  stats_.pack_s += SecondsSince(start);
  lane.staged = true;
  return Status::Ok();
}

torch::Tensor DeviceRows::DeviceView(const Lane& lane, int64_t offset, int64_t count,
                                     torch::ScalarType type) const {
  const auto size = static_cast<int64_t>(c10::elementSize(type));
  return lane.dev_in.narrow(0, offset, count * size).view(type);
}

DeviceStep DeviceRows::Begin(bool training) {
  const int l = staged_lane_;
  Lane& lane = lanes_[l];
  SLUICE_CHECK(lane.staged && running_ < 0, "device rows: Begin without a staged step");
  lane.staged = false;
  running_ = l;
  staged_lane_ = 1 - l;
  acc_->BeginStep(l);
  torch::Tensor loaded = DeviceView(lane, lane.load_off, lane.loads * options_.row_floats, torch::kFloat32);
  torch::Tensor load_slots = DeviceView(lane, lane.slot_off, lane.loads, torch::kInt64);
  // index_put_ rather than index_copy_: the slots are distinct, and index_copy_ has no
  // deterministic CUDA kernel (deterministic mode refuses it).
  if (lane.loads > 0) slots_.index_put_({load_slots}, loaded.view({lane.loads, options_.row_floats}));
  lane.row_slots = DeviceView(lane, lane.slot_off + lane.loads * 8, lane.rows, torch::kInt64);
  lane.use_rows = DeviceView(lane, lane.use_off, lane.uses, torch::kInt64);
  DeviceStep step;
  const torch::Tensor use_slots = lane.row_slots.index_select(0, lane.use_rows);
  step.table.uses = slots_.narrow(1, 0, options_.dim).index_select(0, use_slots);
  if (training) step.table.uses.set_requires_grad(true);
  step.table.inverse = lane.use_rows;
  step.table.rows = lane.rows;
  for (size_t i = 0; i < lane.extra_shapes.size(); ++i) {
    const torch::Tensor& h = lane.extra_shapes[i];
    step.extras.push_back(DeviceView(lane, lane.extra_offsets[i], h.numel(), h.scalar_type()).view(h.sizes()));
  }
  return step;
}

void DeviceRows::Update(const std::vector<torch::Tensor>& use_grads) {
  SLUICE_CHECK(running_ >= 0, "device rows: Update without a running step");
  Lane& lane = lanes_[running_];
  torch::NoGradGuard no_grad;
  const int64_t d = options_.dim, rf = options_.row_floats;
  torch::Tensor sums = torch::zeros({lane.rows, d}, slots_.options());
  std::vector<torch::Tensor> pieces;
  for (const torch::Tensor& g : use_grads) {
    if (g.defined()) pieces.push_back(g.reshape({-1, d}));
  }
  if (!pieces.empty()) {
    sums.index_add_(0, lane.use_rows, pieces.size() == 1 ? pieces[0] : torch::cat(pieces));
  }
  torch::Tensor rows = slots_.index_select(0, lane.row_slots);
  ApplyOnDevice(options_.optimizer, rows, sums, d, options_.lr);
  slots_.index_put_({lane.row_slots}, rows);
  const int64_t bytes = lane.rows * rf * 4;
  Reserve(*acc_, lane.host_out, nullptr, bytes);
  acc_->CopyOut(running_, rows.view({-1}).view(torch::kUInt8), lane.host_out.narrow(0, 0, bytes));
}

Status DeviceRows::Finish() {
  SLUICE_CHECK(running_ >= 0, "device rows: Finish without a running step");
  Lane& lane = lanes_[running_];
  acc_->WaitCopyOut(running_);
  running_ = -1;
  const int64_t rf = options_.row_floats;
  const auto* rows = reinterpret_cast<const float*>(lane.host_out.data_ptr<uint8_t>());
  tbb::parallel_for(size_t{0}, lane.host_rows.size(), [&](size_t k) {
    std::memcpy(lane.host_rows[k], rows + static_cast<int64_t>(k) * rf, static_cast<size_t>(rf) * 4);
  });
  return Status::Ok();
}

void DeviceRows::End() {
  SLUICE_CHECK(running_ >= 0, "device rows: End without a running step");
  const torch::Tensor none = torch::empty({0}, torch::kUInt8);
  acc_->CopyOut(running_, none.to(acc_->device()), lanes_[running_].host_in.narrow(0, 0, 0));
  acc_->WaitCopyOut(running_);
  running_ = -1;
}

void DeviceRows::Lookahead(std::span<const RowKey> keys) {
  if (!wants_lookahead()) return;
  SLUICE_CHECK(cache_->appended_unplanned() <= kDeviceLookahead, "device rows: %llu steps appended ahead",
               static_cast<unsigned long long>(cache_->appended_unplanned()));
  const auto start = SteadyClock::now();
  cache_->Append(keys);
  stats_.plan_s += SecondsSince(start);
}

void DeviceRows::Reset() {
  acc_->Synchronize();
  for (Lane& lane : lanes_) lane.staged = false;
  running_ = -1;
  staged_lane_ = 0;
  RowCacheOptions co;
  co.kind = options_.planner;
  co.capacity_rows = options_.capacity_rows;
  co.pinned = options_.pinned;
  co.total_rows = options_.total_rows;
  co.protect_steps = 1;  // the running step's rows stay while the next is planned
  co.window_steps = wants_lookahead() ? kDeviceLookahead : 0;
  co.window_rows = DeviceWindowRows(options_);
  cache_.emplace(co, DeviceCacheShards(options_));
}

}  // namespace sluice
