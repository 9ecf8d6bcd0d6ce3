// Rotary position embeddings (Su et al. 2021) in Hugging Face's LlamaForCausalLM convention:
// each head vector x[hd] is split into halves x1 = x[0, hd/2), x2 = x[hd/2, hd) and
//   out = x * cos + rotate_half(x) * sin,   rotate_half(x) = (-x2, x1),
// i.e. for i < hd/2, with angle a_ti = t * theta^(-2i/hd) at position t:
//   out[i]        = x[i] cos a_ti - x[i + hd/2] sin a_ti
//   out[i + hd/2] = x[i + hd/2] cos a_ti + x[i] sin a_ti
// (not the interleaved pairs (x[2i], x[2i+1]) of the original paper and Meta's code).
// The map is a rotation, so backward is the transposed rotation (the angle negated):
//   dx[i] = dy[i] cos + dy[i + hd/2] sin,   dx[i + hd/2] = dy[i + hd/2] cos - dy[i] sin.
//
// Tables cos, sin are [T, hd/2]. Inputs are rows of n_heads * hd floats, B * T rows, row
// b*T + t at position t. out/dinp are overwritten and must not alias the input.
#pragma once

namespace forge::kernels {

namespace scalar {
// The angles in Real arithmetic throughout (the float64 truth for the model tests).
template <typename Real>
void rope_tables(Real* cos, Real* sin, int T, int hd, double theta);
template <typename Real>
void rope_forward(Real* out, const Real* inp, const Real* cos, const Real* sin, int B, int T,
                  int n_heads, int hd);
template <typename Real>
void rope_backward(Real* dinp, const Real* dout, const Real* cos, const Real* sin, int B, int T,
                   int n_heads, int hd);
}  // namespace scalar

namespace cpu {
// The fp32 tables as Hugging Face computes them: inv_freq = 1 / theta^(2i/hd) and the angle
// t * inv_freq are each rounded to float before cos and sin are taken (an fp32 angle at
// t = 255 is off by up to ~1e-5 rad from the exact one, more than TOLERANCE allows, so the
// rounding has to be the same as the reference's); cos and sin are then correctly rounded.
void rope_tables(float* cos, float* sin, int T, int hd, double theta);
void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T,
                  int n_heads, int hd);
void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B, int T,
                   int n_heads, int hd);
}  // namespace cpu

}  // namespace forge::kernels
