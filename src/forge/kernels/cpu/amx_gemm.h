// The bf16 linear layer's forward product on AMX tiles: out[M, N] = x[M, K] W[N, K]^T + bias,
// x and W as packed bf16 (uint16_t bit patterns, row-major), fp32 accumulation and output.
// Each output element is summed over k = 0, 1, ..., K-1 in pairs (TDPBF16PS) by one thread,
// whatever the thread count: the same bits on any team.
//
// Why forge's own: in the bf16 step of `small` on an AMX core (Xeon, Emerald Rapids) the
// linear layers' forward took 31-36 ms per step on it against 41-50 ms on oneDNN 2.6's bf16
// matmul (three interleaved runs, `forge bench --breakdown` with FORGE_BF16_AMX=1 and 0). In
// isolation (bench_kernels gemm/amx_bf16 against gemm/onednn_bf16 and onednn_bf16_blocked,
// its packing counted) it beat oneDNN with its reorder on every forward shape of small and
// gpt2-124m but one, and oneDNN reading W as it is on 3 of the 10 (both classifiers and
// small's MLP projection). It takes whole tiles only: M, N and K multiples of 32 (the model shapes
// of small, gpt2-124m and llama-small are); other shapes stay on oneDNN.
#pragma once

#include <cstddef>
#include <cstdint>

namespace forge::kernels::cpu {

// True when the shape is one this kernel takes (multiples of 32, none zero).
bool amx_linear_fits(int M, int N, int K);

// W packed as the kernel's B tiles read it, in floats: N * K bf16 values.
size_t amx_packed_weight_floats(int N, int K);
// packed = W [N, K] as B tiles: per 16 output columns and 32 of K, one tile of 16 rows of K
// pairs by 16 columns. Requires amx_linear_fits(any M, N, K).
void amx_pack_weight(float* packed, const uint16_t* weight, int N, int K);

// out = x packed^T + bias (bias may be null). Requires amx_tiles_available() and
// amx_linear_fits(M, N, K); packed from amx_pack_weight.
void amx_linear_forward(float* out, const uint16_t* x, const float* packed, const float* bias,
                        int M, int N, int K);

}  // namespace forge::kernels::cpu
