// Causal grouped-query self-attention (Ainslie et al. 2023): NH query heads share KVH key/value
// heads, KVH dividing NH; query head h reads kv head h / (NH / KVH) (Hugging Face's
// repeat_kv: each kv head serves a contiguous block of query heads). With hd the head
// dimension and scale = 1 / sqrt(hd), for one query head and its kv head:
//   s_ij = scale q_i . k_j  (j <= i),   p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)
//   out_i = sum_j p_ij v_j
// backward, with D_i = dout_i . out_i = sum_j p_ij (dout_i . v_j):
//   dv_j += sum_i p_ij dout_i,   ds_ij = p_ij (dout_i . v_j - D_i),
//   dq_i = scale sum_j ds_ij k_j,   dk_j += scale sum_i ds_ij q_i,
// where dk and dv sum over the NH / KVH query heads of their group.
//
// Layouts: q [B, T, NH, hd], k and v [B, T, KVH, hd] (rows as the q/k/v projections write
// them), out [B, T, NH * hd]. dq, dk, dv are overwritten.
//
// scalar:: keeps the probabilities p[B, NH, T, T]; cpu:: keeps lse[B, NH, T] (and k^T, v^T) and
// recomputes p tile by tile in backward (flash-attention style), never forming a T x T matrix.
#pragma once

#include <cstddef>

namespace forge::kernels {

struct GqaShape {
  int B, T, NH, KVH, hd;
};

namespace scalar {
inline size_t gqa_attention_saved_floats(const GqaShape& s) {
  return static_cast<size_t>(s.B) * s.NH * s.T * s.T;
}
template <typename Real>
void gqa_attention_forward(Real* out, Real* probs, const Real* q, const Real* k, const Real* v,
                           const GqaShape& s);
template <typename Real>
void gqa_attention_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q,
                            const Real* k, const Real* v, const Real* probs, const GqaShape& s);
}  // namespace scalar

namespace cpu {
// attention.h's fused fp32 kernel with q, k, v and out as above (head dimension up to
// kMaxHeadDim). saved = lse [B, NH, T] | k^T | v^T [B, KVH, hd, attention_key_stride(T)]:
// forward transposes each kv head's keys and values once, for all query heads of its group and
// for backward, instead of once per (query tile, key tile).
size_t gqa_attention_saved_floats(const GqaShape& s);
void gqa_attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                           const GqaShape& s);
void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* out, const float* saved,
                            const GqaShape& s);
}  // namespace cpu

}  // namespace forge::kernels
