// Causal multi-head self-attention over qkv[B, T, 3C] = q | k | v, each [B, T, NH, hd],
// hd = C / NH, scale = 1 / sqrt(hd):
//   s_ij = scale q_i . k_j  (j <= i),   p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)
//   out_i = sum_j p_ij v_j                            (out[B, T, C], heads concatenated)
// backward, with D_i = dout_i . out_i = sum_j p_ij (dout_i . v_j):
//   dv_j = sum_i p_ij dout_i,  ds_ij = p_ij (dout_i . v_j - D_i),
//   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i.
// dqkv is overwritten.
//
// scalar:: keeps the probabilities p[B, NH, T, T] (the plain textbook form);
// cpu:: keeps lse[B, NH, T] and recomputes p tile by tile in backward, never holding a T x T
// matrix (flash-attention style, online softmax in forward). It also keeps each head's keys
// and values transposed, k^T and v^T [B, NH, hd, ldt] (rows of T keys, padded to
// attention_key_stride(T)): the score products q k^T and dout v^T read them as contiguous
// rows along keys, and forward writes them once per head instead of transposing a key tile
// again for every query tile.
#pragma once

#include <cmath>
#include <cstddef>

#include "forge/core/error.h"
#include "forge/kernels/gqa_attention.h"

namespace forge::kernels {

namespace scalar {
inline size_t attention_saved_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T * T;
}
template <typename Real>
void attention_forward(Real* out, Real* probs, const Real* qkv, int B, int T, int C, int NH);
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* probs, int B,
                        int T, int C, int NH);
}  // namespace scalar

namespace cpu {
// Largest head dimension the tiled kernels accept (their per-row accumulators live on the stack).
inline constexpr int kMaxHeadDim = 256;
// The row stride of k^T and v^T: T rounded up to 16, plus 16, so that a power-of-two T does
// not put every row of a tile in the same few L1 sets (measured: T = 256 without the padding
// made the forward 13% slower than transposing each tile anew).
inline size_t attention_key_stride(int T) { return (static_cast<size_t>(T) + 15) / 16 * 16 + 16; }
// What the fused fp32 kernels save for backward, GPT-2's (KVH = NH) and Llama's grouped-query
// ones (gqa_attention.h) alike: saved = lse [B, NH, T] | k^T | v^T [B, KVH, hd, ldt], the
// transposes written by forward once per kv head.
struct AttentionSaved {
  static size_t floats(int B, int T, int NH, int KVH, int hd) {
    return static_cast<size_t>(B) * (static_cast<size_t>(NH) * T +
                                     2 * static_cast<size_t>(KVH) * hd * attention_key_stride(T));
  }
  AttentionSaved(const float* saved, int B, int T, int NH, int KVH, int hd)
      : ldt(attention_key_stride(T)),
        head_floats(static_cast<size_t>(hd) * ldt),
        lse(const_cast<float*>(saved)),
        kt(lse + static_cast<size_t>(B) * NH * T),
        vt(kt + static_cast<size_t>(B) * KVH * head_floats) {}
  // kv head g of sequence b is kv_head = b * KVH + g
  float* head_kt(size_t kv_head) const { return kt + kv_head * head_floats; }
  float* head_vt(size_t kv_head) const { return vt + kv_head * head_floats; }

  size_t ldt, head_floats;
  float *lse, *kt, *vt;
};
inline size_t attention_saved_floats(int B, int T, int C, int NH) {
  return AttentionSaved::floats(B, T, NH, NH, C / NH);
}
void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* saved, int B, int T, int C, int NH);

// Where the rows of every head live, for the fused kernels (fp32 here, bf16 in
// attention_bf16.h): position t of sequence b, query head h at q + (b T + t) q_stride + h hd;
// its kv head g = h / (NH / KVH) at k + (b T + t) kv_stride + g hd (v alike); out and dout at
// out_stride, dq, dk, dv as q, k, v. GPT-2's qkv (q_stride = kv_stride = 3C, out_stride = C,
// KVH = NH) and Llama's separate q, k, v (gqa_attention.h) are both this.
struct AttentionLayout {
  int B, T, NH, KVH, hd;
  size_t q_stride, kv_stride, out_stride;
  size_t row(int b, int t) const { return static_cast<size_t>(b) * T + t; }
  // Where the first row of a head starts: query head h of sequence b in q and dq, in out and
  // dout; kv head g in k, v, dk and dv.
  size_t q_at(int b, int h) const { return row(b, 0) * q_stride + static_cast<size_t>(h) * hd; }
  size_t out_at(int b, int h) const { return row(b, 0) * out_stride + static_cast<size_t>(h) * hd; }
  size_t kv_at(int b, int g) const { return row(b, 0) * kv_stride + static_cast<size_t>(g) * hd; }
  // Where query head h of sequence b keeps its T log-sum-exps in the saved lse rows.
  size_t lse_at(int b, int h) const { return (static_cast<size_t>(b) * NH + h) * T; }
  int group() const { return NH / KVH; }  // query heads per kv head
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(hd)); }
  // Whether forward's tasks can be whole (sequence, kv head) pairs: at least 4 per thread, so
  // that they share out evenly; fewer take smaller tasks (fp32: query tiles, bf16: query
  // heads). The fp32 and bf16 kernels both take this rule.
  bool forward_whole_pairs(int threads) const { return B * KVH >= 4 * threads; }
  // Whether backward splits its (sequence, kv head) pairs into tasks over key tiles (dk, dv)
  // and over query tiles (dq), which recompute P and dS (7 tile products per block instead of
  // 5): where whole pairs would leave threads idle for longer than that costs (on two threads,
  // one pair; not two or three). The fp32 and bf16 kernels both take this rule.
  bool split_backward(int threads) const {
    const int pairs = B * KVH;
    return 7 * pairs < 5 * threads * ((pairs + threads - 1) / threads);
  }

  // The two constructors check the head counts, so that every fused kernel, fp32 or bf16,
  // refuses a shape its head arithmetic would misread.
  // GPT-2's heads: q, k and v side by side in qkv's rows of 3C, out's rows of C.
  static AttentionLayout qkv(int B, int T, int C, int NH) {
    FORGE_CHECK(NH > 0 && C % NH == 0, "attention: {} heads must divide the width {}", NH, C);
    const size_t C3 = 3 * static_cast<size_t>(C);
    return {B, T, NH, NH, C / NH, C3, C3, static_cast<size_t>(C)};
  }
  // Llama's (gqa_attention.h): q and out [B, T, NH, hd], k and v [B, T, KVH, hd].
  static AttentionLayout separate(const GqaShape& s) {
    FORGE_CHECK(s.KVH > 0 && s.NH % s.KVH == 0,
                "grouped-query attention: {} kv heads must divide {} query heads", s.KVH, s.NH);
    const size_t q_stride = static_cast<size_t>(s.NH) * s.hd;
    return {s.B, s.T, s.NH, s.KVH, s.hd, q_stride, static_cast<size_t>(s.KVH) * s.hd, q_stride};
  }
};
// The one fused fp32 kernel behind both attention_forward above and gqa_attention_forward:
// saved as AttentionSaved(saved, B, T, NH, KVH, hd); dq, dk, dv overwritten.
void attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                       const AttentionLayout& L);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* saved,
                        const AttentionLayout& L);
}  // namespace cpu

}  // namespace forge::kernels
