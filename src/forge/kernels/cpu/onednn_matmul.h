// oneDNN's matmul primitive behind a GEMM-shaped call (kernels/gemm.h conventions: row-major,
// C[M,N] = op(A) op(B) + beta C, op = transpose when asked). Only compiled with
// FORGE_HAVE_DNNL.
//
// Why the primitive besides dnnl_sgemm: it is the only oneDNN route to bf16 operands with fp32
// accumulation and output, and on AVX-512 it runs some of the linear layers' forward GEMMs
// (x W^T) faster than the BLAS-like entry point (see gemm_backend_for).
#pragma once

#include <cstdint>

namespace forge::kernels::cpu {

enum class OneDnnType { kF32, kBf16 };  // of A and B; C is always fp32

// A and B point to floats (kF32) or to bf16 bit patterns (uint16_t, kBf16). One primitive per
// (type, shape, strides, beta) is made on first use and kept for the process: a training step
// repeats the same few shapes, so from the second step on nothing is created.
// bias (may be null): N fp32 values added to every row of the product inside the primitive's
// epilogue, C = op(A) op(B) + bias + beta C. Cheaper than starting C from the bias with
// beta = 1, which writes C once more and reads it back.
void onednn_matmul(OneDnnType type, bool transA, bool transB, int M, int N, int K, const void* A,
                   int lda, const void* B, int ldb, float beta, float* C, int ldc,
                   const float* bias = nullptr);

}  // namespace forge::kernels::cpu
