#pragma once
// Data-parallel training (docs/distributed.md): every step's global batch is cut into V
// virtual shards, V fixed by the config (train.virtual_shards), whatever the world size. Rank r
// of N computes shards [V r / N, V (r + 1) / N) one by one; the ranks then all-gather each
// shard's loss and dense gradients and add them in shard order, and each row's owner adds its
// use gradients in global use order (below). The sums are the same float operations in the same order at any world
// size, so 1, 2 or 3 processes train bitwise the same model as one process running the V
// shards (with the same compute threads per process: libtorch's and OpenBLAS's results may
// depend on their thread count).
//
// Tables are sharded by row range: rank r of N owns global rows [T r / N, T (r + 1) / N) of the
// T rows of all tables laid end to end (RowRange), keeps them out of core through its own cache
// and planner, and alone updates them. A step's rows come from their owners by all-to-all (each
// rank receives the rows its shards use; those the step before does not use travel during it,
// the others at the step, so no update is missed: train/sharded_rows.h); each
// use gradient goes back to its row's owner by all-to-all, ranks (so uses) in order, and the
// owner sums each row's in global use order. Checkpoints: every rank writes its rows as its
// shard of the checkpoint, rank 0 the manifest (two phases, train/row_checkpoint.h).
//
// Torch-free (the task packs and unpacks its tensors).

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "train/device_config.h"
#include "train/dist.h"
#include "train/dist_config.h"
#include "train/row_checkpoint.h"

namespace sluice {

class CheckpointWriter;
class DistGroup;

class DataParallel {
 public:
  // `group` null: one process (world size 1) running the V shards.
  DataParallel(DistGroup* group, int virtual_shards);

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int shards() const { return shards_; }
  // This rank's shards: [first_shard, end_shard).
  int first_shard() const;
  int end_shard() const;
  // Samples [begin, end) of shard v of a batch of n.
  static std::pair<uint64_t, uint64_t> ShardSamples(int v, int shards, uint64_t n);

  // Global rows [begin, end) rank `rank` owns of `rows`.
  static std::pair<uint64_t, uint64_t> RowRange(int rank, int world, uint64_t rows);
  std::pair<uint64_t, uint64_t> MyRows(uint64_t rows) const { return RowRange(rank_, world_, rows); }
  // The process group (null: one process).
  DistGroup* group() const { return group_; }

  // send_counts[r] floats of `send` to rank r; returns what every rank sent this one, end to end
  // in rank order (recv_counts[r] floats from rank r). One process: `send` itself.
  Result<std::vector<float>> AllToAll(std::span<const float> send, std::span<const uint64_t> send_counts,
                                      std::span<const uint64_t> recv_counts, const char* what);

  // Every rank's `mine` end to end in rank order, `sizes[r]` the floats rank r sends (every rank
  // knows every rank's). One process: `mine` itself.
  Result<std::vector<float>> AllGatherV(std::span<const float> mine, std::span<const uint64_t> sizes,
                                        const char* what);

  // Every rank's items to every rank, in rounds of at most `round_items` items a rank (bounded
  // buffers, whatever the items' total): rank q has counts[q] items of `width` floats (every rank
  // knows every rank's count). pack(k, n, out) writes this rank's items [k, k + n); unpack(q, k,
  // n, from) takes rank q's items [k, k + n) (q != this rank). One process: nothing travels.
  using PackItems = std::function<Status(uint64_t k, uint64_t n, float* out)>;
  using UnpackItems = std::function<Status(int q, uint64_t k, uint64_t n, const float* from)>;
  Status AllGatherItems(std::span<const uint64_t> counts, uint64_t width, uint64_t round_items,
                        const PackItems& pack, const UnpackItems& unpack, const char* what);

  // AllToAll in two halves: started now (`send` copied), finished later while the rank's other
  // work runs in between. Every rank starts and finishes the same ones in the same order.
  struct PendingAllToAll {
    std::shared_ptr<DistGroup::Pending> op;
    uint64_t sent = 0, received = 0;  // floats to and from the other ranks
    const char* what = "";
  };
  Result<PendingAllToAll> StartAllToAll(std::span<const float> send, std::span<const uint64_t> send_counts,
                                        std::span<const uint64_t> recv_counts, const char* what);
  Result<std::vector<float>> FinishAllToAll(PendingAllToAll& pending);

  // Runs a collective step of every rank (`run`: this rank's part, e.g. its sends of a
  // checkpoint's rows); when communication fails, the error names the ranks that died or stopped.
  Status Collective(const char* what, const std::function<Status()>& run);

  // What the runner asks every step: whether this rank wants to stop after it (Ctrl-C, a test's
  // stop hook). ExchangeShards carries every rank's wish, so all ranks stop after the same step.
  void set_stop_probe(std::function<bool()> probe) { stop_probe_ = std::move(probe); }
  bool any_stop() const { return any_stop_; }

