// RMSNorm over the last dimension of x[N, C] (Zhang & Sennrich 2019; Hugging Face's
// LlamaRMSNorm):
//   forward:  rstd_n = 1 / sqrt(sum_c x^2 / C + eps),  xhat = x rstd,
//             out = weight * xhat;  rstd is saved for backward.
//   backward: g = dout * weight,
//             dinp = rstd (g - xhat mean_c(g xhat)),
//             dweight = sum_n dout xhat   (both overwritten).
// Unlike LayerNorm there is no mean to subtract and no bias.
#pragma once

namespace forge::kernels {

namespace scalar {
template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C,
                     Real eps);
template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp,
                      const Real* weight, const Real* rstd, int N, int C);
}  // namespace scalar

namespace cpu {
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C);
// The same for an input that also feeds a residual add: dinp = d(inp) + dresidual, added in
// the same pass instead of in an add_inplace of its own (the last multiply and the add may be
// one FMA). dinp must not alias dresidual or dout.
void rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, const float* dresidual,
                               int N, int C);
}  // namespace cpu

}  // namespace forge::kernels
