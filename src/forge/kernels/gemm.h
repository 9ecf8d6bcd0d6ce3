// General matrix multiply, row-major: C[M,N] = op(A)[M,K] op(B)[K,N] + beta C
// with op(X) = X or X^T (transA: A is stored [K,M]; transB: B is stored [N,K]).
//
// Four implementations, chosen per shape by cpu::gemm (see gemm_backend_for):
//  - OpenBLAS (cblas_sgemm, the system libblas.so.3; its own pthread pool),
//  - oneDNN's BLAS-like dnnl_sgemm and oneDNN's matmul primitive (kernels/cpu/onednn_matmul.h),
//    both on the OpenMP team, so they share threads with the other kernels instead of
//    competing with them, when built with FORGE_HAVE_DNNL,
//  - forge's own packed kernel (MR x NR register tile on the SIMD layer; each thread of the
//    team packs and computes one contiguous share of C).
#pragma once

namespace forge::kernels {

namespace scalar {
template <typename Real>
void gemm(bool transA, bool transB, int M, int N, int K, const Real* A, int lda, const Real* B,
          int ldb, Real beta, Real* C, int ldc);
}  // namespace scalar

namespace cpu {

enum class GemmBackend { kOpenBLAS, kOneDNN, kOneDnnMatmul, kForge };
const char* gemm_backend_name(GemmBackend b);
bool gemm_backend_available(GemmBackend b);
// The backend cpu::gemm uses for this shape (a fixed rule, so that every process of a run
// makes the same choice and results stay reproducible across resume).
GemmBackend gemm_backend_for(bool transA, bool transB, int M, int N, int K);

void gemm(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);
void gemm_with(GemmBackend backend, bool transA, bool transB, int M, int N, int K, const float* A,
               int lda, const float* B, int ldb, float beta, float* C, int ldc);
}  // namespace cpu

}  // namespace forge::kernels
