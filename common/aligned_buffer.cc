#include "common/aligned_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/check.h"
#include "common/units.h"

namespace sluice {
namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugePageMinBytes = size_t{8} << 20;
}  // namespace

AlignedBuffer::AlignedBuffer(size_t size_bytes, size_t alignment_bytes)
    : size_bytes_(size_bytes), alignment_bytes_(alignment_bytes) {
  SLUICE_CHECK(IsPowerOfTwo(alignment_bytes) && alignment_bytes % sizeof(void*) == 0,
               "alignment %zu must be a power of two and a multiple of %zu", alignment_bytes,
               sizeof(void*));
  if (size_bytes == 0) return;
  // Large buffers (tables, cache slots) are read at random rows: on 4 KiB pages nearly every
  // row is a TLB miss whose page walk misses the cache too. They are aligned to 2 MiB and asked
  // for transparent huge pages before the first touch (the kernel's default here is madvise).
  size_t align = alignment_bytes;
  const bool huge = size_bytes >= kHugePageMinBytes;
  if (huge) align = std::max(align, kHugePageBytes);
  // aligned_alloc wants the size to be a multiple of the alignment.
  size_t alloc_bytes = AlignUp(size_bytes, align);
  data_ = static_cast<std::byte*>(std::aligned_alloc(align, alloc_bytes));
  SLUICE_CHECK(data_ != nullptr, "out of memory allocating %zu bytes", alloc_bytes);
  if (huge) madvise(data_, alloc_bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
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
