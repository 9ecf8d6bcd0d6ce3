// The pieces of ATen's CPU vectorisation layer that the torch-cpu profile must reproduce
// exactly: Vectorized<float> at CPU_CAPABILITY_AVX2 (8 lanes, Sleef u10 transcendentals), the
// reduction helpers of aten/src/ATen/cpu/vec/functional_base.h (reduce_all, map_reduce_all,
// map2_reduce_all, map*), and at::parallel_for's OpenMP split (aten/src/ATen/ParallelOpenMP.h)
// plus TensorIterator's elementwise chunking (cpu/Loops.h vectorized_loop), because where a
// chunk starts decides which elements take the scalar tail.
//
// Everything here is written with explicit intrinsics, and every torch_cpu_*.cpp is compiled
// with `#pragma GCC optimize("fp-contract=off")` (g++ contracts by default in C++, even with
// -std=c++20): an FMA appears exactly where ATen's kernel rounds once, which the per-op tests
// decide against torch's bits (measured: ATen's explicit vec::fmadd is an FMA; products
// written as `a * b + c` in its AVX2 kernels round twice).
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__)
#error \
    "the torch-cpu profile replicates ATen's AVX2 kernels: build with -mavx2 -mfma (or -march=native on an AVX2 machine)"
#endif

#include <immintrin.h>
#include <omp.h>
#include <sleef.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace forge::tcpu {

inline constexpr int64_t kVec = 8;            // Vectorized<float>::size() under AVX2
inline constexpr int64_t kGrainSize = 32768;  // at::internal::GRAIN_SIZE

inline int64_t divup(int64_t a, int64_t b) { return (a + b - 1) / b; }

// at::get_num_threads(): the engine pins OpenMP's thread count to torch.set_num_threads().
inline int torch_threads() { return omp_get_max_threads(); }

// at::parallel_for (ParallelOpenMP.h invoke_parallel): each of min(threads, ceil(n/grain))
// threads takes one contiguous chunk of ceil(n/threads). f(begin, end, tid).
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (begin >= end) return;
  const int64_t numiter = end - begin;
  const int nt = torch_threads();
  if (!(numiter > grain && numiter > 1 && nt > 1) || omp_in_parallel()) {
    f(begin, end, 0);
    return;
  }
#pragma omp parallel
  {
    int64_t num_threads = omp_get_num_threads();
    if (grain > 0) num_threads = std::min(num_threads, divup(numiter, grain));
    const int64_t tid = omp_get_thread_num();
    const int64_t chunk = divup(numiter, num_threads);
    const int64_t b = begin + tid * chunk;
    if (b < end) f(b, std::min(end, b + chunk), static_cast<int>(tid));
  }
}

// TensorIteratorBase::for_each on a contiguous 1-D iteration space: serial below the grain or
// with one thread, otherwise at::parallel_for over [0, n). f(begin, end).
template <typename F>
void for_each_chunk(int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  if (n < grain || torch_threads() == 1) {
    f(int64_t{0}, n);
    return;
  }
  parallel_for(0, n, grain, [&](int64_t b, int64_t e, int) { f(b, e); });
}

// ---- Vectorized<float> (aten/src/ATen/cpu/vec/vec256/vec256_float.h) -------------------
using V = __m256;

inline V vset1(float x) { return _mm256_set1_ps(x); }
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
// Vectorized<float>::loadu(ptr, count): the missing lanes are zero.
inline V vload(const float* p, int64_t count) {
  alignas(32) float tmp[kVec] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tmp, p, static_cast<size_t>(count) * sizeof(float));
  return _mm256_load_ps(tmp);
}
inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline void vstore(float* p, V v, int64_t count) {
  alignas(32) float tmp[kVec];
  _mm256_store_ps(tmp, v);
  std::memcpy(p, tmp, static_cast<size_t>(count) * sizeof(float));
}
// Vectorized<float>::set(a, b, count): the first count lanes from b, the rest from a.
inline V vset(V a, V b, int64_t count) {
  alignas(32) float ta[kVec], tb[kVec];
  _mm256_store_ps(ta, a);
  _mm256_store_ps(tb, b);
  for (int64_t i = 0; i < count; ++i) ta[i] = tb[i];
  return _mm256_load_ps(ta);
}
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vdiv(V a, V b) { return _mm256_div_ps(a, b); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }    // a*b + c
inline V vfms(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }    // a*b - c
inline V vfnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a*b
// at::vec::maximum: IEEE maximum that propagates NaN.
inline V vmax(V a, V b) {
  V m = _mm256_max_ps(a, b);
  V isnan = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
  return _mm256_or_ps(m, isnan);
}
inline V vexp(V a) { return Sleef_expf8_u10(a); }
inline V vlog(V a) { return Sleef_logf8_u10(a); }
inline V vtanh(V a) { return Sleef_tanhf8_u10(a); }
inline V vsqrt(V a) { return _mm256_sqrt_ps(a); }

// ---- functional_base.h ------------------------------------------------------------------
struct AddOp {
  V operator()(V a, V b) const { return vadd(a, b); }
};
struct MaxOp {
  V operator()(V a, V b) const { return vmax(a, b); }
};

// vec_reduce_all(op, acc, size) for size < 8: lane 0 folds lanes 1..size-1 in order.
template <typename Op>
float vec_reduce_all_n(const Op& op, V acc, int64_t size) {
  alignas(32) float arr[kVec];
  _mm256_store_ps(arr, acc);
  for (int64_t i = 1; i < size; ++i) {
    alignas(32) float next[kVec] = {0, 0, 0, 0, 0, 0, 0, 0};
    next[0] = arr[i];
    acc = op(acc, _mm256_load_ps(next));
  }
  _mm256_store_ps(arr, acc);
  return arr[0];
}

