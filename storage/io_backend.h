#pragma once
// The io layer. An IoBackend is a queue of raw operations (one io_uring ring, or a pread loop,
// or a fault-injecting wrapper); an IoExecutor drives one backend: it keeps the queue full,
// finishes short transfers, retries EAGAIN/EINTR, and turns any other failure into that
// request's Status naming path, offset and length.
//
// Threading: a backend and its executor belong to one thread (a ring per thread). Create one
// per thread that does io.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "storage/file.h"

namespace sluice {

enum class IoKind : uint8_t { kRead, kWrite };

// One raw operation handed to a backend. `tag` comes back in its completion.
struct IoOp {
  IoKind kind = IoKind::kRead;
  int fd = -1;
  uint64_t offset_bytes = 0;
  uint32_t length_bytes = 0;
  std::byte* buffer = nullptr;
  uint64_t tag = 0;
};

// result: bytes transferred (possibly fewer than asked), or -errno.
struct IoCompletion {
  uint64_t tag = 0;
  int64_t result = 0;
};

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual const char* name() const = 0;
  // The most operations that may be prepared-or-in-flight at once.
  virtual uint32_t queue_depth() const = 0;
  // Queues `op` for the next Submit. Requires fewer than queue_depth() ops outstanding.
  virtual void Prepare(const IoOp& op) = 0;
  // Submits every prepared op and blocks until at least one outstanding op completes (one
  // system call for io_uring); stores up to out.size() completions and returns how many.
  // Requires at least one op outstanding. Per-op failures arrive as negative results; a
  // failure of the queue itself (a bug: a bad fd table, a bad ring) aborts, because ops still
  // in the kernel could write into buffers the caller is about to free.
  virtual size_t SubmitAndWait(std::span<IoCompletion> out) = 0;
};

enum class BackendKind { kAuto, kUring, kPread };
template <>
struct EnumNames<BackendKind> {
  static constexpr std::pair<BackendKind, const char*> kNames[] = {
      {BackendKind::kAuto, "auto"}, {BackendKind::kUring, "uring"}, {BackendKind::kPread, "pread"}};
};
Result<BackendKind> ParseBackendKind(const std::string& name);

// io_uring with `queue_depth` entries (no SQPOLL, no IOPOLL). Unavailable where the kernel or a
// seccomp policy refuses io_uring.
Result<std::unique_ptr<IoBackend>> MakeUringBackend(uint32_t queue_depth);
// Synchronous pread/pwrite; performs one syscall per op inside Wait. Always available.
std::unique_ptr<IoBackend> MakePreadBackend(uint32_t queue_depth);
// kAuto: io_uring, else pread with a warning.
Result<std::unique_ptr<IoBackend>> MakeBackend(BackendKind kind, uint32_t queue_depth);

// A request as the caller sees it: an io on a File into a caller-owned buffer. For O_DIRECT
// files, buffer, offset and length must be aligned to kDirectAlignBytes.
struct IoRequest {
  IoKind kind = IoKind::kRead;
  const File* file = nullptr;
  uint64_t offset_bytes = 0;
  uint32_t length_bytes = 0;
  std::byte* buffer = nullptr;
  Status status;  // set by the executor
  // Reads only: when non-zero, the file may end after this many bytes of the request (an
  // unpadded file's last aligned extent under O_DIRECT); the rest of the buffer is undefined.
  uint32_t min_bytes = 0;
};

// A non-owning reference to a callable (no allocation), for the executor's callbacks.
template <typename Signature>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  FunctionRef(F& f)  // NOLINT(google-explicit-constructor)
      : object_(&f), call_([](void* o, Args... args) -> R {
          return (*static_cast<F*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

enum class IoNext { kDone, kResubmit };

struct IoStats {
  uint64_t requests = 0;      // requests completed
  uint64_t syscall_ops = 0;   // raw ops issued, including continuations and retries
  uint64_t bytes = 0;
  uint64_t short_transfers = 0;
  uint64_t retries = 0;       // EAGAIN / EINTR
};

class IoExecutor {
 public:
  explicit IoExecutor(std::unique_ptr<IoBackend> backend);

  uint32_t queue_depth() const { return backend_->queue_depth(); }
  const char* backend_name() const { return backend_->name(); }
  const IoStats& stats() const { return stats_; }

  // Executes every request, keeping up to queue_depth() in flight. Requests of one call may
  // complete in any order: a caller that needs A before B issues them in separate calls. Sets
  // each request's status; returns the first error.
  Status Execute(std::span<IoRequest> requests);

  // Streams `count` items through at most queue_depth() in-flight slots.
  //   prepare(index, slot) returns the request for item `index` (slot < queue_depth() lets the
  //     caller give each slot its own buffer; the request must stay valid until completed).
  //   complete(index, slot, request) runs when that request has fully succeeded; returning
  //     kResubmit issues the (modified) request again, e.g. a read turned into a write.
  // On the first failure no new items start; in-flight ones drain; the error is returned.
  using PrepareFn = FunctionRef<IoRequest*(size_t index, uint32_t slot)>;
  using CompleteFn = FunctionRef<IoNext(size_t index, uint32_t slot, IoRequest& request)>;
  Status Stream(size_t count, PrepareFn prepare, CompleteFn complete);

 private:
  struct InFlight {
    IoRequest* request = nullptr;
    size_t index = 0;
    uint32_t done_bytes = 0;
  };
  void Issue(uint32_t slot);
  // Handles one raw completion; returns true when the slot's request is finished.
  bool Finish(const IoCompletion& completion);

  std::unique_ptr<IoBackend> backend_;
  std::vector<InFlight> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<IoCompletion> completions_;
  IoStats stats_;
};

}  // namespace sluice
