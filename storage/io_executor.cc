#include "storage/io_backend.h"

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace sluice {
namespace {

std::string Describe(const IoRequest& r) {
  return std::string(r.kind == IoKind::kRead ? "read " : "write ") + r.file->path() + " offset " +
         std::to_string(r.offset_bytes) + " length " + std::to_string(r.length_bytes);
}

}  // namespace

Result<BackendKind> ParseBackendKind(const std::string& name) {
  if (name == "auto") return BackendKind::kAuto;
  if (name == "uring" || name == "io_uring") return BackendKind::kUring;
  if (name == "pread") return BackendKind::kPread;
  return InvalidArgument("unknown io backend '" + name + "' (expected auto, uring or pread)");
}

Result<std::unique_ptr<IoBackend>> MakeBackend(BackendKind kind, uint32_t queue_depth) {
  if (kind == BackendKind::kPread) return MakePreadBackend(queue_depth);
  auto uring = MakeUringBackend(queue_depth);
  if (uring.ok() || kind == BackendKind::kUring) return uring;
  SLUICE_LOG(kWarning, "io_uring unavailable (%s); falling back to pread",
             uring.status().message().c_str());
  return MakePreadBackend(queue_depth);
}

IoExecutor::IoExecutor(std::unique_ptr<IoBackend> backend)
    : backend_(std::move(backend)),
      slots_(backend_->queue_depth()),
      completions_(backend_->queue_depth()) {
  free_slots_.reserve(slots_.size());
}

void IoExecutor::Issue(uint32_t slot) {
  InFlight& f = slots_[slot];
  IoRequest& r = *f.request;
  IoOp op;
  op.kind = r.kind;
  op.fd = r.file->fd();
  op.offset_bytes = r.offset_bytes + f.done_bytes;
  op.length_bytes = r.length_bytes - f.done_bytes;
  op.buffer = r.buffer + f.done_bytes;
  op.tag = slot;
  backend_->Prepare(op);
  ++stats_.syscall_ops;
}

bool IoExecutor::Finish(const IoCompletion& c) {
  InFlight& f = slots_[c.tag];
  IoRequest& r = *f.request;
  const uint32_t remaining = r.length_bytes - f.done_bytes;
  if (c.result == -EAGAIN || c.result == -EINTR) {
    ++stats_.retries;
    Issue(static_cast<uint32_t>(c.tag));
    return false;
  }
  if (c.result < 0) {
    r.status = ErrnoStatus(Describe(r), static_cast<int>(-c.result));
    return true;
  }
  if (c.result == 0) {
    r.status = r.kind == IoKind::kRead
                   ? Corruption(Describe(r) + ": file ends at offset " +
                                std::to_string(r.offset_bytes + f.done_bytes))
                   : IoError(Describe(r) + ": the device accepted no bytes");
    return true;
  }
  f.done_bytes += static_cast<uint32_t>(c.result);
  stats_.bytes += static_cast<uint64_t>(c.result);
  // A short read that reached the bytes the request needs: the file ended where it may (an
  // unaligned rest would not even be a valid O_DIRECT read).
  const bool enough = r.kind == IoKind::kRead && r.min_bytes != 0 && f.done_bytes >= r.min_bytes;
  if (static_cast<uint64_t>(c.result) < remaining && !enough) {
    ++stats_.short_transfers;
    Issue(static_cast<uint32_t>(c.tag));
    return false;
  }
  r.status = Status::Ok();
  return true;
}

Status IoExecutor::Stream(size_t count, PrepareFn prepare, CompleteFn complete) {
  const uint32_t depth = backend_->queue_depth();
  free_slots_.clear();
  for (uint32_t s = depth; s-- > 0;) free_slots_.push_back(s);
  Status first_error;
  size_t next = 0;
  uint32_t in_flight = 0;
  while (true) {
    while (first_error.ok() && next < count && !free_slots_.empty()) {
      const uint32_t slot = free_slots_.back();
      free_slots_.pop_back();
      slots_[slot] = InFlight{prepare(next, slot), next, 0};
      ++next;
      ++in_flight;
      Issue(slot);
    }
    if (in_flight == 0) break;
    const size_t n = backend_->SubmitAndWait(completions_);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t slot = static_cast<uint32_t>(completions_[i].tag);
      if (!Finish(completions_[i])) continue;
      InFlight& f = slots_[slot];
      if (f.request->status.ok()) {
        ++stats_.requests;
        if (first_error.ok() && complete(f.index, slot, *f.request) == IoNext::kResubmit) {
          f.done_bytes = 0;
          Issue(slot);
          continue;
        }
      } else if (first_error.ok()) {
        first_error = f.request->status;
      }
      --in_flight;
      free_slots_.push_back(slot);
    }
  }
  return first_error;
}

Status IoExecutor::Execute(std::span<IoRequest> requests) {
  for (IoRequest& r : requests) r.status = Aborted("not executed: an earlier request failed");
  auto prepare = [&](size_t index, uint32_t) { return &requests[index]; };
  auto complete = [](size_t, uint32_t, IoRequest&) { return IoNext::kDone; };
  return Stream(requests.size(), prepare, complete);
}

}  // namespace sluice
