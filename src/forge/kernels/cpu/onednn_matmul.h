// oneDNN's matmul primitive behind a GEMM-shaped call (kernels/gemm.h conventions: row-major,
// C[M,N] = op(A) op(B) + beta C, op = transpose when asked). Only compiled with
// FORGE_HAVE_DNNL.
//
// Why the primitive besides dnnl_sgemm: it is the only oneDNN route to bf16 operands with fp32
// accumulation and output, and on AVX-512 it runs some of the linear layers' forward GEMMs
// (x W^T) faster than the BLAS-like entry point (see gemm_backend_for).
#pragma once

#include <cstddef>
#include <cstdint>

namespace forge::kernels::cpu {

enum class OneDnnType { kF32, kBf16 };  // of A and B; C is always fp32

// A and B point to floats (kF32) or to bf16 bit patterns (uint16_t, kBf16). One primitive per
// (type, shape, strides, beta) is made on first use and kept for the process: a training step
// repeats the same few shapes, so from the second step on nothing is created.
// bias (may be null): N fp32 values added to every row of the product inside the primitive's
// epilogue, C = op(A) op(B) + bias + beta C. Cheaper than starting C from the bias with
// beta = 1, which writes C once more and reads it back.
//
// b_blocked (may be null): onednn_blocked_b_bytes(type, K, N) bytes, not aliasing anything,
// where B is first reordered into the layout the primitive prefers (its "any" format: on
// AVX-512, 64 columns by 16 or 32 rows per block). The primitive then reads B as it is instead
// of repacking it on the fly: for B = W^T of the linear layers' forward, up to 1.1x (fp32) and
// 1.2x (bf16) faster with the reorder counted at M = 2048. Used from M = 1024 rows on in bf16
// and 2048 in fp32 (below, the reorder costs about what it saves; the figures are in the
// .cpp), only where the layout
// fits the bound, and only where it is a blocked one: the reorder then only moves B, and the
// same kernel multiplies it, so the bits are the same either way
// (tests/unit/test_onednn_matmul.cpp, which also runs under DNNL_MAX_CPU_ISA=AVX2, where
// oneDNN picks a plain layout and nothing is reordered).
void onednn_matmul(OneDnnType type, bool transA, bool transB, int M, int N, int K, const void* A,
                   int lda, const void* B, int ldb, float beta, float* C, int ldc,
                   const float* bias = nullptr, void* b_blocked = nullptr);

// The bytes b_blocked must have for op(B) of K x N: rows and columns rounded up to 64.
size_t onednn_blocked_b_bytes(OneDnnType type, int K, int N);
// The same room in floats, for callers that plan it in float buffers.
inline size_t onednn_blocked_b_floats(OneDnnType type, int K, int N) {
  return (onednn_blocked_b_bytes(type, K, N) + sizeof(float) - 1) / sizeof(float);
}

// Whether the oneDNN ISA `have` has every feature of `wanted` (both dnnl_cpu_isa_t values).
// oneDNN's ISA values are bit sets, not an order: avx2_vnni (0x407) is numerically above
// avx512_core_bf16 (0xe7) and avx512_core_amx (0x3e7) without having AVX-512, so comparing
// them with >= would take an AVX-VNNI laptop for a bf16 or AMX machine.
constexpr bool onednn_isa_includes(unsigned have, unsigned wanted) {
  return (have & wanted) == wanted;
}
// The same question of the ISA oneDNN runs with in this process (dnnl_get_effective_cpu_isa:
// the CPU's, capped by DNNL_MAX_CPU_ISA or ONEDNN_MAX_CPU_ISA; fixed once oneDNN has run).
bool onednn_runs_isa(unsigned wanted);

}  // namespace forge::kernels::cpu
