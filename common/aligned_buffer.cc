#include "common/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/check.h"
#include "common/units.h"

namespace sluice {

AlignedBuffer::AlignedBuffer(size_t size_bytes, size_t alignment_bytes)
    : size_bytes_(size_bytes), alignment_bytes_(alignment_bytes) {
  SLUICE_CHECK(IsPowerOfTwo(alignment_bytes) && alignment_bytes % sizeof(void*) == 0,
               "alignment %zu must be a power of two and a multiple of %zu", alignment_bytes,
               sizeof(void*));
  if (size_bytes == 0) return;
  // aligned_alloc wants the size to be a multiple of the alignment.
  size_t alloc_bytes = AlignUp(size_bytes, alignment_bytes);
  data_ = static_cast<std::byte*>(std::aligned_alloc(alignment_bytes, alloc_bytes));
  SLUICE_CHECK(data_ != nullptr, "out of memory allocating %zu bytes", alloc_bytes);
  std::memset(data_, 0, alloc_bytes);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      alignment_bytes_(std::exchange(other.alignment_bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    alignment_bytes_ = std::exchange(other.alignment_bytes_, 0);
  }
  return *this;
}

}  // namespace sluice
