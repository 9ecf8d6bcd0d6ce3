// Inputs shared by the benchmark tools (bench_kernels, attention_bits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <random>
#include <vector>

namespace forge_bench {

// Cache-line-aligned storage, as the engine's planned buffers (core/float_buffer.h) are: an
// operand row straddling two cache lines loads slower (an AMX tile row about twice as slow),
// so a benchmark on malloc's 16-byte alignment would time a kernel the engine never runs.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};
template <typename T>
using Aligned = std::vector<T, CacheLineAllocator<T>>;

// n normal floats (mean 0), the same for the same seed and stddev on every build.
inline Aligned<float> random_floats(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Aligned<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace forge_bench
