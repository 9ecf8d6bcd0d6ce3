// Small dense products on cache-resident tiles, for kernels that fuse several matrix
// products with elementwise work in between (attention). Not a general GEMM: no packing,
// no cache blocking; the operands are expected to be a few KB each.
//
//   C[M, N] += A[M, K] B[K, N]
// A is addressed through strides (element (i, k) at A[i * a_row + k * a_col]), so passing
// swapped strides multiplies by A^T without a copy; B and C are row-major with leading
// dimensions ldb and ldc.
#pragma once

#include "forge/kernels/cpu/simd.h"

namespace forge::kernels::tile {

namespace detail {

// MR rows by NV vectors of columns, the accumulators held in registers over all of K.
template <int MR, int NV>
[[gnu::always_inline]] inline void micro(int K, const float* A, int a_row, int a_col,
                                         const float* B, int ldb, float* C, int ldc) {
  using namespace simd;
  V c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = load(C + r * ldc + v * W);
  for (int k = 0; k < K; ++k) {
    V b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load(B + static_cast<long>(k) * ldb + v * W);
    for (int r = 0; r < MR; ++r) {
      const V a = set1(A[static_cast<long>(r) * a_row + static_cast<long>(k) * a_col]);
      for (int v = 0; v < NV; ++v) c[r][v] = fmadd(a, b[v], c[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store(C + r * ldc + v * W, c[r][v]);
}

template <int MR>
[[gnu::always_inline]] inline void rows(int N, int K, const float* A, int a_row, int a_col,
                                        const float* B, int ldb, float* C, int ldc) {
  constexpr int W = simd::W;
  int n = 0;
  for (; n + 2 * W <= N; n += 2 * W) micro<MR, 2>(K, A, a_row, a_col, B + n, ldb, C + n, ldc);
  for (; n + W <= N; n += W) micro<MR, 1>(K, A, a_row, a_col, B + n, ldb, C + n, ldc);
  for (; n < N; ++n)
    for (int r = 0; r < MR; ++r) {
      float acc = C[r * ldc + n];
      for (int k = 0; k < K; ++k)
        acc += A[static_cast<long>(r) * a_row + static_cast<long>(k) * a_col] *
               B[static_cast<long>(k) * ldb + n];
      C[r * ldc + n] = acc;
    }
}

}  // namespace detail

inline void gemm_acc(int M, int N, int K, const float* A, int a_row, int a_col, const float* B,
                     int ldb, float* C, int ldc) {
  int m = 0;
  for (; m + 4 <= M; m += 4)
    detail::rows<4>(N, K, A + static_cast<long>(m) * a_row, a_row, a_col, B, ldb,
                    C + static_cast<long>(m) * ldc, ldc);
  for (; m < M; ++m)
    detail::rows<1>(N, K, A + static_cast<long>(m) * a_row, a_row, a_col, B, ldb,
                    C + static_cast<long>(m) * ldc, ldc);
}

}  // namespace forge::kernels::tile
