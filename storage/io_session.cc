#include "storage/io_session.h"

#include "common/units.h"
#include "storage/fault_backend.h"
#include "storage/fault_injection.h"

namespace sluice {

Result<std::unique_ptr<IoBackend>> MakeProcessBackend(BackendKind kind, uint32_t queue_depth) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend, MakeBackend(kind, queue_depth));
  if (ProcessFaults* faults = ProcessFaults::Get()) {  // SLUICE_FAULT: the fault-matrix tests
    auto wrapped = std::make_unique<FaultBackend>(std::move(backend));
    wrapped->SetProcessFaults(faults);
    backend = std::move(wrapped);
  }
  return backend;
}

Result<std::unique_ptr<IoSession>> IoSession::Create(const IoConfig& config) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend,
                          MakeProcessBackend(config.backend, static_cast<uint32_t>(config.EffectiveQueueDepth())));
  return std::make_unique<IoSession>(std::move(backend),
                                     static_cast<uint32_t>(config.merge_max.value));
}

IoSession::IoSession(std::unique_ptr<IoBackend> backend, uint32_t slot_bytes)
    : executor_(std::move(backend)),
      slot_bytes_(static_cast<uint32_t>(AlignUp(slot_bytes, kDirectAlignBytes))),
      staging_(uint64_t{executor_.queue_depth()} * slot_bytes_, kDirectAlignBytes),
      requests_(executor_.queue_depth()) {}

void IoSession::EnsureSlotBytes(uint32_t bytes) {
  bytes = static_cast<uint32_t>(AlignUp(bytes, kDirectAlignBytes));
  if (bytes <= slot_bytes_) return;
  slot_bytes_ = bytes;
  staging_ = AlignedBuffer(uint64_t{queue_depth()} * slot_bytes_, kDirectAlignBytes);
}

}  // namespace sluice
