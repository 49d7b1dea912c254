#pragma once
// Runs across processes through PyTorch's c10d (docs/distributed.md): where a process stands in
// the run (its rank, the world size, the master's address), the rendezvous through c10d's
// TCPStore, a Gloo or NCCL process group, and the ranks' agreement on what they train.
//
// Built: the place from the command line or the variables torchrun sets, the rendezvous with
// its timeout (every rank names the ranks that did not join), the agreement check (every rank
// publishes its config and dataset fingerprints; a mismatch stops all of them with one line
// naming the ranks and the first key that differs), a barrier, an all-gather and rank 0's
// values shared through the store. Data-parallel training on top of it: train/data_parallel.h.
//
// c10d's C++ API differs between libtorch 1.13 and 2.x; dist.cc uses what both have (TCPStore
// with TCPStoreOptions, ProcessGroupGloo with its Options and devices, ProcessGroupNCCL with its
// Options, Work::wait).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "train/dist_config.h"

namespace sluice {

struct DistPlace {
  int world_size = 1;
  int rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // A process group is made: every place a rank was given for (a world of one included, e.g.
  // torchrun with one process); no rank and a world of one (or none) is one process alone.
  bool group = false;
  bool distributed() const { return group; }
  std::string master() const { return master_addr + ":" + std::to_string(master_port); }
};

// From the command line (world_size 0, rank -1, master "": not given), else from the variables
// torchrun sets (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT), else one process. `env` reads a
// variable (null when unset). An impossible place (rank outside the world, a port out of range,
// a world size without a rank) is an error saying which value came from where.
using EnvReader = std::function<const char*(const char*)>;
Result<DistPlace> ResolveDistPlace(int world_size, int rank, const std::string& master, const EnvReader& env);

// Whether this build has Gloo process groups (the Gloo headers found: SLUICE_HAVE_GLOO; a CUDA
// PyTorch defines USE_C10D_GLOO without shipping them), and NCCL ones (SLUICE_HAVE_NCCL: a
// CUDA build whose PyTorch ships ProcessGroupNCCL and nccl.h).
bool HaveGloo();
bool HaveNccl();
// dist.backend as this build can run it (auto: Gloo, else NCCL), or why it cannot.
Result<DistBackend> ResolveDistBackend(DistBackend wanted, int world_size);
// Every rank's backend (by rank) the same as rank 0's, or one line naming the ranks that differ.
Status SameBackends(std::span<const std::string> backends);

class DistGroup {
 public:
  // Joins the run: rank 0 serves the store at the master's address, every rank connects and
  // announces itself, and all wait up to config.rendezvous_timeout for the others ("rank 1 of 3
  // did not join within 120 s at 10.0.0.1:29500"); then the Gloo process group on
  // config.interface with config.op_timeout (or NCCL's on the rank's GPU: dist.backend; ranks
  // whose backends differ stop, each naming them).
  static Result<std::unique_ptr<DistGroup>> Join(const DistPlace& place, const DistConfig& config);
  ~DistGroup();
  DistGroup(const DistGroup&) = delete;
  DistGroup& operator=(const DistGroup&) = delete;

  int rank() const;
  int world_size() const;
  // The machines the ranks run on (distinct host names at the rendezvous).
  int machines() const;
  // "Gloo", "Gloo on lo", "NCCL on cuda:0".
  std::string Transport() const;
  // Every rank publishes `value` as its `what` (e.g. "config": "key: value" lines) and compares
  // every other rank's with rank 0's. A mismatch, on every rank: "ranks 1, 2 differ from rank 0
  // in their config: train.lr is 0.05 on rank 1, 0.1 on rank 0".
  Status Agree(const std::string& what, const std::string& value);
  // Waits for every rank (op_timeout).
  Status Barrier();
  // Every rank's `mine` (the same length on every rank) laid end to end in rank order into
  // `all` (world size x mine.size() floats): the group's all-gather, within op_timeout.
  Status AllGather(std::span<const float> mine, std::span<float> all);
  // The group's all-to-all: send_counts[r] floats of `send` (end to end, rank order) go to rank r, and
  // recv_counts[r] floats from rank r land in `recv` (end to end, rank order).
  Status AllToAll(std::span<const float> send, std::span<const uint64_t> send_counts, std::span<float> recv,
                  std::span<const uint64_t> recv_counts);
  // An all-to-all started now, finished by FinishAllToAll: the rank's other work runs while the group
  // moves the floats (AllToAll's arguments; `send` is copied before it returns). Every rank
  // starts the same operations in the same order.
  struct Pending;
  Result<std::shared_ptr<Pending>> StartAllToAll(std::span<const float> send, std::span<const uint64_t> send_counts,
                                                 std::span<const uint64_t> recv_counts);
  // Waits for it (op_timeout): what every rank sent this one, end to end in rank order.
  Result<std::vector<float>> FinishAllToAll(Pending& op);
  // Point to point (the group's send/recv, within op_timeout): `bytes` to rank `peer`, or from it.
  Status Send(std::span<const std::byte> bytes, int peer);
  Status Recv(std::span<std::byte> bytes, int peer);
  // After a collective failed on this rank: every rank whose collective failed (this one or a
  // later one) says so in the store; the ranks that did not within a few seconds died or stopped,
  // and are named ("rank 2", "ranks 1, 2"; "rank 0 (the store's host)" when the store is gone;
  // "" when all answered).
  std::string Missing();
  // Rank 0's `value` as `what` on every rank (the others' `value` is ignored), through the store.
  Result<std::string> Share(const std::string& what, const std::string& value);

 private:
  struct Impl;
  explicit DistGroup(std::unique_ptr<Impl> impl);
  static Status JoinGloo(Impl& impl, const std::string& who);
  static Status JoinNccl(Impl& impl, const std::string& who);
  Status PointToPoint(std::byte* data, size_t size, int peer, bool send);
  std::unique_ptr<Impl> impl_;
};

// The first line of `a` that differs from `b`'s, as "<key> is <a's value> on <a_name>, <b's> on
// <b_name>" for "key: value" lines (the whole lines otherwise).
std::string FirstDifference(const std::string& a, const std::string& a_name, const std::string& b,
                            const std::string& b_name);

}  // namespace sluice
