#include "forge/kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>

#ifdef FORGE_HAVE_DNNL
#include <dnnl.h>

#include "forge/kernels/cpu/onednn_matmul.h"
#endif

#include "forge/core/error.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/simd.h"
#include "forge/kernels/cpu/thread_share.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void gemm(bool transA, bool transB, int M, int N, int K, const Real* A, int lda, const Real* B,
          int ldb, Real beta, Real* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      Real acc = 0;
      for (int k = 0; k < K; ++k) {
        const Real a =
            transA ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        const Real b =
            transB ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
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

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/gemm.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::kOpenBLAS:
      return "openblas";
    case GemmBackend::kOneDNN:
      return "onednn";
    case GemmBackend::kOneDnnMatmul:
      return "onednn_matmul";
    default:
      return "forge";
  }
}

bool gemm_backend_available(GemmBackend b) {
#ifdef FORGE_HAVE_DNNL
  return true;
#else
  return b != GemmBackend::kOneDNN && b != GemmBackend::kOneDnnMatmul;
#endif
}

GemmBackend gemm_backend_for(bool transA, bool transB, int M, int N, int K) {
  // oneDNN runs on the same OpenMP team as every other kernel of the step; OpenBLAS brings a
  // second pool of spinning threads onto the same cores. Measured figures: bench_kernels.
#ifdef FORGE_HAVE_DNNL
  // x W^T (B transposed, the linear layers' forward): on the AVX-512 CPU where this was set the
  // matmul primitive (which also adds the bias in its epilogue) was at least as fast as
  // dnnl_sgemm on every forward shape of small and gpt2-124m and 1.2x on the MLP's output
  // projection (K = 4C) (bench_kernels, gemm/onednn_matmul vs gemm/onednn, median of 3); on a
  // later Xeon with AMX dnnl_sgemm ran most of those shapes a little faster and the MLP's output
  // projection slower, so the choice is a CPU's, not settled. The backward shapes ran at least
  // as fast on dnnl_sgemm on AVX-512 and stay there.
  if (transB && !transA) return GemmBackend::kOneDnnMatmul;
  // A weight gradient (dout^T x, transA) with a small output and a long sum over tokens:
  // dnnl_sgemm's AVX2 code ran most such shapes slower than forge's kernel on a Zen 3 (small's
  // attn_proj and lm_head, llama-small's o_proj and k_proj in bench_kernels, interleaved
  // repetitions, in the sessions on that CPU; not in the README's latest benchmark, which ran
  // on AVX-512). On larger outputs
  // neither backend was ahead from run to run, so they stay on dnnl_sgemm. The rule is AVX2's,
  // both sides: on AVX-512 dnnl_sgemm ran these as fast (above), and forge limited to AVX2
  // (FORGE_CPU_ISA) on an AVX-512 CPU would race oneDNN's AVX-512.
  constexpr long kSmallWeightGradient = 512L * 512;
  if (transA && !transB && active_isa() == Isa::kAvx2 &&
      !onednn_runs_isa(dnnl_cpu_isa_avx512_core) &&
      static_cast<long>(M) * N <= kSmallWeightGradient)
    return GemmBackend::kForge;
  return GemmBackend::kOneDNN;
#else
  return GemmBackend::kOpenBLAS;
#endif
}

void gemm_with(GemmBackend backend, bool transA, bool transB, int M, int N, int K, const float* A,
               int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  switch (backend) {
    case GemmBackend::kOpenBLAS:
      cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                  transB ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
      return;
    case GemmBackend::kOneDNN: {
#ifdef FORGE_HAVE_DNNL
      const dnnl_status_t st = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, 1.0f, A,
                                          lda, B, ldb, beta, C, ldc);
      FORGE_CHECK(st == dnnl_success, "dnnl_sgemm failed with status {}", static_cast<int>(st));
      return;
#else
      fail("gemm backend 'onednn' is not built in (configure with FORGE_HAVE_DNNL)");
#endif
    }
    case GemmBackend::kOneDnnMatmul:
#ifdef FORGE_HAVE_DNNL
      onednn_matmul(OneDnnType::kF32, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
      return;
#else
      fail("gemm backend 'onednn_matmul' is not built in (configure with FORGE_HAVE_DNNL)");
#endif
    case GemmBackend::kForge:
      FORGE_SIMD_DISPATCH(gemm(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc));
  }
}

void gemm(bool transA, bool transB, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  gemm_with(gemm_backend_for(transA, transB, M, N, K), transA, transB, M, N, K, A, lda, B, ldb,
            beta, C, ldc);
}

}  // namespace cpu

}  // namespace forge::kernels
