// The DLRM task's storage set-up, checkpoints, export and summary (see dlrm_task_impl.h).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <unistd.h>

#include "common/units.h"
#include "storage/disk_probe.h"
#include "storage/io_session.h"
#include "train/allocator.h"
#include "train/dist.h"
#include "train/dlrm/dlrm_task_impl.h"
#include "train/npy.h"
#include "train/row_checkpoint.h"
#include "train/run_dir.h"
#include "train/torch_io.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

KvTableOptions KvOptions(const DlrmStorageConfig& sc, bool read_only) {
  KvTableOptions kvo;
  kvo.block_cache_bytes = sc.rocksdb_cache.value;
  kvo.memtable_bytes = sc.rocksdb_memtable.value;
  kvo.read_only = read_only;
  return kvo;
}

}  // namespace

Status DlrmTask::SetUpInMemory(const std::string& rows_from) {
  memory_ = std::make_unique<MemoryRows>(tables_->row_bytes(), tables_->offsets(), Init());
  if (!rows_from.empty()) SLUICE_RETURN_IF_ERROR(LoadMemoryRows(rows_from));
  run_ahead_ = static_cast<uint32_t>(cfg_.storage.run_ahead);
  plan_.predicted_bytes = kRuntimeBytes + net_->StateBytes() + memory_->bytes() +
                         (acc_ != nullptr ? DeviceHostBytes() + acc_->RuntimeHostBytes() : StepBytes());
  memory_plan_ = "in memory: " +
                 std::string(tables_->raw_ids()
                                 ? "rows created on first use"
                                 : FormatCount(static_cast<double>(tables_->total_rows())) + " rows") +
                 " of " + std::to_string(tables_->row_bytes()) + " bytes";
  return Status::Ok();
}

Result<RowPlanInput> DlrmTask::PlanInput() {
  const DlrmStorageConfig& sc = cfg_.storage;
  RowPlanInput in;
  in.budget_bytes = sc.budget.value;
  in.model_bytes = net_->StateBytes();
  if (dp_ != nullptr) in.model_bytes += ShardGradients::Bytes(*dp_, dp_->dense_floats());
  in.step_bytes = StepBytes();
  if (acc_ != nullptr) {
    // The model's state and activations live on the device; the host holds the CUDA runtime
    // (measured), the page-locked staging and the device cache's index.
    in.runtime_bytes = std::max(kRuntimeBytes, CurrentRssBytes()) + acc_->RuntimeHostBytes();
    in.model_bytes = 0;
    in.step_bytes = DeviceHostBytes();
  }
  in.runtime_bytes += EvaluationBytes() + RowSlackBytes(in.budget_bytes);
  in.keys_per_step = static_cast<uint64_t>(cfg_.train.batch) * tables_->tables();
  in.step_record_bytes = static_cast<uint64_t>(cfg_.train.batch) * rec_.bytes();
  in.row_bytes = tables_->row_bytes();
  in.total_rows = tables_->total_rows();
  uint64_t ids = 0;  // raw ids: at most one row per id of the data
  for (const auto& [split, records] : dataset_.manifest().samples) ids += records * tables_->tables();
  in.max_rows = tables_->raw_ids() ? ids : in.total_rows;
  in.raw_ids = tables_->raw_ids();
  in.rocksdb = rocksdb_;
  in.oracle = sc.planner != PlannerKind::kLru;  // auto: ChoosePlanner decides
  in.window = static_cast<uint32_t>(sc.window);
  // On a device step t + 1 is made ready before step t has computed: its plan must not evict
  // step t's rows (run-ahead at least 1).
  in.run_ahead = static_cast<uint32_t>(std::max(sc.run_ahead, acc_ != nullptr ? 1 : 0));
  in.io_queue_depth = static_cast<uint64_t>(cfg_.io.EffectiveQueueDepth());
  in.io_merge_max_bytes = cfg_.io.merge_max.value;
  in.kv_bytes = KvTable::BudgetBytes(KvOptions(sc, false));
  SLUICE_ASSIGN_OR_RETURN(in.sampled_rows_per_step, SampleDistinctRowsPerStep());
  in.cache_rows = sc.cache_rows;
  in.write_back_share = sc.write_back_share;
  in.write_back_rows = sc.write_back_rows;
  in.preload_share = sc.preload_share;
  in.preload_horizon = static_cast<uint32_t>(sc.preload_horizon);
  return in;
}

