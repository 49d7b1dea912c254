#pragma once
// The `dist` section every task's config has: runs across processes through PyTorch's c10d
// (train/dist.h, docs/distributed.md). Torch-free, like the other config structs.

#include <string>

#include "common/config.h"

namespace sluice {

struct DistConfig {
  double rendezvous_timeout = 120;  // seconds for every rank to join
  double op_timeout = 600;          // seconds a collective may wait (longer than an evaluation)
  std::string interface;            // Gloo's network interface ("" = the one the host name resolves to)
  bool prefetch_rows = true;         // a step's rows the step before does not use travel during it

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
            "while a step computes, send the next step's rows that this step does not use (so no "
            "step in between updates them) to the ranks that need them (training with sharded "
            "tables and storage.run_ahead >= 1); false: every row travels at its own step. The "
            "same model either way; every rank must agree");
  }
};

}  // namespace sluice
