#pragma once
// TensorPeak: while one lives, every CPU tensor libtorch allocates is counted, and the most
// bytes alive at once is kept: the working set of a step, as a model's StepBytes plans it.
// Tensors allocated before it are freed by their own deleters and do not count; the counts are
// static, so a tensor it allocated may outlive it. One at a time.

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace sluice {

class TensorPeak final : public c10::Allocator {
 public:
  TensorPeak() : before_(c10::GetCPUAllocator()) {
    peak_.store(live_.load());
    c10::SetCPUAllocator(this, kPriority);
  }
  ~TensorPeak() override { c10::SetCPUAllocator(before_, kPriority); }
  TensorPeak(const TensorPeak&) = delete;
  TensorPeak& operator=(const TensorPeak&) = delete;

  // The bytes alive now, and the most alive at once since construction or Reset.
  static int64_t live() { return live_.load(); }
  static int64_t peak() { return peak_.load(); }
  static void Reset() { peak_.store(live_.load()); }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return Allocate(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t n) const override { return Allocate(n); }
#endif

 private:
  static constexpr uint8_t kPriority = 200;
  struct Block {
    void* data;
    int64_t bytes;
  };

  static c10::DataPtr Allocate(size_t n) {
    void* data = c10::alloc_cpu(n);
    auto* block = new Block{data, static_cast<int64_t>(n)};
    const int64_t now = live_.fetch_add(block->bytes) + block->bytes;
    int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    return {data, block, &Free, c10::Device(c10::DeviceType::CPU)};
  }
  static void Free(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    live_.fetch_sub(block->bytes);
    c10::free_cpu(block->data);
    delete block;
  }

  c10::Allocator* before_;
  static inline std::atomic<int64_t> live_{0}, peak_{0};
};

}  // namespace sluice
