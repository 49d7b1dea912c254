#include <unistd.h>

#include <cerrno>
#include <deque>

#include "storage/io_backend.h"

namespace sluice {
namespace {

// Executes each op with one pread/pwrite, in the order prepared, inside SubmitAndWait. The
// reference backend in tests and the fallback where io_uring is unavailable.
class PreadBackend final : public IoBackend {
 public:
  explicit PreadBackend(uint32_t queue_depth) : queue_depth_(queue_depth) {}

  const char* name() const override { return "pread"; }
  uint32_t queue_depth() const override { return queue_depth_; }

  void Prepare(const IoOp& op) override {
    SLUICE_CHECK(pending_.size() < queue_depth_, "more than %u ops outstanding", queue_depth_);
    pending_.push_back(op);
  }

  size_t SubmitAndWait(std::span<IoCompletion> out) override {
    SLUICE_CHECK(!pending_.empty(), "SubmitAndWait with nothing outstanding");
    size_t n = 0;
    while (!pending_.empty() && n < out.size()) {
      const IoOp op = pending_.front();
      pending_.pop_front();
      const off_t offset = static_cast<off_t>(op.offset_bytes);
      ssize_t rc = op.kind == IoKind::kRead ? ::pread(op.fd, op.buffer, op.length_bytes, offset)
                                            : ::pwrite(op.fd, op.buffer, op.length_bytes, offset);
      out[n++] = IoCompletion{op.tag, rc < 0 ? -static_cast<int64_t>(errno) : rc};
    }
    return n;
  }

 private:
  uint32_t queue_depth_;
  std::deque<IoOp> pending_;
};

}  // namespace

std::unique_ptr<IoBackend> MakePreadBackend(uint32_t queue_depth) {
  SLUICE_CHECK(queue_depth >= 1, "queue depth %u", queue_depth);
  return std::make_unique<PreadBackend>(queue_depth);
}

}  // namespace sluice
