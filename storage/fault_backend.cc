#include "storage/fault_backend.h"

#include <algorithm>
#include <chrono>
#include <thread>

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

size_t FaultBackend::SubmitAndWait(std::span<IoCompletion> out) {
  if (reorder_ && !pending_.empty()) reorder_(pending_);
  for (IoOp op : pending_) {
    const FaultRule* rule = Match(op);
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
