// A thin SIMD layer for the hand-vectorised kernels: one register type and the handful of
// operations they use. The ISA is the widest the translation unit is compiled for:
// AVX-512 (16 lanes), AVX2 + FMA (8 lanes), or plain scalar code (1 lane), so the same
// kernel source builds everywhere. Written with intrinsics rather than left to the
// auto-vectoriser because GCC will not if-convert float selects under -ftrapping-math, does
// not contract a*b+c into FMA under -std=c++20, and tunes znver1 for 128-bit vectors.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace forge::kernels::simd {

#if defined(__AVX512F__)

inline constexpr int W = 16;
inline constexpr const char* kIsa = "avx512";
using V = __m512;
using VI = __m512i;
[[gnu::always_inline]] inline V zero() { return _mm512_setzero_ps(); }
[[gnu::always_inline]] inline V set1(float x) { return _mm512_set1_ps(x); }
[[gnu::always_inline]] inline V load(const float* p) { return _mm512_loadu_ps(p); }
[[gnu::always_inline]] inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
[[gnu::always_inline]] inline V add(V a, V b) { return _mm512_add_ps(a, b); }
[[gnu::always_inline]] inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
[[gnu::always_inline]] inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
[[gnu::always_inline]] inline V div(V a, V b) { return _mm512_div_ps(a, b); }
[[gnu::always_inline]] inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
[[gnu::always_inline]] inline V max(V a, V b) { return _mm512_max_ps(a, b); }
[[gnu::always_inline]] inline V min(V a, V b) { return _mm512_min_ps(a, b); }
[[gnu::always_inline]] inline V sqrt(V a) { return _mm512_sqrt_ps(a); }
[[gnu::always_inline]] inline float reduce_add(V a) { return _mm512_reduce_add_ps(a); }
[[gnu::always_inline]] inline float reduce_max(V a) { return _mm512_reduce_max_ps(a); }
// Lanes where a < b get `then`, others `otherwise`.
[[gnu::always_inline]] inline V select_lt(V a, V b, V then, V otherwise) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), otherwise, then);
}
[[gnu::always_inline]] inline V round_nearest(V a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// 2^n for integral-valued n in [-126, 127].
[[gnu::always_inline]] inline V exp2_int(V n) {
  const VI bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_castsi512_ps(bits);
}

#elif defined(__AVX2__) && defined(__FMA__)

inline constexpr int W = 8;
inline constexpr const char* kIsa = "avx2";
using V = __m256;
using VI = __m256i;
[[gnu::always_inline]] inline V zero() { return _mm256_setzero_ps(); }
[[gnu::always_inline]] inline V set1(float x) { return _mm256_set1_ps(x); }
[[gnu::always_inline]] inline V load(const float* p) { return _mm256_loadu_ps(p); }
[[gnu::always_inline]] inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
[[gnu::always_inline]] inline V add(V a, V b) { return _mm256_add_ps(a, b); }
[[gnu::always_inline]] inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
[[gnu::always_inline]] inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
[[gnu::always_inline]] inline V div(V a, V b) { return _mm256_div_ps(a, b); }
[[gnu::always_inline]] inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
[[gnu::always_inline]] inline V max(V a, V b) { return _mm256_max_ps(a, b); }
[[gnu::always_inline]] inline V min(V a, V b) { return _mm256_min_ps(a, b); }
[[gnu::always_inline]] inline V sqrt(V a) { return _mm256_sqrt_ps(a); }
[[gnu::always_inline]] inline float reduce_add(V a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
[[gnu::always_inline]] inline float reduce_max(V a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
[[gnu::always_inline]] inline V select_lt(V a, V b, V then, V otherwise) {
  return _mm256_blendv_ps(otherwise, then, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
[[gnu::always_inline]] inline V round_nearest(V a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
[[gnu::always_inline]] inline V exp2_int(V n) {
  const VI bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_castsi256_ps(bits);
}

#else

inline constexpr int W = 1;
inline constexpr const char* kIsa = "scalar";
using V = float;
inline V zero() { return 0.0f; }
inline V set1(float x) { return x; }
inline V load(const float* p) { return *p; }
inline void store(float* p, V v) { *p = v; }
inline V add(V a, V b) { return a + b; }
inline V sub(V a, V b) { return a - b; }
inline V mul(V a, V b) { return a * b; }
inline V div(V a, V b) { return a / b; }
inline V fmadd(V a, V b, V c) { return std::fma(a, b, c); }
inline V max(V a, V b) { return a > b ? a : b; }
inline V min(V a, V b) { return a < b ? a : b; }
inline V sqrt(V a) { return std::sqrt(a); }
inline float reduce_add(V a) { return a; }
inline float reduce_max(V a) { return a; }
inline V select_lt(V a, V b, V then, V otherwise) { return a < b ? then : otherwise; }
inline V round_nearest(V a) { return std::nearbyint(a); }
inline V exp2_int(V n) {
  return std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

#endif

// exp(x) with ~2 ulp error on [-87.3, 88.3]; 0 below (softmax tails), clamped above.
// Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2, then a degree-6 Taylor polynomial
// (truncation r^7/7! < 2e-7 relative).
[[gnu::always_inline]] inline V exp(V x) {
  const V lo = set1(-87.3365447505531f);
  const V is_tiny = select_lt(x, lo, set1(1.0f), zero());
  x = min(max(x, lo), set1(88.3762626647949f));
  const V n = round_nearest(mul(x, set1(1.44269504088896341f)));
  V r = fmadd(n, set1(-0.693359375f), x);  // ln2 = 0.693359375 - 2.12194440e-4
  r = fmadd(n, set1(2.12194440e-4f), r);
  V p = set1(1.0f / 720.0f);
  p = fmadd(p, r, set1(1.0f / 120.0f));
  p = fmadd(p, r, set1(1.0f / 24.0f));
  p = fmadd(p, r, set1(1.0f / 6.0f));
  p = fmadd(p, r, set1(0.5f));
  p = fmadd(p, r, set1(1.0f));
  p = fmadd(p, r, set1(1.0f));
  const V result = mul(p, exp2_int(n));
  return select_lt(is_tiny, set1(0.5f), result, zero());
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): absolute error ~1e-7 (what GELU needs: it multiplies
// tanh by 0.5 x); clamped where tanh is 1 to fp32 precision.
[[gnu::always_inline]] inline V tanh(V u) {
  u = min(max(u, set1(-9.0f)), set1(9.0f));
  const V e = exp(add(u, u));
  return sub(set1(1.0f), div(set1(2.0f), add(e, set1(1.0f))));
}

// Scalar twins used for the tails of W-wide loops, so a tail element gets the same math.
inline float exp_scalar(float x) {
  if (x < -87.3365447505531f) return 0.0f;
  x = std::min(x, 88.3762626647949f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}
inline float tanh_scalar(float u) {
  u = std::min(std::max(u, -9.0f), 9.0f);
  return 1.0f - 2.0f / (exp_scalar(2.0f * u) + 1.0f);
}

}  // namespace forge::kernels::simd
