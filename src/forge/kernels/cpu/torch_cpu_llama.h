// torch-cpu Llama ops: what PyTorch 1.13.1 computes, bit for bit, for the plain-op Llama of
// reference/forge_ref/llama.py (RMSNorm, rotary tables and rotate_half, SiLU-gated MLP,
// grouped-query attention through repeat_kv), forward and autograd backward.
#pragma once

#include <cstddef>
#include <cstdint>

namespace forge::tcpu {

// --- RMSNorm: weight * (x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) ---------------
// rstd [N] is saved for backward. out doubles as the scratch of the squares.
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps);
// Floats of scratch rmsnorm_backward needs.
size_t rmsnorm_backward_scratch(int64_t N, int64_t C);
// dinp, dw overwritten. dres (may be null) is the gradient that reached x first through a
// residual add made after the norm (the decoder layers' pattern): then
// dinp = (dres + d through x*rstd) + d through the variance, autograd's accumulation order;
// without it, the two norm terms alone. dinp must not alias dres, dout or x.
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, const float* dres, int64_t N, int64_t C, float* scratch);

// --- rotary embeddings (rotate_half convention) ----------------------------------------
// cos, sin [T, hd]: llama.py's rope_tables for T positions (T = the reference's block_size:
// with 2 threads the table's size decides where its second chunk, and so its vectors, start),
// with torch's fp32 pow/reciprocal/cos/sin.
void rope_tables(float* cos, float* sin, int64_t T, int64_t hd, double theta);
// x, out: B*T rows of H*hd floats, row b*T+t at position t; tables as rope_tables writes.
void rope_forward(float* out, const float* x, const float* cos, const float* sin, int64_t B,
                  int64_t T, int64_t H, int64_t hd);
void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int64_t B,
                   int64_t T, int64_t H, int64_t hd);

// --- SwiGLU: F.silu(gate) * up ----------------------------------------------------------
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n);

// --- grouped-query causal attention -----------------------------------------------------
// q [B,T,NH,hd], k, v [B,T,KVH,hd] -> out [B,T,NH*hd]; probs [B*NH, T, T] saved.
// Bit-exact for NH/KVH <= 4: beyond that torch's cascade sum over the repeated heads groups
// its terms differently from the sequential sum computed here.
size_t gqa_attention_scratch_floats(int64_t B, int64_t T, int64_t NH, int64_t hd);
void gqa_attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                           int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t hd,
                           float* scratch);
void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* probs, int64_t B,
                            int64_t T, int64_t NH, int64_t KVH, int64_t hd, float* scratch);

}  // namespace forge::tcpu
