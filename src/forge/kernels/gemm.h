// General matrix multiply, row-major: C[M,N] = op(A)[M,K] op(B)[K,N] + beta C
// with op(X) = X or X^T (transA: A is stored [K,M]; transB: B is stored [N,K]).
#pragma once

namespace forge::kernels {

namespace scalar {
template <typename Real>
void gemm(bool transA, bool transB, int M, int N, int K, const Real* A, int lda, const Real* B,
          int ldb, Real beta, Real* C, int ldc);
}  // namespace scalar

namespace cpu {
void gemm(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);
}  // namespace cpu

}  // namespace forge::kernels