Status DlrmTask::SetUpStorage(bool fresh, const std::string& rows_from) {
  if (in_memory_) return SetUpInMemory(rows_from);
  fs::create_directories(tables_dir_);
  SLUICE_RETURN_IF_ERROR(SizeQueueDepth(fresh, rows_from));
  SLUICE_ASSIGN_OR_RETURN(RowPlanInput in, PlanInput());
  planner_ = cfg_.storage.planner;
  lookahead_ = std::string(EnumName(planner_)) + (in.preload_share > 0 ? " with read-ahead" : "") + " (configured)";
  if (planner_ == PlannerKind::kAuto) SLUICE_RETURN_IF_ERROR(ChoosePlanner(fresh, rows_from, in));
  SLUICE_RETURN_IF_ERROR(SizeWindow(in));
  const bool keeps = rows_from.empty() && KeepsFirstRows(in.oracle);
  if (keeps) in.runtime_bytes += (tables_->total_rows() + 63) / 64 * 8;  // the bitmap
  SLUICE_ASSIGN_OR_RETURN(plan_, PlanRowMemory(in));
  if (in.oracle && cfg_.storage.window != 0 && int64_t{plan_.window} < int64_t{cfg_.storage.window}) {
    window_line_ = "window " + std::to_string(plan_.window) + " steps (storage.window " +
                   std::to_string(cfg_.storage.window) +
                   " shortened: a longer window's ring of steps does not fit the budget beside the "
                   "steps in flight; storage.window 0 sizes it by simulated loads)";
  }
  run_ahead_ = plan_.run_ahead;
  RowCacheOptions co = RowCacheOptionsFor(plan_, in.oracle ? PlannerKind::kOracle : PlannerKind::kLru);
  if (keeps) {
    SLUICE_RETURN_IF_ERROR(ChooseKeptRows(static_cast<uint64_t>(cfg_.storage.carry_rows * static_cast<double>(plan_.cache_rows))));
    if (kept_steps_ > 0) co.keep = &kept_;
    co.keep_offsets = &tables_->offsets();
  }
  // The start-up simulations' memory, freed, goes back before the cache takes its own: the
  // allocator keeps free pages (train/allocator.h), and they would stay resident beside it.
  ReleaseFreeHeap();
  cache_ = std::make_unique<RowCache>(co);
  arena_ = AlignedBuffer(plan_.cache_rows * tables_->row_bytes(), 4096);
  SLUICE_RETURN_IF_ERROR(OpenBacking(fresh, rows_from));
  memory_plan_ = DescribePlan();
  return Status::Ok();
}

// A checkpoint's sharded tables to read out of core are assembled into one row file in the
// temporary directory ($TMPDIR, AssembleRowShards), removed by name once opened.
Status DlrmTask::OpenBacking(bool fresh, const std::string& rows_from) {
  const bool reading = !rows_from.empty();
  if (rocksdb_) {
    const std::string path = (reading ? rows_from : tables_dir_) + "/kv";
    if (fresh) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
    SLUICE_ASSIGN_OR_RETURN(kv_, KvTable::Open(path, tables_->row_bytes(),
                                               KvOptions(cfg_.storage, reading)));
    backing_ = std::make_unique<KvBacking>(kv_.get(), Init());
    return Status::Ok();
  }
  std::string path = tables_dir_ + "/rows.bin";
  if (reading && CheckpointRows::Sharded(rows_from, "rows.bin")) {
    SLUICE_ASSIGN_OR_RETURN(path, AssembleRowShards(rows_from, "rows.bin", tables_->row_bytes(), tables_->total_rows()));
  } else if (reading) {
    path = rows_from + "/rows.bin";
  } else if ((fresh && !created_table_) || !fs::exists(path)) {
    SLUICE_RETURN_IF_ERROR(CreateInitialRowFile(path, tables_->row_bytes(), tables_->offsets(),
                                                Init(), cfg_.io));
  }
  Result<std::unique_ptr<RowFile>> opened = RowFile::Open(path, tables_->row_bytes(), tables_->total_rows(),
                                                          !reading, RowFileOptionsFrom(cfg_.io));
  if (reading && path != rows_from + "/rows.bin") {  // assembled: open (or not), so no longer needed by name
    std::error_code ec;
    fs::remove(path, ec);
  }
  SLUICE_ASSIGN_OR_RETURN(row_file_, std::move(opened));
  // A fresh table holds initial rows only; a restored or evaluated one may hold any.
  backing_ = std::make_unique<RowFileBacking>(row_file_.get(), &tables_->offsets(), Init(),
                                              /*all_written=*/!fresh || reading,
                                              plan_.staging_rows);
  return Status::Ok();
}

Result<uint64_t> DlrmTask::ForFirstSteps(uint64_t steps, const std::function<bool(const RowBatch&)>& each) {
  SLUICE_ASSIGN_OR_RETURN(RecordSource source, Source("train", 0));
  RowBatch b;
  RowDeduper dedupe;
  for (uint64_t t = 0; t < std::min(source.steps(), steps); ++t) {
    SLUICE_ASSIGN_OR_RETURN(bool more, source.Fill(t, b));
    if (!more) break;
    if (dp_ != nullptr) KeepOwnedKeys(b);  // the rank's cache sees its own rows only
    dedupe.Dedupe(b);
    if (!each(b)) break;
  }
  return source.steps();
}

Result<std::vector<std::vector<RowKey>>> DlrmTask::FirstStepsRows(uint64_t steps, uint32_t sample_every) {
  std::vector<std::vector<RowKey>> out;
  SLUICE_RETURN_IF_ERROR(ForFirstSteps(steps, [&](const RowBatch& b) {
                           auto& rows = out.emplace_back();
                           for (const RowKey& k : b.unique) {
                             if (InRowSample(k, sample_every)) rows.push_back(k);
                           }
                           return true;
                         }).status());
  return out;
}

