#include "forge/kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "forge/kernels/cpu/column_sums.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/prefetch.h"
#include "forge/kernels/cpu/simd.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C, Real eps) {
  for (int n = 0; n < N; ++n) {
    const Real* x = inp + static_cast<size_t>(n) * C;
    Real m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    Real v = 0;
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= C;
    const Real s = Real(1) / std::sqrt(v + eps);
    Real* o = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C) {
  std::fill(dweight, dweight + C, Real(0));
  std::fill(dbias, dbias + C, Real(0));
  for (int n = 0; n < N; ++n) {
    const Real* x = inp + static_cast<size_t>(n) * C;
    const Real* d = dout + static_cast<size_t>(n) * C;
    Real g_mean = 0, gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      const Real xhat = (x[c] - mean[n]) * rstd[n];
      const Real g = d[c] * weight[c];
      g_mean += g;
      gx_mean += g * xhat;
      dweight[c] += d[c] * xhat;
      dbias[c] += d[c];
    }
    g_mean /= C;
    gx_mean /= C;
    Real* di = dinp + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) {
      const Real xhat = (x[c] - mean[n]) * rstd[n];
      di[c] = (d[c] * weight[c] - g_mean - xhat * gx_mean) * rstd[n];
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);

}  // namespace scalar

namespace cpu {

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/layernorm.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
  FORGE_SIMD_DISPATCH(layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps));
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  FORGE_SIMD_DISPATCH(
      layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, nullptr, N, C));
}

void layernorm_backward_residual(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, const float* dresidual, int N, int C) {
  FORGE_SIMD_DISPATCH(
      layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dresidual, N, C));
}

}  // namespace cpu

}  // namespace forge::kernels
