// Inputs shared by the benchmark tools (bench_kernels, attention_bits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace forge_bench {

// n normal floats (mean 0), the same for the same seed and stddev on every build.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace forge_bench
