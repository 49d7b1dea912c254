#include "storage/fault_backend.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "storage/file.h"

namespace sluice {

const FaultRule* FaultBackend::Match(const IoOp& op) {
  const FaultRule* fired = nullptr;
  for (ArmedRule& armed : rules_) {
    if (armed.rule.kind != op.kind) continue;
    const uint64_t n = armed.seen++;
    if (fired == nullptr && n >= armed.rule.first_match &&
        n < armed.rule.first_match + armed.rule.times) {
      fired = &armed.rule;
    }
  }
  return fired;
}

const FaultRule* FaultBackend::ProcessRule(const IoOp& op, FaultRule& out) {
  if (process_ == nullptr || !process_->Applies(op.kind)) return nullptr;
  const FaultAction a = process_->NextFd(op.kind, op.fd);
  out.kind = op.kind;
  switch (a.kind) {
    case FaultKind::kNone:
      return nullptr;
    case FaultKind::kError:
      out.type = FaultType::kError;
      out.error = a.error;
      return &out;
    case FaultKind::kShort:
      // Half the op, kept aligned for O_DIRECT; an op too small to split goes through whole.
      out.type = FaultType::kShortTransfer;
      out.short_bytes = op.length_bytes / 2 / kDirectAlignBytes * kDirectAlignBytes;
      return out.short_bytes > 0 ? &out : nullptr;
    case FaultKind::kLatency:
      out.type = FaultType::kLatency;
      out.latency_ns = ProcessFaults::kLatencyNs;
      return &out;
  }
  return nullptr;
}

size_t FaultBackend::SubmitAndWait(std::span<IoCompletion> out) {
  if (reorder_ && !pending_.empty()) reorder_(pending_);
  for (IoOp op : pending_) {
    FaultRule process_rule;
    const FaultRule* rule = Match(op);
    if (rule == nullptr) rule = ProcessRule(op, process_rule);
    if (rule != nullptr) ++faults_fired_;
    if (rule != nullptr && rule->type == FaultType::kError) {
      synthesized_.push_back(IoCompletion{op.tag, -static_cast<int64_t>(rule->error)});
      continue;
    }
    if (rule != nullptr && rule->type == FaultType::kShortTransfer) {
      op.length_bytes = std::min(op.length_bytes, rule->short_bytes);
    }
    if (rule != nullptr && rule->type == FaultType::kLatency) {
      // Simulated device latency, not synchronisation.
      std::this_thread::sleep_for(std::chrono::nanoseconds(rule->latency_ns));
    }
    inner_->Prepare(op);
    ++inner_outstanding_;
  }
  pending_.clear();
  size_t n = 0;
  while (n < out.size() && !synthesized_.empty()) {
    out[n++] = synthesized_.back();
    synthesized_.pop_back();
  }
  if (n == 0 && inner_outstanding_ > 0) {
    n = inner_->SubmitAndWait(out);
    inner_outstanding_ -= static_cast<uint32_t>(n);
  }
  SLUICE_CHECK(n > 0, "SubmitAndWait with nothing outstanding");
  return n;
}

}  // namespace sluice
