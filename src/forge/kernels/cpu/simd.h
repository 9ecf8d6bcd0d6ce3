// A thin SIMD layer for the hand-vectorised kernels: one register type and the handful of
// operations they use, defined three times regardless of the compiler flags:
//   simd::avx512  (16 lanes; AVX-512F/DQ/BW/VL),  simd::avx2  (8 lanes; AVX2 + FMA),
//   simd::generic (1 lane; plain C++, any x86-64).
// A kernel's SIMD source is compiled once per ISA under the matching target attribute (see
// FORGE_SIMD_VARIANTS in dispatch.h) and the best variant the CPU supports runs.
// Intrinsics rather than the auto-vectoriser because GCC will not if-convert float selects
// under -ftrapping-math, does not contract a*b+c into FMA under -std=c++20, and tunes
// znver1 (what -march=native detects on this VM) for 128-bit vectors.
#pragma once

// GCC 12 reports (maybe-)uninitialized use inside its own AVX-512 intrinsics (the
// _mm512_undefined_* they start from) once they are inlined; silence it for those header
// lines only (diagnostic state is recorded per source location).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")
namespace forge::kernels::simd::avx512 {

inline constexpr int W = 16;
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
// 1 / a to within ~2 ulp for normal a, without a divide (whose one port takes ~10 cycles
// per vector): the 14-bit estimate and one Newton step.
[[gnu::always_inline]] inline V recip(V a) {
  const V r = _mm512_rcp14_ps(a);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(a, r, _mm512_set1_ps(2.0f)));
}
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
// p 2^n for integral-valued n in [-126, 127], one instruction (exact: the product by 2^n the
// other layers build from n's bits).
[[gnu::always_inline]] inline V times_exp2(V p, V n) { return _mm512_scalef_ps(p, n); }

#include "forge/kernels/cpu/simd_math.inc"

}  // namespace forge::kernels::simd::avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace forge::kernels::simd::avx2 {

inline constexpr int W = 8;
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
// The 12-bit estimate and one Newton step: ~2^-23 relative.
[[gnu::always_inline]] inline V recip(V a) {
  const V r = _mm256_rcp_ps(a);
  return _mm256_mul_ps(r, _mm256_fnmadd_ps(a, r, _mm256_set1_ps(2.0f)));
}
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
// p 2^n for integral-valued n in [-126, 127]: 2^n built from n's bits.
[[gnu::always_inline]] inline V times_exp2(V p, V n) {
  const VI biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)));
}

#include "forge/kernels/cpu/simd_math.inc"

}  // namespace forge::kernels::simd::avx2
#pragma GCC pop_options

namespace forge::kernels::simd::generic {

inline constexpr int W = 1;
using V = float;
inline V zero() { return 0.0f; }
inline V set1(float x) { return x; }
inline V load(const float* p) { return *p; }
inline void store(float* p, V v) { *p = v; }
inline V add(V a, V b) { return a + b; }
inline V sub(V a, V b) { return a - b; }
inline V mul(V a, V b) { return a * b; }
inline V div(V a, V b) { return a / b; }
inline V recip(V a) { return 1.0f / a; }
inline V fmadd(V a, V b, V c) { return a * b + c; }  // no FMA assumed on baseline x86-64
inline V max(V a, V b) { return a > b ? a : b; }
inline V min(V a, V b) { return a < b ? a : b; }
inline V sqrt(V a) { return std::sqrt(a); }
inline float reduce_add(V a) { return a; }
inline float reduce_max(V a) { return a; }
inline V select_lt(V a, V b, V then, V otherwise) { return a < b ? then : otherwise; }
inline V round_nearest(V a) { return std::nearbyint(a); }
inline V times_exp2(V p, V n) {
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

#include "forge/kernels/cpu/simd_math.inc"

}  // namespace forge::kernels::simd::generic

// Compile-time choice, for kernels that have not moved to run-time dispatch: `simd::` names
// the widest layer the translation unit's own flags allow (-march=native picks it).
namespace forge::kernels::simd {
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__)
using namespace avx512;
#elif defined(__AVX2__) && defined(__FMA__)
using namespace avx2;
#else
using namespace generic;
#endif
}  // namespace forge::kernels::simd
