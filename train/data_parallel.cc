#include "train/data_parallel.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "common/clock.h"
#include "common/units.h"
#include "train/checkpoint_store.h"
#include "train/run_summary.h"
#include "train/dist.h"

namespace sluice {

DataParallel::DataParallel(DistGroup* group, int virtual_shards)
    : group_(group), shards_(std::max(1, virtual_shards)) {
  if (group_ != nullptr) rank_ = group_->rank(), world_ = group_->world_size();
}

int DataParallel::first_shard() const { return shards_ * rank_ / world_; }
int DataParallel::end_shard() const { return shards_ * (rank_ + 1) / world_; }

std::pair<uint64_t, uint64_t> DataParallel::ShardSamples(int v, int shards, uint64_t n) {
  const auto s = static_cast<uint64_t>(shards), k = static_cast<uint64_t>(v);
  return {n * k / s, n * (k + 1) / s};
}

std::pair<uint64_t, uint64_t> DataParallel::RowRange(int rank, int world, uint64_t rows) {
  const auto r = static_cast<uint64_t>(rank), n = static_cast<uint64_t>(world);
  return {rows * r / n, rows * (r + 1) / n};
}

bool SendsRowsAhead(const DataParallel* dp, RowPrefetch setting) {
  if (dp == nullptr || dp->group() == nullptr || dp->world_size() == 1) return false;
  return setting == RowPrefetch::kOn || (setting == RowPrefetch::kAuto && dp->group()->machines() > 1);
}

Status DataParallel::Collective(const char* what, const std::function<Status()>& run) {
  const uint64_t n = ++collectives_;
  const Status s = run();
  if (s.ok() || s.code() != StatusCode::kUnavailable) return s;  // not the network's: said as it is
  const std::string missing = group_->Missing();
  if (missing.empty()) return s;
  return Unavailable("rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ": " + missing +
                     " did not exchange " + what + " (collective " + std::to_string(n) +
                     "): died or stopped; resume from the last checkpoint with --resume");
}

Result<std::vector<float>> DataParallel::AllToAll(std::span<const float> send, std::span<const uint64_t> send_counts,
                                                  std::span<const uint64_t> recv_counts, const char* what) {
  if (group_ == nullptr) return std::vector<float>(send.begin(), send.end());
  const auto start = SteadyClock::now();
  uint64_t total = 0, sent = 0;
  for (int r = 0; r < world_; ++r) {
    if (r != rank_) total += recv_counts[static_cast<size_t>(r)], sent += send_counts[static_cast<size_t>(r)];
  }
  std::vector<float> out(total + recv_counts[static_cast<size_t>(rank_)]);
  SLUICE_RETURN_IF_ERROR(Collective(what, [&] { return group_->AllToAll(send, send_counts, out, recv_counts); }));
  bytes_sent_ += sent * 4;
  bytes_received_ += total * 4;
  exchange_s_ += SecondsSince(start);
  return out;
}

Result<std::vector<float>> DataParallel::AllGatherV(std::span<const float> mine, std::span<const uint64_t> sizes,
                                                    const char* what) {
  if (mine.size() != sizes[static_cast<size_t>(rank_)]) {
    return FailedPrecondition(std::string(what) + ": rank " + std::to_string(rank_) + " sends " +
                              std::to_string(mine.size()) + " floats where " +
                              std::to_string(sizes[static_cast<size_t>(rank_)]) + " were expected (a bug)");
  }
  if (group_ == nullptr) return std::vector<float>(mine.begin(), mine.end());
  const auto start = SteadyClock::now();
  const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<float> padded(longest, 0.0f), all(longest * static_cast<uint64_t>(world_));
  std::copy(mine.begin(), mine.end(), padded.begin());
  SLUICE_RETURN_IF_ERROR(Collective(what, [&] { return group_->AllGather(padded, all); }));
  std::vector<float> out;
  uint64_t total = 0;
  for (const uint64_t n : sizes) total += n;
  out.reserve(total);
  for (int r = 0; r < world_; ++r) {
    const float* from = all.data() + static_cast<uint64_t>(r) * longest;
    out.insert(out.end(), from, from + sizes[static_cast<size_t>(r)]);
  }
  bytes_sent_ += longest * 4;
  bytes_received_ += longest * 4 * static_cast<uint64_t>(world_ - 1);
  exchange_s_ += SecondsSince(start);
  return out;
}

Status DataParallel::AllGatherItems(std::span<const uint64_t> counts, uint64_t width, uint64_t round_items,
                                    const PackItems& pack, const UnpackItems& unpack, const char* what) {
  if (group_ == nullptr || width == 0) return Status::Ok();
  round_items = std::max<uint64_t>(round_items, 1);
  const uint64_t longest = *std::max_element(counts.begin(), counts.end());
  std::vector<uint64_t> first(counts.size()), sizes(counts.size());
  std::vector<float> mine;
  const auto me = static_cast<size_t>(rank_);
  for (uint64_t c = 0; c * round_items < longest; ++c) {
    for (size_t q = 0; q < counts.size(); ++q) {
      first[q] = std::min(c * round_items, counts[q]);
      sizes[q] = (std::min(first[q] + round_items, counts[q]) - first[q]) * width;
    }
    mine.resize(sizes[me]);
    if (sizes[me] > 0) SLUICE_RETURN_IF_ERROR(pack(first[me], sizes[me] / width, mine.data()));
    SLUICE_ASSIGN_OR_RETURN(const std::vector<float> all, AllGatherV(mine, sizes, what));
    const float* from = all.data();
    for (size_t q = 0; q < counts.size(); from += sizes[q], ++q) {
      if (q != me && sizes[q] > 0) SLUICE_RETURN_IF_ERROR(unpack(static_cast<int>(q), first[q], sizes[q] / width, from));
    }
  }
  return Status::Ok();
}

Result<DataParallel::PendingAllToAll> DataParallel::StartAllToAll(std::span<const float> send,
                                                                   std::span<const uint64_t> send_counts,
                                                                   std::span<const uint64_t> recv_counts,
                                                                   const char* what) {
  const auto start = SteadyClock::now();
  PendingAllToAll p;
  p.what = what;
  for (int r = 0; r < world_; ++r) {
    if (r != rank_) p.received += recv_counts[static_cast<size_t>(r)], p.sent += send_counts[static_cast<size_t>(r)];
  }
  if (group_ == nullptr) return FailedPrecondition("data parallel: an all-to-all started in one process (a bug)");
  SLUICE_RETURN_IF_ERROR(Collective(what, [&]() -> Status {
    SLUICE_ASSIGN_OR_RETURN(p.op, group_->StartAllToAll(send, send_counts, recv_counts));
    return Status::Ok();
  }));
  exchange_s_ += SecondsSince(start);
  return p;
}

Result<std::vector<float>> DataParallel::FinishAllToAll(PendingAllToAll& p) {
  const auto start = SteadyClock::now();
  std::vector<float> got;
  SLUICE_RETURN_IF_ERROR(Collective(p.what, [&]() -> Status {
    SLUICE_ASSIGN_OR_RETURN(got, group_->FinishAllToAll(*p.op));
    return Status::Ok();
  }));
  p.op.reset();
  bytes_sent_ += p.sent * 4;
  bytes_received_ += p.received * 4;
  exchange_s_ += SecondsSince(start);
  return got;
}

namespace {

// The most shards a rank computes: its part of a round is that many shards' columns.
uint64_t MostShards(int shards, int world) {
  uint64_t most = 0;
  for (int r = 0; r < world; ++r) most = std::max<uint64_t>(most, static_cast<uint64_t>(shards * (r + 1) / world - shards * r / world));
  return most;
}

}  // namespace

uint64_t DataParallel::ExchangeRoundColumns(uint64_t width) const {
  // A rank's part: its shards' columns and its stop wish.
  const uint64_t part = kExchangeRoundFloats / static_cast<uint64_t>(world_);
  return std::clamp<uint64_t>((part - 1) / MostShards(shards_, world_), 1, std::max<uint64_t>(width, 1));
}

uint64_t DataParallel::ExchangeBufferBytes(uint64_t width) const {
  if (world_ == 1) return 0;
  const uint64_t part = MostShards(shards_, world_) * ExchangeRoundColumns(width) + 1;
  return 4 * part * (1 + static_cast<uint64_t>(world_));  // this rank's part and the gathered round
}

Status DataParallel::ExchangeShards(std::span<const float> mine, uint64_t width, const FoldShard& fold) {
  const auto start = SteadyClock::now();
  const bool stop = stop_probe_ && stop_probe_();
  const auto own = static_cast<uint64_t>(end_shard() - first_shard());
  if (!mine.empty() && mine.size() != own * width) {
    return FailedPrecondition("data-parallel exchange: rank " + std::to_string(rank_) + " sends " +
                              std::to_string(mine.size()) + " floats where its " + std::to_string(own) +
                              " shards hold " + std::to_string(own * width) + " (a bug)");
  }
  if (world_ > 1 && mine.empty()) {
    return FailedPrecondition("data-parallel exchange: rank " + std::to_string(rank_) + " sends nothing (a bug)");
  }
  ++exchanges_;
  any_stop_ = stop;
  if (world_ == 1) {  // the folds are the caller's time
    exchange_s_ += SecondsSince(start);
    for (uint64_t v = 0; !mine.empty() && v < own; ++v) fold(static_cast<int>(v), 0, width, mine.data() + v * width);
    return Status::Ok();
  }
  const uint64_t most = MostShards(shards_, world_), columns = ExchangeRoundColumns(width);
  uint64_t first = 0;
  double folded_s = 0;  // the caller's additions: not the exchange's time
  do {  // a payload has a column at least (the loss)
    const uint64_t n = std::min(columns, width - first), part = most * n + 1;
    send_.assign(part, 0.0f);
    for (uint64_t j = 0; j < own; ++j) {
      std::copy_n(mine.data() + j * width + first, n, send_.data() + j * n);
    }
    send_[part - 1] = stop ? 1.0f : 0.0f;
    all_.resize(part * static_cast<uint64_t>(world_));
    SLUICE_RETURN_IF_ERROR(Collective("the shards' gradients", [this] { return group_->AllGather(send_, all_); }));
    const auto folding = SteadyClock::now();
    for (int r = 0; r < world_; ++r) {
      const float* from = all_.data() + static_cast<uint64_t>(r) * part;
      for (int v = shards_ * r / world_; v < shards_ * (r + 1) / world_; ++v, from += n) fold(v, first, n, from);
      any_stop_ = any_stop_ || all_[static_cast<uint64_t>(r + 1) * part - 1] != 0.0f;
    }
    folded_s += SecondsSince(folding);
    bytes_sent_ += part * 4;
    bytes_received_ += part * 4 * static_cast<uint64_t>(world_ - 1);
    first += n;
  } while (first < width);
  exchange_s_ += SecondsSince(start) - folded_s;
  return Status::Ok();
}

Status CheckVirtualShards(int v, int world, int batch, const char* units) {
  if (v == 0) {
    return InvalidArgument("train.virtual_shards is 0: a run across " + std::to_string(world) +
                           " processes cuts each batch into virtual shards (at least one per process, "
                           "e.g. 12) so that every world size trains the same model; set it");
  }
  if (v < world) {
    return InvalidArgument("train.virtual_shards is " + std::to_string(v) + ", below the world size " +
                           std::to_string(world) + ": every process computes at least one shard");
  }
  if (v > batch) {
    return InvalidArgument("train.virtual_shards is " + std::to_string(v) + ", more than the " +
                           std::to_string(batch) + " " + units + " of a batch (train.batch)");
  }
  return Status::Ok();
}

Result<bool> TrainsInShards(bool training, int v, const DistGroup* group, int batch, const char* units,
                            const DeviceConfig& device) {
  if (!training || (v == 0 && group == nullptr)) return false;
  SLUICE_RETURN_IF_ERROR(CheckVirtualShards(v, group != nullptr ? group->world_size() : 1, batch, units));
  if (device.on_device()) {
    return InvalidArgument(std::string("train.virtual_shards with device.type ") + EnumName(device.type) +
                           ": training in virtual shards runs on the CPU only so far");
  }
  return true;
}

void SummarizeEvaluationSteps(const EvalSteps& e, bool across_processes, RunSummary& summary) {
  if (e.steps == 0) return;
  summary.Line("evaluation: this process computed " + std::to_string(e.computed) + " of " + std::to_string(e.steps) +
               " steps in " + std::to_string(e.passes) + (e.passes == 1 ? " pass" : " passes") + (across_processes ? " (the other ranks the rest)" : ""));
  summary.Set("evaluation", "passes", e.passes), summary.Set("evaluation", "steps", e.steps);
  summary.Set("evaluation", "steps_computed", e.computed);
}

void SummarizeDataParallel(const DataParallel& dp, uint64_t rows, RunSummary& s) {
  const double steps = std::max<double>(1.0, static_cast<double>(dp.exchanges()));
  const auto [begin, end] = dp.MyRows(rows);
  std::ostringstream line;
  line << "data parallel: rank " << dp.rank() << " of " << dp.world_size() << ", " << dp.shards()
       << " virtual shards a batch (this rank's: " << dp.first_shard() << "-" << dp.end_shard() - 1
       << "), " << (rows > 0 ? "owns table rows " + std::to_string(begin) + "-" + std::to_string(end - 1) + " of " +
                                    std::to_string(rows)
                              : std::string("no tables to shard"))
       << ", " << FormatBytes(static_cast<uint64_t>(static_cast<double>(dp.bytes_sent()) / steps)) << " sent and "
       << FormatBytes(static_cast<uint64_t>(static_cast<double>(dp.bytes_received()) / steps))
       << " received per step, exchanges " << dp.exchange_s() << " s";
  if (dp.remote_rows() > 0) {
    line << ", " << dp.rows_ahead() << " of " << dp.remote_rows() << " rows from other ranks ("
         << 100.0 * static_cast<double>(dp.rows_ahead()) / static_cast<double>(dp.remote_rows())
         << "%) fetched a step ahead";
  }
  s.Line(line.str());
  s.Set("data_parallel", "remote_rows", dp.remote_rows()), s.Set("data_parallel", "rows_ahead", dp.rows_ahead());
  s.Set("data_parallel", "rank", dp.rank()), s.Set("data_parallel", "world_size", dp.world_size());
  s.Set("data_parallel", "virtual_shards", dp.shards());
  s.Set("data_parallel", "rows_owned", end - begin);
  s.Set("data_parallel", "bytes_sent", dp.bytes_sent()), s.Set("data_parallel", "bytes_received", dp.bytes_received());
  s.Set("data_parallel", "exchange_s", dp.exchange_s()), s.Set("data_parallel", "exchanges", dp.exchanges());
  s.Set("data_parallel", "dense_floats", dp.dense_floats());
  s.Set("data_parallel", "rows_needed_per_step", dp.rows_needed_per_step());
  s.Set("data_parallel", "uses_per_step", dp.uses_per_step());
}

namespace {

// What a rank tells rank 0 of its shard: written (1) or not (0), its bytes and CRC-32.
struct ShardReport {
  uint64_t written = 0, bytes = 0, crc32 = 0;
};
std::span<std::byte> AsBytes(ShardReport& r) { return {reinterpret_cast<std::byte*>(&r), sizeof r}; }

}  // namespace

Status SendRowShard(DataParallel& dp, const std::string& checkpoint_dir, const std::string& table,
                    uint64_t first, uint64_t count, uint32_t row_bytes, const RowRangeReader& read) {
  return dp.Collective("its rows for a checkpoint", [&]() -> Status {
    SLUICE_RETURN_IF_ERROR(dp.group()->Barrier());  // the checkpoint's directory exists
    const std::string path = checkpoint_dir + "/" + RowShardName(table, dp.rank(), dp.world_size());
    Result<FileDigest> d = WriteRowShard(path, first, count, row_bytes, read);
    ShardReport report;
    if (d.ok()) report = {1, d->bytes, d->crc32};
    SLUICE_RETURN_IF_ERROR(dp.group()->Send(AsBytes(report), 0));
    return d.status();
  });
}

Status CollectRowShards(DataParallel& dp, CheckpointWriter& writer, const std::string& table,
                        std::span<const uint64_t> bounds, uint32_t row_bytes, const RowRangeReader& read) {
  const int world = dp.world_size();
  std::vector<FileDigest> digests(static_cast<size_t>(world));
  const Status exchanged = dp.Collective("its rows for a checkpoint", [&]() -> Status {
    SLUICE_RETURN_IF_ERROR(dp.group()->Barrier());
    const std::string path = writer.dir() + "/" + RowShardName(table, 0, world);
    Result<FileDigest> own = WriteRowShard(path, bounds[0], bounds[1] - bounds[0], row_bytes, read);
    Status failed = own.status();
    if (own.ok()) digests[0] = *own;
    for (int r = 1; r < world; ++r) {
      ShardReport report;
      SLUICE_RETURN_IF_ERROR(dp.group()->Recv(AsBytes(report), r));
      if (report.written == 0 && failed.ok()) {
        failed = IoError("rank " + std::to_string(r) + " could not write its rows into the checkpoint "
                         "(its output says why)");
      }
      digests[static_cast<size_t>(r)] = {report.bytes, static_cast<uint32_t>(report.crc32)};
    }
    return failed;
  });
  SLUICE_RETURN_IF_ERROR(exchanged);
  for (int r = 0; r < world; ++r) {
    const FileDigest& d = digests[static_cast<size_t>(r)];
    SLUICE_RETURN_IF_ERROR(writer.Adopt(RowShardName(table, r, world), d.bytes, d.crc32));
  }
  return writer.WriteString(RowShardManifestName(table), RowShardManifest(bounds.back(), row_bytes, bounds, digests));
}

}  // namespace sluice
