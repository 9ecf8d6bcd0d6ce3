// attention.h's causal attention with bf16 matmul operands and fp32 accumulation, on CPUs
// with bf16 dot products (avx512_bf16: VDPBF16PS). The five products -- q k^T and p v
// forward; dout v^T, p^T dout (dv), ds k (dq) and ds^T q (dk) backward -- take operands
// rounded to bf16 (to nearest even; denormals flush to zero): q, k, v and dout once per head,
// the probabilities p and score gradients ds once per tile. The softmax with its running
// maximum and sum, lse, D = dout . out, the scale and every accumulator stay fp32: the
// arithmetic of PyTorch's CPU autocast, which runs attention's matmuls in bf16.
//
// The same kernels serve gqa_attention.h's grouped-query attention (Llama): a task packs one
// kv head once for its group of query heads and sums their dk, dv in fp32. With fewer
// (sequence, kv head) pairs than keep the threads busy, forward's tasks are single query heads
// and backward's runs of key tiles (dk, dv), then runs of query tiles (dq); the bits do not
// depend on the thread count.
//
// On CPUs with AMX (amx_bf16) the products run on AMX tiles instead (TDPBF16PS: 16 x 16 fp32
// accumulators, 16 bf16 pairs summed into each per instruction), from the same packs with their
// summed index padded with zeros to whole tiles: the same roundings and fp32 accumulation, not
// always the same bits as VDPBF16PS (the same error bound). FORGE_BF16_AMX=0 keeps VDPBF16PS.
//
// Tiling as in attention.h's fp32 kernel (query tiles against key tiles, online softmax, p
// recomputed in backward, no T x T matrix). Each thread packs the head it works on into
// its share of `workspace` in the layouts VDPBF16PS reads: a product's B operand as pairs
// along the summed index ("VNNI"), its A operand as rows of pairs.
#pragma once

#include <cstddef>

#include "forge/kernels/cpu/amx.h"  // amx_tiles_available
#include "forge/kernels/gqa_attention.h"

namespace forge::kernels::cpu {

// True when the CPU has avx512_bf16 (and AVX-512 is the active ISA).
bool attention_bf16_available();

// What multiplies the bf16 operands: VDPBF16PS on AVX-512 registers, or AMX tiles.
enum class Bf16Products { kDotProducts, kAmxTiles };

// AMX tiles where available, unless FORGE_BF16_AMX=0; else VDPBF16PS.
Bf16Products attention_bf16_products();

// lse [B, NH, T] (query heads).
size_t attention_bf16_saved_floats(int B, int T, int NH);
// Per-thread packs for `threads` threads, for heads of hd channels and up to T positions
// (either kind of products).
size_t attention_bf16_workspace_floats(int T, int hd, int threads);

// Same arguments as attention.h's kernels, plus the workspace (not aliasing anything) and
// the thread count it was planned for (a larger OpenMP team is an error); they require
// attention_bf16_available(), and amx_tiles_available() for kAmxTiles.
void attention_forward_bf16(float* out, float* saved, const float* qkv, int B, int T, int C, int NH,
                            float* workspace, int threads,
                            Bf16Products products = attention_bf16_products());
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* saved, int B, int T, int C, int NH, float* workspace,
                             int threads, Bf16Products products = attention_bf16_products());
// gqa_attention.h's arguments, plus the workspace and its thread count.
void gqa_attention_forward_bf16(float* out, float* saved, const float* q, const float* k,
                                const float* v, const GqaShape& s, float* workspace, int threads,
                                Bf16Products products = attention_bf16_products());
void gqa_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                 const float* k, const float* v, const float* out,
                                 const float* saved, const GqaShape& s, float* workspace,
                                 int threads, Bf16Products products = attention_bf16_products());

}  // namespace forge::kernels::cpu
