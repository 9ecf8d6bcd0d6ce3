// LayerNorm over the last dimension of x[N, C].
//   forward:  mean_n = sum_c x / C,  var_n = sum_c (x - mean)^2 / C  (biased, as torch),
//             rstd_n = 1 / sqrt(var_n + eps),  xhat = (x - mean) rstd,
//             out = xhat * weight + bias;  mean and rstd are saved for backward.
//   backward: g = dout * weight,
//             dinp = rstd (g - mean_c(g) - xhat mean_c(g xhat)),
//             dweight = sum_n dout xhat,  dbias = sum_n dout   (all three overwritten).
#pragma once

namespace forge::kernels {

namespace scalar {
template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C, Real eps);
template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C);
}  // namespace scalar

namespace cpu {
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);
// The same, for an input that also feeds a residual add: dinp = dresidual + d(inp), in the
// pass that writes dinp instead of a pass of its own (the add may be fused into the last
// multiply). dinp must not alias dresidual or dout.
void layernorm_backward_residual(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, const float* dresidual, int N, int C);
}  // namespace cpu

}  // namespace forge::kernels
