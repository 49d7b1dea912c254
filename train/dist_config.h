#pragma once
// The `dist` section every task's config has: runs across processes through PyTorch's c10d
// (train/dist.h, docs/distributed.md). Torch-free, like the other config structs.

#include <string>
#include <utility>

#include "common/config.h"

namespace sluice {

// dist.prefetch_rows.
enum class RowPrefetch { kAuto, kOn, kOff };
template <>
struct EnumNames<RowPrefetch> {
  static constexpr std::pair<RowPrefetch, const char*> kNames[] = {
      {RowPrefetch::kAuto, "auto"}, {RowPrefetch::kOn, "on"}, {RowPrefetch::kOff, "off"}};
};

// dist.backend.
enum class DistBackend { kAuto, kGloo, kNccl };
template <>
struct EnumNames<DistBackend> {
  static constexpr std::pair<DistBackend, const char*> kNames[] = {
      {DistBackend::kAuto, "auto"}, {DistBackend::kGloo, "gloo"}, {DistBackend::kNccl, "nccl"}};
};

struct DistConfig {
  double rendezvous_timeout = 120;  // seconds for every rank to join
  double op_timeout = 600;          // seconds a collective may wait (longer than an evaluation)
  std::string interface;            // Gloo's network interface ("" = the one the host name resolves to)
  RowPrefetch prefetch_rows = RowPrefetch::kAuto;  // a step's rows the step before does not use travel during it
  DistBackend backend = DistBackend::kAuto;         // the process group's transport

  template <class V>
  void VisitFields(V& v) {
    v.Field("rendezvous_timeout", rendezvous_timeout,
            "seconds every rank has to join at the master's address before all of them stop",
            InRange(0.1, 86400.0));
    v.Field("op_timeout", op_timeout,
            "seconds a collective operation may wait for the other ranks (longer than the longest "
            "evaluation or checkpoint)", InRange(1.0, 86400.0));
    v.Field("interface", interface,
            "network interface the ranks talk over (e.g. eth0; lo for ranks on one machine); empty: "
            "the interface of the address the host name resolves to");
    v.Field("prefetch_rows", prefetch_rows,
            "on: while a step computes, send the next step's rows that this step does not use (so "
            "no step in between updates them) to the ranks that need them (training with sharded "
            "tables; out of core with storage.run_ahead >= 1); off: every row travels at its own "
            "step; auto: on when the ranks span more than one machine (on one, they share its "
            "cores and the transfer is a copy: docs/distributed.md). The same model either way");
    v.Field("backend", backend,
            "the c10d process group the ranks exchange rows and gradients through: gloo (CPU, over "
            "dist.interface), nccl (through each rank's GPU, cuda:LOCAL_RANK; builds with "
            "SLUICE_CUDA against a CUDA PyTorch), auto: gloo where this sluice has it, else nccl. "
            "The same model either way");
  }
};

}  // namespace sluice
