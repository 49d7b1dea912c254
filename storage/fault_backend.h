#pragma once
// A fault-injecting IoBackend for tests: wraps a real backend and, by rule, fails ops (EIO,
// ENOSPC), makes them transient (EAGAIN, EINTR), transfers fewer bytes than asked, adds latency,
// or reorders a submitted batch before executing it, so ordering bugs can be provoked
// deterministically. With a pread inner backend, ops execute in the (reordered) order given.

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "storage/fault_injection.h"
#include "storage/io_backend.h"

namespace sluice {

enum class FaultType {
  kError,          // complete with -error without doing the io
  kShortTransfer,  // do at most short_bytes of the op
  kLatency,        // sleep latency_ns, then do the op
};

struct FaultRule {
  IoKind kind = IoKind::kRead;  // which ops the rule counts
  uint64_t first_match = 0;     // fires from the first_match-th matching op (0-based)...
  uint64_t times = 1;           // ...on this many consecutive matching ops
  FaultType type = FaultType::kError;
  int error = 5;                // errno for kError (EIO); ENOSPC, EAGAIN, EINTR also useful
  uint32_t short_bytes = 512;   // for kShortTransfer
  uint64_t latency_ns = 0;      // for kLatency
};

class FaultBackend final : public IoBackend {
 public:
  // Reorders the ops of one SubmitAndWait batch before they are executed.
  using Reorder = std::function<void(std::span<IoOp> batch)>;

  explicit FaultBackend(std::unique_ptr<IoBackend> inner) : inner_(std::move(inner)) {}

  void AddRule(const FaultRule& rule) { rules_.push_back({rule, 0}); }
  void SetReorder(Reorder reorder) { reorder_ = std::move(reorder); }
  // Also applies the process's SLUICE_FAULT faults (IoSession::Create sets them when asked).
  void SetProcessFaults(ProcessFaults* faults) { process_ = faults; }
  uint64_t faults_fired() const { return faults_fired_; }

  const char* name() const override { return "fault"; }
  uint32_t queue_depth() const override { return inner_->queue_depth(); }
  void Prepare(const IoOp& op) override { pending_.push_back(op); }
  size_t SubmitAndWait(std::span<IoCompletion> out) override;

 private:
  struct ArmedRule {
    FaultRule rule;
    uint64_t seen = 0;
  };
  const FaultRule* Match(const IoOp& op);
  // The process's fault for `op` as a rule in `out`; nullptr when none applies.
  const FaultRule* ProcessRule(const IoOp& op, FaultRule& out);

  std::unique_ptr<IoBackend> inner_;
  std::vector<ArmedRule> rules_;
  Reorder reorder_;
  ProcessFaults* process_ = nullptr;
  std::vector<IoOp> pending_;
  std::vector<IoCompletion> synthesized_;
  uint32_t inner_outstanding_ = 0;
  uint64_t faults_fired_ = 0;
};

}  // namespace sluice
