#pragma once
// Counter-based random numbers: every draw is a pure function of a key (seed, epoch, step,
// node, hop, index...), so a sampler's output does not depend on thread count or order of
// work, and any step can be replayed from its coordinates alone.

#include <cstdint>

// Compiled for the host and, under nvcc, for the device too (the CUDA sampler draws the same
// numbers as the CPU one).
#if defined(__CUDACC__)
#define SLUICE_HOST_DEVICE __host__ __device__
#else
#define SLUICE_HOST_DEVICE
#endif

namespace sluice {

// splitmix64's finalizer: a bijective 64-bit mix with good avalanche.
SLUICE_HOST_DEVICE constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Hashes a sequence of words into one 64-bit value (order matters).
class Key {
 public:
  SLUICE_HOST_DEVICE explicit constexpr Key(uint64_t seed) : h_(Mix64(seed ^ 0x9E3779B97F4A7C15ull)) {}
  SLUICE_HOST_DEVICE constexpr Key With(uint64_t word) const {
    Key k = *this;
    k.h_ = Mix64(k.h_ ^ (word + 0x9E3779B97F4A7C15ull + (k.h_ << 6) + (k.h_ >> 2)));
    return k;
  }
  SLUICE_HOST_DEVICE constexpr uint64_t Bits(uint64_t index) const { return Mix64(h_ + index * 0xD1B54A32D192ED03ull); }
  // Uniform in [0, n) (Lemire's multiply-shift; bias below 2^-32 for n < 2^32).
  SLUICE_HOST_DEVICE constexpr uint64_t Below(uint64_t index, uint64_t n) const {
#if defined(__CUDA_ARCH__)
    return __umul64hi(Bits(index), n);
#else
    __extension__ typedef unsigned __int128 U128;
    return static_cast<uint64_t>((static_cast<U128>(Bits(index)) * n) >> 64);
#endif
  }
  // Uniform in [0, 1).
  SLUICE_HOST_DEVICE constexpr double Unit(uint64_t index) const {
    return static_cast<double>(Bits(index) >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t h_;
};

}  // namespace sluice