bool DlrmTask::KeepsFirstRows(bool oracle) const {
  return oracle && cfg_.storage.carry_over && cfg_.storage.carry_rows > 0 && cfg_.train.epochs > 1 &&
         !tables_->raw_ids() && tables_->total_rows() > 0;
}

// Every epoch reads the samples in one order, so the next epoch starts with this one's first
// steps: their rows are the ones to keep (steps whole, in order, while they fit).
Status DlrmTask::ChooseKeptRows(uint64_t most) {
  const std::vector<uint64_t>& offsets = tables_->offsets();
  kept_.assign((tables_->total_rows() + 63) / 64, 0);
  kept_rows_ = kept_steps_ = 0;
  std::vector<uint64_t> fresh;
  SLUICE_ASSIGN_OR_RETURN(const uint64_t steps, ForFirstSteps(~uint64_t{0}, [&](const RowBatch& b) {
                            fresh.clear();
                            for (const RowKey& k : b.unique) {
                              const uint64_t row = offsets[k.table] + k.id;
                              if (!(kept_[row / 64] >> (row % 64) & 1)) fresh.push_back(row);
                            }
                            if (kept_rows_ + fresh.size() > most) return false;
                            for (uint64_t row : fresh) kept_[row / 64] |= uint64_t{1} << (row % 64);
                            kept_rows_ += fresh.size();
                            ++kept_steps_;
                            return true;
                          }));
  // Where only a few steps' rows fit, the next epoch's start is a small part of its loads and
  // holding them through the epoch costs more loads than it saves (docs/recommendation.md).
  if (kept_steps_ < kMinKeptSteps && kept_steps_ < steps) {
    std::vector<uint64_t>().swap(kept_);
    kept_rows_ = kept_steps_ = 0;
  }
  return Status::Ok();
}

Status DlrmTask::SizeQueueDepth(bool fresh, const std::string& rows_from) {
  if (cfg_.io.queue_depth != 0) return Status::Ok();
  cfg_.io.queue_depth = IoConfig::kDefaultQueueDepth;
  if (rocksdb_ || !rows_from.empty()) return Status::Ok();  // nothing to probe, or only reading
  const std::string path = tables_dir_ + "/rows.bin";
  if (fresh || !fs::exists(path)) {
    SLUICE_RETURN_IF_ERROR(CreateInitialRowFile(path, tables_->row_bytes(), tables_->offsets(), Init(), cfg_.io));
    created_table_ = true;
  }
  SLUICE_ASSIGN_OR_RETURN(depth_choice_, ProbeQueueDepth(path, 0, RowFile::FileBytes(tables_->row_bytes(), tables_->total_rows()),
                                                         cfg_.io, cfg_.storage.budget.value));
  cfg_.io.queue_depth = static_cast<int>(depth_choice_->depth);
  return Status::Ok();
}

Status DlrmTask::ChoosePlanner(bool fresh, const std::string& rows_from, RowPlanInput& in) {
  const bool applies = !rocksdb_ && !tables_->raw_ids() && rows_from.empty() && acc_ == nullptr;
  const double share = cfg_.storage.preload_share > 0 ? cfg_.storage.preload_share : 0.25;
  RowPlanInput plain = in, ahead = in;
  plain.oracle = ahead.oracle = false, plain.preload_share = 0, ahead.preload_share = share;
  Result<RowMemoryPlan> p = PlanRowMemory(plain), a = PlanRowMemory(ahead);
  if (!applies || !p.ok() || !a.ok() || a->preload_rows == 0 || p->cache_rows >= in.total_rows) {
    planner_ = PlannerKind::kOracle, in.oracle = true, in.preload_share = 0;
    lookahead_ = "oracle without read-ahead (auto: " +
                 std::string(!applies ? "read-ahead needs the row file of dense tables on the host"
                             : p.ok() && p->cache_rows >= in.total_rows ? "the cache holds every row"
                                                                        : "no memory for read-ahead") + ")";
    return Status::Ok();
  }
  const std::string path = tables_dir_ + "/rows.bin";
  if ((fresh && !created_table_) || !fs::exists(path)) {
    SLUICE_RETURN_IF_ERROR(CreateInitialRowFile(path, tables_->row_bytes(), tables_->offsets(), Init(), cfg_.io));
    created_table_ = true;
  }
  const auto start = std::chrono::steady_clock::now();
  LookaheadInput li;
  // A sample of about 20,000 cached rows keeps their reuse (SHARDS) over the first 512 steps.
  li.sample_every = static_cast<uint32_t>(std::clamp<uint64_t>(p->cache_rows / 20000, 1, 64));
  li.fresh = fresh;
  SLUICE_ASSIGN_OR_RETURN(li.steps, FirstStepsRows(512, li.sample_every));
  // Without read-ahead the planner is the oracle: its cache and write-back buffer beside its
  // shortest window's ring (the most it leaves them), else LRU's.
  RowPlanInput oracle = plain;
  oracle.oracle = true;
  oracle.window = cfg_.storage.window != 0 ? static_cast<uint32_t>(cfg_.storage.window) : kShortestWindow;
  Result<RowMemoryPlan> o = PlanRowMemory(oracle);
  const RowMemoryPlan& op = o.ok() ? *o : *p;
  li.cache_rows_plain = op.cache_rows, li.staged_rows_plain = op.staging_rows;
  li.cache_rows_read_ahead = a->cache_rows, li.staged_rows_read_ahead = a->staging_rows;
  li.read_ahead_rows = a->preload_rows;
  li.horizon = static_cast<uint32_t>(cfg_.storage.preload_horizon);
  li.table_bytes = RowFile::FileBytes(tables_->row_bytes(), tables_->total_rows());
  {
    SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kRead, cfg_.io.direct));
    SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
    SLUICE_ASSIGN_OR_RETURN(li.disk, ProbeDisk(*io, file, li.table_bytes, 0.3));
  }
  choice_ = ChooseLookahead(li);
  choice_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  planner_ = choice_->planner;
  in.oracle = planner_ == PlannerKind::kOracle;
  in.preload_share = choice_->read_ahead ? share : 0;
  char took[64];
  std::snprintf(took, sizeof took, " (auto, %.1f s at start-up)", choice_s_);
  lookahead_ = choice_->reason + took;
  return Status::Ok();
}