  // One step's exchange of the shards' payloads (each `width` floats: a shard's loss and dense
  // gradients), added up in shard order without every shard's payload held at once. The
  // payloads travel in rounds of columns: a round all-gathers columns [first, first + n) of
  // every shard's payload (at most kExchangeRoundFloats gathered), and `fold(v, first, n, from)`
  // takes shard v's, v = 0, 1, ... V - 1 in order, so each column adds the shards in shard order
  // at any world size. `mine`: this rank's shards' payloads end to end (shard first_shard()
  // first). One process: nothing travels, `mine`'s shards are folded in order (a caller that
  // added its shards as it computed them passes none); either way the stop wishes are taken.
  using FoldShard = std::function<void(int v, uint64_t first, uint64_t n, const float* from)>;
  Status ExchangeShards(std::span<const float> mine, uint64_t width, const FoldShard& fold);
  // The most floats a round of ExchangeShards gathers (every rank's part of it together).
  static constexpr uint64_t kExchangeRoundFloats = 4ull << 20;
  // The payload columns a round carries, and the bytes ExchangeShards holds for a step besides the
  // caller's payload (a round's send and gathered buffers; one process: none).
  uint64_t ExchangeRoundColumns(uint64_t width) const;
  uint64_t ExchangeBufferBytes(uint64_t width) const;

  // Bytes this rank sent and received, exchanges (steps), and seconds spent in them (the summary).
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  uint64_t exchanges() const { return exchanges_; }
  double exchange_s() const { return exchange_s_; }
  // Distinct rows this rank's shards used and every rank's row uses, summed over training steps
  // (the summary's means).
  void CountRowsNeeded(uint64_t rows, uint64_t uses) { rows_needed_ += rows, uses_ += uses, ++row_fetches_; }
  // Rows received from other ranks during training, and those of them fetched a step ahead.
  void CountRemoteRows(uint64_t received, uint64_t ahead) { remote_rows_ += received, rows_ahead_ += ahead; }
  uint64_t remote_rows() const { return remote_rows_; }
  uint64_t rows_ahead() const { return rows_ahead_; }
  double rows_needed_per_step() const {
    return row_fetches_ ? static_cast<double>(rows_needed_) / static_cast<double>(row_fetches_) : 0.0;
  }
  double uses_per_step() const {
    return row_fetches_ ? static_cast<double>(uses_) / static_cast<double>(row_fetches_) : 0.0;
  }
  // The dense floats of a shard's payload (P), set by the task.
  void set_dense_floats(uint64_t p) { dense_floats_ = p; }
  uint64_t dense_floats() const { return dense_floats_; }

 private:
  DistGroup* group_;
  int rank_ = 0, world_ = 1, shards_ = 1;
  std::function<bool()> stop_probe_;
  uint64_t collectives_ = 0;
  bool any_stop_ = false;
  std::vector<float> send_, all_;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0, exchanges_ = 0;
  uint64_t dense_floats_ = 0, rows_needed_ = 0, uses_ = 0, row_fetches_ = 0, remote_rows_ = 0, rows_ahead_ = 0;
  double exchange_s_ = 0;
};

// Times the parts of a data-parallel step without the exchanges in them (those are the data
// parallel line's time): Lap adds to `seconds` the time since the previous lap (or the timer's
// start) less the exchanges' seconds in it.
class StepTimer {
 public:
  explicit StepTimer(const DataParallel& dp) : dp_(dp), start_(SteadyClock::now()), exchanged_(dp.exchange_s()) {}
  void Lap(double& seconds) {
    seconds += SecondsSince(start_) - (dp_.exchange_s() - exchanged_);
    start_ = SteadyClock::now(), exchanged_ = dp_.exchange_s();
  }

 private:
  const DataParallel& dp_;
  SteadyClock::time_point start_;
  double exchanged_;
};

// Whether a step's next rows travel during it (dist.prefetch_rows; auto: when the ranks span
// more than one machine). Every rank decides alike. `dp` null or one process: no.
bool SendsRowsAhead(const DataParallel* dp, RowPrefetch setting);

// train.virtual_shards against the world size and the batch (`units`: what a batch holds, e.g.
// "samples"): 0 across processes, fewer shards than processes, or more than a batch holds is
// one line saying so.
Status CheckVirtualShards(int virtual_shards, int world, int batch, const char* units);

// Whether a run trains in virtual shards: training with train.virtual_shards set, or across
// processes (`group` set, which needs them), checked by CheckVirtualShards; on a device (CPU
// only so far) one line saying so.
Result<bool> TrainsInShards(bool training, int virtual_shards, const DistGroup* group, int batch,
                            const char* units, const DeviceConfig& device);

// Checkpoints of a table sharded by row range, in two phases (train/row_checkpoint.h): rank 0
// makes the checkpoint's directory; after a barrier every rank writes the rows it owns, [first,
// first + count) read through `read`, as its shard file there and reports its size and CRC-32 to
// rank 0 (a failed write is reported too, so rank 0 does not wait for it); rank 0 records every
// shard and writes the manifest (`bounds`: world + 1 row numbers).
// A rank other than 0, where rank 0 calls CollectRowShards:
Status SendRowShard(DataParallel& dp, const std::string& checkpoint_dir, const std::string& table,
                    uint64_t first, uint64_t count, uint32_t row_bytes, const RowRangeReader& read);
// Rank 0:
Status CollectRowShards(DataParallel& dp, CheckpointWriter& writer, const std::string& table,
                        std::span<const uint64_t> bounds, uint32_t row_bytes, const RowRangeReader& read);

class RunSummary;
// The summary's data-parallel line and section: shards, the rows this rank owns of `rows`,
// bytes exchanged per step, time.
void SummarizeDataParallel(const DataParallel& dp, uint64_t rows, RunSummary& summary);
// Evaluation's passes, their steps and those this process computed (across processes each rank
// its part).
struct EvalSteps {
  uint64_t passes = 0, steps = 0, computed = 0;
};
void SummarizeEvaluationSteps(const EvalSteps& e, bool across_processes, RunSummary& summary);

}  // namespace sluice
