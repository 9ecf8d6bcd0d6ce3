// The bf16 linear layer's products on AMX tiles: out[M, N] = x[M, K] B[K, N] + bias with B the
// weight packed into tiles: W[N, K]^T for the forward (x W^T), W[K, N] for the input gradient
// (dout W). x and W are packed bf16 (uint16_t bit patterns, row-major); fp32 accumulation and
// output. Each output element is summed over k = 0, 1, ..., K-1 in pairs (TDPBF16PS) by one
// thread, whatever the thread count: the same bits on any team.
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
// packed = B = W^T for W [N, K] (the forward's): per 16 output columns and 32 of K, one tile
// of 16 rows of K pairs by 16 columns. Requires amx_linear_fits(any M, N, K).
void amx_pack_weight(float* packed, const uint16_t* weight, int N, int K);
// packed = B = W for W [K, N] (the input gradient's: K = the layer's outputs), the same tiles.
void amx_pack_weight_for_dinp(float* packed, const uint16_t* weight, int K, int N);

// out = x B + bias (bias may be null), B packed by either function. Requires
// amx_tiles_available() and amx_linear_fits(M, N, K).
void amx_matmul(float* out, const uint16_t* x, const float* packed, const float* bias, int M, int N,
                int K);

}  // namespace forge::kernels::cpu
