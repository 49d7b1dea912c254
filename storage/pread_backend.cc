#include <unistd.h>

#include <cerrno>
#include <vector>

#include "storage/io_backend.h"

namespace sluice {
namespace {

// Executes each op with one pread/pwrite, in the order prepared, inside SubmitAndWait. The
// reference backend in tests and the fallback where io_uring is unavailable.
class PreadBackend final : public IoBackend {
 public:
  explicit PreadBackend(uint32_t queue_depth) : queue_depth_(queue_depth), ring_(queue_depth) {}

  const char* name() const override { return "pread"; }
  uint32_t queue_depth() const override { return queue_depth_; }

  void Prepare(const IoOp& op) override {
    SLUICE_CHECK(count_ < queue_depth_, "more than %u ops outstanding", queue_depth_);
    ring_[(head_ + count_++) % queue_depth_] = op;
  }

  size_t SubmitAndWait(std::span<IoCompletion> out) override {
    SLUICE_CHECK(count_ > 0, "SubmitAndWait with nothing outstanding");
    size_t n = 0;
    while (count_ > 0 && n < out.size()) {
      const IoOp op = ring_[head_];
      head_ = (head_ + 1) % queue_depth_;
      --count_;
      const off_t offset = static_cast<off_t>(op.offset_bytes);
      ssize_t rc = op.kind == IoKind::kRead ? ::pread(op.fd, op.buffer, op.length_bytes, offset)
                                            : ::pwrite(op.fd, op.buffer, op.length_bytes, offset);
      out[n++] = IoCompletion{op.tag, rc < 0 ? -static_cast<int64_t>(errno) : rc};
    }
    return n;
  }

 private:
  uint32_t queue_depth_;
  std::vector<IoOp> ring_;  // ops prepared and not yet executed, in order
  uint32_t head_ = 0;
  uint32_t count_ = 0;
};

}  // namespace

std::unique_ptr<IoBackend> MakePreadBackend(uint32_t queue_depth) {
  SLUICE_CHECK(queue_depth >= 1, "queue depth %u", queue_depth);
  return std::make_unique<PreadBackend>(queue_depth);
}

}  // namespace sluice
