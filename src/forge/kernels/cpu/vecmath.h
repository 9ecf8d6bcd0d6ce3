// Branch-free float math written so that GCC vectorises loops that call it, for whatever ISA
// the calling function is compiled for (the caller may carry a target attribute; these are
// inlined into it). Without -ffast-math the compiler will not reorder a float reduction, so
// reductions below keep kLanes independent partial sums explicitly: that is what lets them
// vectorise, and it fixes the summation order so results are reproducible run to run.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace forge::kernels::vec {

// 16 lanes = one AVX-512 register or two AVX2 registers.
inline constexpr int kLanes = 16;

// exp(x) with ~1-2 ulp error on [-87, 88]; 0 below, +inf-free (clamped) above.
// Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor polynomial
// whose truncation error (r^7/7!) is below 2e-7 relative.
[[gnu::always_inline]] inline float exp(float x) {
  const float hi = 88.3762626647949f;
  const float lo = -87.3365447505531f;
  const bool underflow = x < lo;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a call.
  const float magic = 12582912.0f;
  const float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;  // ln2 split into an exact high part and a low part
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  const float result = p * std::bit_cast<float>(bits);
  return underflow ? 0.0f : result;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1). The absolute error stays ~1e-7 everywhere; that is what
// GELU needs (it multiplies tanh by 0.5 x), although the relative error near 0 is larger.
[[gnu::always_inline]] inline float tanh(float u) {
  u = u > 9.0f ? 9.0f : u;
  u = u < -9.0f ? -9.0f : u;
  return 1.0f - 2.0f / (exp(2.0f * u) + 1.0f);
}

[[gnu::always_inline]] inline float dot(const float* a, const float* b, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += a[i + k] * b[i + k];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  return s;
}

[[gnu::always_inline]] inline float sum(const float* a, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += a[i + k];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i];
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  return s;
}

[[gnu::always_inline]] inline float max(const float* a, size_t n) {
  float acc[kLanes];
  for (int k = 0; k < kLanes; ++k) acc[k] = -__builtin_inff();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] = a[i + k] > acc[k] ? a[i + k] : acc[k];
  float m = -__builtin_inff();
  for (; i < n; ++i) m = a[i] > m ? a[i] : m;
  for (int k = 0; k < kLanes; ++k) m = acc[k] > m ? acc[k] : m;
  return m;
}

// y[i] += a * x[i]
[[gnu::always_inline]] inline void axpy(float* __restrict y, float a, const float* __restrict x,
                                        int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace forge::kernels::vec