Status DlrmTask::SizeWindow(RowPlanInput& in) {
  if (cfg_.storage.window != 0) return Status::Ok();
  constexpr uint32_t kDefault = 16;
  in.window = kDefault;  // the plan shrinks it when its ring does not fit
  if (!in.oracle) return Status::Ok();
  std::vector<WindowCandidate> candidates;
  for (const uint32_t w : {kShortestWindow, 4u, 8u, 16u, 32u, 64u}) {
    RowPlanInput t = in;
    t.window = w;
    Result<RowMemoryPlan> p = PlanRowMemory(t);
    if (!p.ok() || p->window < w) break;  // its ring does not fit: nor does a longer one's
    if (!in.raw_ids && p->cache_rows >= in.total_rows) {
      window_line_ = "window " + std::to_string(kDefault) + " steps (auto: the cache holds every row)";
      return Status::Ok();
    }
    WindowCandidate c{w, p->cache_rows, 0};
    c.staged_rows = p->staging_rows;
    candidates.push_back(c);
  }
  if (candidates.empty()) return Status::Ok();  // the plan says what does not fit
  const auto start = std::chrono::steady_clock::now();
  // A sample of about 20,000 cached rows keeps their reuse (SHARDS) over the first 512 steps.
  const auto every = static_cast<uint32_t>(std::clamp<uint64_t>(candidates.back().cache_rows / 20000, 1, 64));
  SLUICE_ASSIGN_OR_RETURN(auto steps, FirstStepsRows(512, every));
  // The disk as the lookahead's choice measured it (none when the planner was not chosen:
  // the fewest loads then).
  const DiskProbe disk = choice_ ? choice_->disk : DiskProbe{};
  window_choice_ = ChooseWindow(steps, every, in.run_ahead, std::move(candidates), disk,
                                RowFile::FileBytes(tables_->row_bytes(), tables_->total_rows()));
  in.window = window_choice_->window;
  char took[48];
  std::snprintf(took, sizeof took, " (%.1f s at start-up)",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  window_line_ = window_choice_->reason + took;
  return Status::Ok();
}

// What an evaluation holds a sample of its split: its score and label, the ranking's order
// (AreaUnderRoc) and, across processes, the gathered scores and labels. The largest split other
// than training's, at most eval.max_samples of it in training.
uint64_t DlrmTask::EvaluationBytes() const {
  constexpr uint64_t kSampleBytes = 8 + 8 + 8;
  uint64_t most = 0;
  for (const auto& [split, records] : dataset_.manifest().samples) {
    if (split != "train") most = std::max<uint64_t>(most, records);
  }
  if (purpose_ == Purpose::kTrain && cfg_.eval.max_samples > 0) most = std::min<uint64_t>(most, cfg_.eval.max_samples);
  return most * kSampleBytes;
}

uint64_t DlrmTask::StepBytes() const {
  if (dp_ == nullptr) return net_->StepBytes();
  const auto batch = static_cast<uint64_t>(cfg_.train.batch), tables = static_cast<uint64_t>(rec_.sparse);
  const auto v = static_cast<uint64_t>(dp_->shards()), mine = static_cast<uint64_t>(dp_->end_shard() - dp_->first_shard());
  const uint64_t my_uses = std::min(batch, mine * ((batch + v - 1) / v)) * tables;
  return net_->StepBytes() + ShardedRows::StepBytes(batch * tables, my_uses, static_cast<uint64_t>(tables_->width()),
                                                    dp_->world_size(), tables_->total_rows());
}

std::string DlrmTask::DescribePlan() const {
  const RowMemoryPlan& p = plan_;
  const uint64_t budget = cfg_.storage.budget.value;
  const uint64_t table_bytes = tables_->total_rows() * tables_->row_bytes();
  std::string s = "out of core (" + std::string(EnumName(cfg_.storage.backend)) + "), budget " + FormatBytes(budget) +
                  ": cache " + FormatCount(static_cast<double>(p.cache_rows)) + " rows (" +
                  FormatBytes(p.cache_bytes) + " with its index" + CacheBelowStepsNote(p) + "), ";
  if (p.staging_rows) {
    s += "write-back buffer " + FormatCount(static_cast<double>(p.staging_rows)) + " rows (" +
         FormatBytes(p.staging_bytes) + "), ";
  }
  if (p.preload_rows) {
    s += "read-ahead " + FormatCount(static_cast<double>(p.preload_rows)) + " rows over " +
         std::to_string(cfg_.storage.preload_horizon) + " steps (" + FormatBytes(p.preload_bytes) + "), ";
  }
  const uint64_t runtime = kRuntimeBytes + (acc_ != nullptr ? acc_->RuntimeHostBytes() : 0);
  s += "runtime " + FormatBytes(runtime) + ", slack " + FormatBytes(RowSlackBytes(budget)) + ", evaluation " +
       FormatBytes(EvaluationBytes()) + ", dense model " +
       FormatBytes(net_->StateBytes()) + ShardGradientsNote(dp_.get()) +
       (acc_ != nullptr ? ", device staging " + FormatBytes(DeviceHostBytes())
                        : ", activations " + FormatBytes(StepBytes())) + ", pipeline " +
       FormatBytes(p.pipeline_bytes) + ", " + EnumName(planner_) + " window " +
       std::to_string(p.window) + " steps, run-ahead " + std::to_string(p.run_ahead);
  if (rocksdb_) s += ", RocksDB caches " + FormatBytes(p.kv_bytes);
  s += table_bytes ? ", tables " + FormatBytes(table_bytes) + " on disk (" +
                         std::to_string(table_bytes * 100 / budget) + "% of the budget)"
                   : ", tables on disk (rows created on first use)";
  return s + "; predicted peak " + FormatBytes(p.predicted_bytes);
}

Status DlrmTask::SyncTables() {
  if (in_memory_) return Status::Ok();  // checkpoints write the rows from memory
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
  SLUICE_RETURN_IF_ERROR(FlushRowCache(*cache_, arena_.data(), tables_->row_bytes(), *backing_, *io));
  return rocksdb_ ? kv_->Flush() : row_file_->Sync();
}

// In-memory rows as a checkpoint file: dense tables in the row file's layout (rows.bin);
// created rows of raw ids as (uint32 table, uint32 0, uint64 id, row) records (rows.kv).
// Streamed in chunks (a copy of the whole table would double the resident set).
Status DlrmTask::WriteMemoryRows(const std::string& path) {
  if (memory_->dense()) return WriteDenseRows(*memory_, path, tables_->total_rows());
  const uint32_t rb = tables_->row_bytes();
  return WriteRowRecords(
      *memory_, path, 16 + rb,
      [rb](const RowKey& k, const std::byte* row, std::byte* out) {
        const uint32_t head[2] = {k.table, 0};
        std::memcpy(out, head, 8);
        std::memcpy(out + 8, &k.id, 8);
        std::memcpy(out + 16, row, rb);
      },
      0);
}

Status DlrmTask::LoadMemoryRows(const std::string& dir) {
  if (memory_->dense()) {
    const uint32_t rb = tables_->row_bytes();
    SLUICE_ASSIGN_OR_RETURN(const CheckpointRows rows, CheckpointRows::Open(dir, "rows.bin", rb, tables_->total_rows()));
    const auto [lo, hi] = RowsToLoad();
    return rows.ReadEach(lo, hi - lo, [&](uint64_t row) { return memory_->Row(KeyOf(row)); });
  }
  const uint32_t rb = tables_->row_bytes();
  const std::string path = dir + "/rows.kv";
  SLUICE_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  const size_t rec = 16 + rb;
  if (bytes.size() % rec != 0) return Corruption(path + ": size is not a whole number of rows");
  for (size_t at = 0; at < bytes.size(); at += rec) {
    uint32_t head[2];
    uint64_t id;
    std::memcpy(head, bytes.data() + at, 8);
    std::memcpy(&id, bytes.data() + at + 8, 8);
    if (head[0] >= tables_->tables()) {
      return Corruption(path + ": row of table " + std::to_string(head[0]) + " out of range");
    }
    std::memcpy(memory_->Row(RowKey{id, head[0]}), bytes.data() + at + 16, rb);
  }
  return Status::Ok();
}

Status DlrmTask::ReadGlobalRows(IoSession& io, uint64_t first, uint64_t count, std::byte* out) {
  const uint32_t rb = tables_->row_bytes();
  if (!in_memory_) return row_file_->ReadRange(io, first, count, out);
  for (uint64_t i = 0; i < count; ++i) std::memcpy(out + i * rb, memory_->Row(KeyOf(first + i)), rb);
  return Status::Ok();
}

Status DlrmTask::WriteGlobalRows(IoSession& io, uint64_t first, uint64_t count, const std::byte* rows) {
  const uint32_t rb = tables_->row_bytes();
  if (!in_memory_) return row_file_->WriteRange(io, first, count, rows);
  for (uint64_t i = 0; i < count; ++i) std::memcpy(memory_->Row(KeyOf(first + i)), rows + i * rb, rb);
  return Status::Ok();
}

std::pair<uint64_t, uint64_t> DlrmTask::RowsToLoad() const {
  if (dp_ != nullptr && dp_->group() != nullptr) return {own_begin_, own_end_};
  return {0, tables_->total_rows()};
}

// The io session is made at the first read, inside the collective (after its barrier), so a
// rank that cannot make one still reports to rank 0.
Status DlrmTask::WithGlobalRows(const std::function<Status(const RowRangeReader&)>& use) {
  std::unique_ptr<IoSession> io;
  return use([&](uint64_t at, uint64_t n, std::byte* out) -> Status {
    if (io == nullptr) {
      SLUICE_ASSIGN_OR_RETURN(io, IoSession::Create(cfg_.io));
    }
    return ReadGlobalRows(*io, at, n, out);
  });
}

// A rank other than 0: its shard into the checkpoint's directory once rank 0 has made it.
Status DlrmTask::SaveShard(const std::string& checkpoint_dir) {
  if (dp_ == nullptr || dp_->group() == nullptr) return Status::Ok();
  SLUICE_RETURN_IF_ERROR(SyncTables());
  return WithGlobalRows([&](const RowRangeReader& read) {
    return SendRowShard(*dp_, checkpoint_dir, TableFileName(), own_begin_, own_end_ - own_begin_,
                        tables_->row_bytes(), read);
  });
}

Status DlrmTask::Save(CheckpointWriter& writer) {
  SLUICE_RETURN_IF_ERROR(SyncTables());
  const std::string tables = TableFileName();
  if (dp_ != nullptr && dp_->group() != nullptr) {
    SLUICE_RETURN_IF_ERROR(WithGlobalRows([&](const RowRangeReader& read) {
      return CollectRowShards(*dp_, writer, tables, owner_bounds_, tables_->row_bytes(), read);
    }));
  } else if (in_memory_) {
    SLUICE_RETURN_IF_ERROR(WriteMemoryRows(writer.PathOf(tables)));
    SLUICE_RETURN_IF_ERROR(writer.Record(tables));
  } else if (rocksdb_) {
    SLUICE_RETURN_IF_ERROR(kv_->Checkpoint(writer.PathOf(tables)));
    SLUICE_RETURN_IF_ERROR(writer.Record(tables));
  } else {
    SLUICE_RETURN_IF_ERROR(writer.CopyIn(row_file_->path(), tables, &row_file_->dirty()));
  }
  SLUICE_RETURN_IF_ERROR(SaveTorch(writer, "dense.pt", net_));
  return SaveTorch(writer, "dense_optimizer.pt", *opt_);
}

Status DlrmTask::ExportRawTables(const std::string& dir) {
  const uint32_t tables = tables_->tables(), dim = tables_->dim();
  if (memory_ == nullptr) {
    return FailedPrecondition("export of raw-id tables from RocksDB is not supported yet; "
                              "train with storage.mode: in_memory or ids: modulo/vocab");
  }
  std::vector<std::vector<uint64_t>> ids(tables);
  std::vector<std::vector<float>> rows(tables);
  memory_->ForEach([&](const RowKey& k, std::byte* row) {
    ids[k.table].push_back(k.id);
    const float* f = reinterpret_cast<const float*>(row);
    rows[k.table].insert(rows[k.table].end(), f, f + dim);
  });
  for (uint32_t t = 0; t < tables; ++t) {
    const std::string base = dir + "/table_" + std::to_string(t);
    const auto n = static_cast<int64_t>(ids[t].size());
    SLUICE_RETURN_IF_ERROR(WriteNpy(base + ".npy", "<f4", {n, dim}, rows[t].data(), rows[t].size() * 4));
    SLUICE_RETURN_IF_ERROR(WriteNpy(base + "_ids.npy", "<u8", {n}, ids[t].data(), ids[t].size() * 8));
  }
  return Status::Ok();
}

// Every row of table t through the reading storage, in id order.
Status DlrmTask::ExportTable(uint32_t t, const std::string& dir) {
  const uint32_t rb = tables_->row_bytes(), dim = tables_->dim();
  const uint64_t n = tables_->offsets()[t + 1] - tables_->offsets()[t];
  SLUICE_ASSIGN_OR_RETURN(auto io, IoSession::Create(cfg_.io));
  std::vector<float> out(n * dim);
  constexpr uint64_t kChunk = 4096;
  std::vector<RowKey> keys;
  std::vector<std::byte> buf(kChunk * rb);
  for (uint64_t lo = 0; lo < n; lo += kChunk) {
    const uint64_t c = std::min(kChunk, n - lo);
    keys.clear();
    for (uint64_t i = 0; i < c; ++i) keys.push_back(RowKey{lo + i, t});
    if (memory_ != nullptr) {
      for (uint64_t i = 0; i < c; ++i) std::memcpy(buf.data() + i * rb, memory_->Row(keys[i]), rb);
    } else {
      SLUICE_RETURN_IF_ERROR(backing_->Read(*io, keys, buf.data()));
    }
    for (uint64_t i = 0; i < c; ++i) {
      std::memcpy(out.data() + (lo + i) * dim, buf.data() + i * rb, dim * 4);
    }
  }
  const std::string base = dir + "/table_" + std::to_string(t);
  SLUICE_RETURN_IF_ERROR(WriteNpy(base + ".npy", "<f4", {static_cast<int64_t>(n), dim}, out.data(),
                                  out.size() * 4));
  if (!tables_->has_vocab()) return Status::Ok();
  std::vector<uint64_t> ids(n, 0);
  for (const auto& [raw, row_id] : tables_->vocab(t)) ids[row_id] = raw;
  return WriteNpy(base + "_ids.npy", "<u8", {static_cast<int64_t>(n)}, ids.data(), ids.size() * 8);
}

Status DlrmTask::Export(const std::string& dir) {
  if (tables_->raw_ids()) {
    SLUICE_RETURN_IF_ERROR(ExportRawTables(dir));
  } else {
    for (uint32_t t = 0; t < tables_->tables(); ++t) SLUICE_RETURN_IF_ERROR(ExportTable(t, dir));
  }
  std::ostringstream dense;
  torch::save(net_, dense);
  return WriteFileAtomic(dir + "/dense.pt", dense.str());
}

void DlrmTask::SummarizeCache(RunSummary& s) const {
  const RowCacheStats cs = cache_->stats();
  const double steps = std::max<double>(1.0, static_cast<double>(cs.steps));
  const uint64_t reads = backing_->rows_read();
  std::ostringstream line;
  line << "cache: " << cs.steps << " steps, " << FormatCount(cs.accesses / steps)
       << " distinct rows per step, hit rate " << (cs.accesses ? 100.0 * cs.hits / cs.accesses : 0)
       << "%, loads " << cs.loads << " (" << FormatCount(cs.loads / steps) << " per step), write-backs "
       << cs.write_backs << " (" << FormatCount(cs.write_backs / steps) << " per step), rows read from disk "
       << reads << " (" << FormatCount(reads / steps)
       << " per step; the other loads were rows never written, made from the seed)";
  s.Line(line.str());
  SummarizeDrainedSteps(s, cs.drained_steps);
  s.Set("cache", "steps", cs.steps), s.Set("cache", "capacity_rows", plan_.cache_rows);
  s.Set("cache", "distinct_rows_per_step", cs.accesses / steps);
  s.Set("cache", "hit_rate", cs.accesses ? static_cast<double>(cs.hits) / cs.accesses : 0.0);
  s.Set("cache", "loads", cs.loads), s.Set("cache", "loads_per_step", cs.loads / steps);
  s.Set("cache", "write_backs", cs.write_backs);
  s.Set("cache", "write_backs_per_step", cs.write_backs / steps);
  s.Set("cache", "rows_read", reads), s.Set("cache", "rows_read_per_step", reads / steps);
}

namespace {

void SummarizeStaging(const WriteBackBuffer& buffer, RunSummary& s) {
  const WriteBackStats& ws = buffer.stats();
  const uint64_t sweeps = ws.sweeps + ws.passes;
  std::ostringstream line;
  line << "write-back buffer: " << ws.rows_staged << " rows staged, " << sweeps << " sweeps ("
       << ws.passes << " with a read-ahead pass) wrote " << ws.rows_swept << " rows ("
       << FormatCount(sweeps ? static_cast<double>(ws.rows_swept) / sweeps : 0)
       << " per sweep; a row staged again before its sweep is written once)";
  if (ws.reads_only > 0) line << "; " << ws.reads_only << " read-ahead passes only read (too few staged rows)";
  s.Line(line.str());
  s.Set("write_back_buffer", "rows_staged", ws.rows_staged), s.Set("write_back_buffer", "sweeps", sweeps);
  s.Set("write_back_buffer", "rows_swept", ws.rows_swept);
}

void SummarizePreload(const RowPreloaderStats& ps, double steps, RunSummary& s) {
  std::ostringstream line;
  line << "read-ahead: " << ps.passes << " region passes read " << ps.rows_read << " rows ("
       << FormatCount(ps.rows_read / steps) << " per step); loads took " << ps.rows_taken << ", "
       << ps.rows_expired << " went unused (the cache had them), " << ps.rows_left
       << " wanted rows found no room; at most " << ps.peak_held << " held";
  s.Line(line.str());
  s.Set("read_ahead", "passes", ps.passes), s.Set("read_ahead", "rows_read", ps.rows_read);
  s.Set("read_ahead", "rows_taken", ps.rows_taken);
}

}  // namespace

// The out-of-core run's choices made at start-up: planner, window, io depth, kept rows.
void DlrmTask::SummarizeLookahead(RunSummary& s) const {
  s.Line("  lookahead: " + lookahead_);
  if (!window_line_.empty() && planner_ == PlannerKind::kOracle) s.Line("  lookahead " + window_line_);
  SummarizeQueueDepth(s, cfg_.io.EffectiveQueueDepth(), depth_choice_ ? &*depth_choice_ : nullptr);
  s.Set("lookahead", "window", uint64_t{plan_.window});
  s.Set("lookahead", "window_chosen", window_choice_.has_value());
  if (window_choice_) {
    std::string loads = "{";
    for (const WindowCandidate& w : window_choice_->candidates) {
      loads += (loads.size() > 1 ? "," : "") + ("\"" + std::to_string(w.window) + "\":") +
               (std::isinf(w.loads) ? std::string("null") : std::to_string(w.loads));
    }
    s.SetRaw("lookahead", "window_simulated_loads", loads + "}");
  }
  s.Set("lookahead", "planner", std::string(EnumName(planner_)));
  s.Set("cache", "kept_rows", kept_rows_), s.Set("cache", "kept_steps", kept_steps_);
  if (kept_steps_ > 0) {
    char share[32];
    std::snprintf(share, sizeof share, "%g", cfg_.storage.carry_rows);
    s.Line("  cache keeps the " + FormatCount(static_cast<double>(kept_rows_)) + " rows of the epoch's first " +
           std::to_string(kept_steps_) + " steps for the next epoch (storage.carry_rows " + share +
           " of the cache)");
  }
  s.Set("lookahead", "read_ahead", plan_.preload_rows > 0);
  s.Set("lookahead", "chosen", cfg_.storage.planner == PlannerKind::kAuto);
  if (choice_) {
    s.Set("lookahead", "predicted_random_s", choice_->random_s);
    s.Set("lookahead", "predicted_read_ahead_s", choice_->read_ahead_s);
    s.Set("lookahead", "simulated_reads_per_step", choice_->reads_plain);
    s.Set("lookahead", "simulated_reads_per_step_read_ahead", choice_->reads_read_ahead);
    s.Set("lookahead", "predicted_write_back_s", choice_->write_back_plain_s);
    s.Set("lookahead", "predicted_write_back_read_ahead_s", choice_->write_back_read_ahead_s);
    s.Set("lookahead", "simulated_evictions_per_step", choice_->evictions_plain);
    s.Set("lookahead", "simulated_evictions_per_step_read_ahead", choice_->evictions_read_ahead);
    s.Set("lookahead", "read_ahead_rows", choice_->read_ahead_rows);
    s.Set("lookahead", "disk_random_reads_per_s", choice_->disk.random_reads_per_s);
    s.Set("lookahead", "disk_bytes_per_s", choice_->disk.sequential_bytes_per_s);
    s.Set("lookahead", "probe_s", choice_->disk.seconds);
    s.Set("lookahead", "choice_s", choice_s_);
  }
}

void DlrmTask::Summarize(RunSummary& s) const {
  std::ostringstream line;
  line << "compute thread: waiting for rows " << time_.wait_s << " s, gather " << time_.gather_s
       << " s, forward+backward+dense update " << time_.compute_s << " s, row update "
       << time_.update_s << " s";
  s.Line(line.str());
  line.str("");
  line << "prefetcher: reading+dedupe " << read_time_.busy_s << " s, planning " << plan_time_.busy_s
       << " s, io " << io_time_.busy_s << " s, io waiting for compute " << io_time_.wait_s << " s";
  s.Line(line.str());
  s.Set("time", "io_wait_s", time_.wait_s), s.Set("time", "gather_s", time_.gather_s);
  s.Set("time", "compute_s", time_.compute_s), s.Set("time", "update_s", time_.update_s);
  s.Set("prefetcher", "read_s", read_time_.busy_s), s.Set("prefetcher", "plan_s", plan_time_.busy_s);
  s.Set("prefetcher", "io_s", io_time_.busy_s), s.Set("prefetcher", "io_wait_s", io_time_.wait_s);
  s.Set("prefetcher", "rows_loaded", rows_loaded_), s.Set("prefetcher", "rows_written", rows_written_);
  SummarizeEpochStartLoads(s, "cache", "rows", epoch_start_loads_);
  if (dp_ != nullptr) SummarizeDataParallel(*dp_, tables_->total_rows(), s);
  SummarizeEvaluationSteps(eval_steps_, SplitsEvaluation(), s);
  if (!in_memory_) SummarizeLookahead(s);
  s.Set("memory", "mode", in_memory_ ? "in_memory" : "out_of_core");
  s.Set("memory", "budget_bytes", in_memory_ ? uint64_t{0} : cfg_.storage.budget.value);
  s.Set("memory", "predicted_bytes", plan_.predicted_bytes);
  s.Set("memory", "write_back_buffer_rows", plan_.staging_rows);
  if (device_rows_ != nullptr) SummarizeDevice(s, *acc_, *device_rows_, device_wall_s_);
  if (!cache_) return;
  SummarizeCache(s);
  const auto* rf = dynamic_cast<const RowFileBacking*>(backing_.get());
  if (rf != nullptr && rf->staging() != nullptr) SummarizeStaging(*rf->staging(), s);
  const double steps = std::max<double>(1.0, static_cast<double>(cache_->stats().steps));
  SummarizeDisk(s, "loads and write-backs", io_requests_, io_bytes_, steps);
  if (rf != nullptr && rf->preload_stats().passes > 0) SummarizePreload(rf->preload_stats(), steps, s);
  const double reads_per_step = static_cast<double>(backing_->rows_read()) / steps;
  // (planner auto weighed read-ahead already: its line says why not)
  if (rf != nullptr && plan_.preload_rows == 0 && reads_per_step >= 1000 && !choice_) {
    s.Line("hint: " + FormatCount(reads_per_step) + " random disk reads per step; "
           "storage.preload_share=0.25 reads the rows ahead region by region instead "
           "(docs/recommendation.md)");
  }
}

}  // namespace sluice
