#pragma once
// A move-only, zero-initialised heap buffer whose start is aligned (for O_DIRECT: 512 or 4096).

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Requires: alignment is a power of two and a multiple of sizeof(void*). size may be 0.
  AlignedBuffer(size_t size_bytes, size_t alignment_bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_bytes_; }
  size_t alignment() const { return alignment_bytes_; }
  std::span<std::byte> span() { return {data_, size_bytes_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_bytes_ = 0;
  size_t alignment_bytes_ = 0;
};

}  // namespace sluice
