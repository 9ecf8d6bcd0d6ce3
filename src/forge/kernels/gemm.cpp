#include "forge/kernels/gemm.h"

#include <cblas.h>

#include <cstddef>

namespace forge::kernels {

namespace scalar {

template <typename Real>
void gemm(bool transA, bool transB, int M, int N, int K, const Real* A, int lda, const Real* B,
          int ldb, Real beta, Real* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      Real acc = 0;
      for (int k = 0; k < K; ++k) {
        const Real a = transA ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        const Real b = transB ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
        acc += a * b;
      }
      Real& c = C[static_cast<size_t>(i) * ldc + j];
      c = (beta == Real(0) ? Real(0) : beta * c) + acc;
    }
}

template void gemm<float>(bool, bool, int, int, int, const float*, int, const float*, int, float,
                          float*, int);
template void gemm<double>(bool, bool, int, int, int, const double*, int, const double*, int,
                           double, double*, int);

}  // namespace scalar

namespace cpu {

void gemm(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace cpu

}  // namespace forge::kernels