// VecReduceAllSIMD<float> under AVX2: 128-bit, 64-bit, then 32-bit shuffle tree.
template <typename Op>
float vec_reduce_all(const Op& op, V v) {
  V v1 = _mm256_permute2f128_ps(v, v, 0x1);
  v = op(v, v1);
  v1 = _mm256_shuffle_ps(v, v, 0x4E);
  v = op(v, v1);
  v1 = _mm256_shuffle_ps(v, v, 0xB1);
  v = op(v, v1);
  return _mm256_cvtss_f32(v);
}

template <typename Op>
float reduce_all(const Op& op, const float* data, int64_t size) {
  if (size < kVec) return vec_reduce_all_n(op, vload(data, size), size);
  int64_t d = kVec;
  V acc = vload(data);
  for (; d < size - (size % kVec); d += kVec) acc = op(acc, vload(data + d));
  if (size - d > 0) acc = vset(acc, op(acc, vload(data + d, size - d)), size - d);
  return vec_reduce_all(op, acc);
}

// map_reduce_all / map2_reduce_all / map3_reduce_all with the reduction fused into the map
// (torch's GCC build contracts `acc + x*y` into one FMA once the lambdas are inlined), so the
// caller passes `fold(acc, inputs...)` for the steady state and `map(inputs...)` for the first
// vector and the short case.
template <typename Map, typename Fold, typename Op>
float map_reduce_all(const Map& map, const Fold& fold, const Op& op, const float* a, int64_t size) {
  if (size < kVec) return vec_reduce_all_n(op, map(vload(a, size)), size);
  int64_t d = kVec;
  V acc = map(vload(a));
  for (; d < size - (size % kVec); d += kVec) acc = fold(acc, vload(a + d));
  if (size - d > 0) acc = vset(acc, fold(acc, vload(a + d, size - d)), size - d);
  return vec_reduce_all(op, acc);
}

template <typename Map, typename Fold, typename Op>
float map2_reduce_all(const Map& map, const Fold& fold, const Op& op, const float* a,
                      const float* b, int64_t size) {
  if (size < kVec) return vec_reduce_all_n(op, map(vload(a, size), vload(b, size)), size);
  int64_t d = kVec;
  V acc = map(vload(a), vload(b));
  for (; d < size - (size % kVec); d += kVec) acc = fold(acc, vload(a + d), vload(b + d));
  if (size - d > 0)
    acc = vset(acc, fold(acc, vload(a + d, size - d), vload(b + d, size - d)), size - d);
  return vec_reduce_all(op, acc);
}

template <typename Map, typename Fold, typename Op>
float map3_reduce_all(const Map& map, const Fold& fold, const Op& op, const float* a,
                      const float* b, const float* c, int64_t size) {
  if (size < kVec)
    return vec_reduce_all_n(op, map(vload(a, size), vload(b, size), vload(c, size)), size);
  int64_t d = kVec;
  V acc = map(vload(a), vload(b), vload(c));
  for (; d < size - (size % kVec); d += kVec)
    acc = fold(acc, vload(a + d), vload(b + d), vload(c + d));
  if (size - d > 0) {
    const int64_t r = size - d;
    acc = vset(acc, fold(acc, vload(a + d, r), vload(b + d, r), vload(c + d, r)), r);
  }
  return vec_reduce_all(op, acc);
}

// vec::map / map2 / map3: full vectors, then one zero-padded partial vector.
template <typename F>
void map(const F& f, float* out, const float* a, int64_t size) {
  int64_t d = 0;
  for (; d < size - (size % kVec); d += kVec) vstore(out + d, f(vload(a + d)));
  if (size - d > 0) vstore(out + d, f(vload(a + d, size - d)), size - d);
}
template <typename F>
void map2(const F& f, float* out, const float* a, const float* b, int64_t size) {
  int64_t d = 0;
  for (; d < size - (size % kVec); d += kVec) vstore(out + d, f(vload(a + d), vload(b + d)));
  if (size - d > 0) vstore(out + d, f(vload(a + d, size - d), vload(b + d, size - d)), size - d);
}
template <typename F>
void map3(const F& f, float* out, const float* a, const float* b, const float* c, int64_t size) {
  int64_t d = 0;
  for (; d < size - (size % kVec); d += kVec)
    vstore(out + d, f(vload(a + d), vload(b + d), vload(c + d)));
  if (size - d > 0) {
    const int64_t r = size - d;
    vstore(out + d, f(vload(a + d, r), vload(b + d, r), vload(c + d, r)), r);
  }
}

// cpu_kernel_vec over contiguous operands (cpu/Loops.h vectorized_loop): within each chunk,
// pairs of vectors from the chunk's start, then the scalar lambda for what is left.
// vf(i) computes and stores the 8 elements at i; sf(i) one element.
template <typename VF, typename SF>
void elementwise(int64_t n, int64_t grain, const VF& vf, const SF& sf) {
  for_each_chunk(n, grain, [&](int64_t b, int64_t e) {
    int64_t i = b;
    for (; i <= e - 2 * kVec; i += 2 * kVec) {
      vf(i);
      vf(i + kVec);
    }
    for (; i < e; ++i) sf(i);
  });
}

}  // namespace forge::tcpu
