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
// cpu:: keeps only lse[B, NH, T] and recomputes p tile by tile in backward, never holding
// a T x T matrix (flash-attention style, online softmax in forward).
#pragma once

#include <cstddef>

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
inline size_t attention_saved_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T;
}
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH);
}  // namespace cpu

}  // namespace forge::kernels
