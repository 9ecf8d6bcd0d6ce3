#include "forge/kernels/rmsnorm.h"

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
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C,
                     Real eps) {
  for (int n = 0; n < N; ++n) {
    const Real* x = inp + static_cast<size_t>(n) * C;
    Real ss = 0;
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const Real r = Real(1) / std::sqrt(ss / C + eps);
    Real* o = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * r);
    rstd[n] = r;
  }
}

template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp,
                      const Real* weight, const Real* rstd, int N, int C) {
  std::fill(dweight, dweight + C, Real(0));
  for (int n = 0; n < N; ++n) {
    const Real* x = inp + static_cast<size_t>(n) * C;
    const Real* d = dout + static_cast<size_t>(n) * C;
    const Real r = rstd[n];
    Real gx = 0;
    for (int c = 0; c < C; ++c) gx += d[c] * weight[c] * (x[c] * r);
    const Real gx_mean = gx / C;
    Real* di = dinp + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) {
      const Real xhat = x[c] * r;
      di[c] = r * (d[c] * weight[c] - xhat * gx_mean);
      dweight[c] += d[c] * xhat;
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int);

}  // namespace scalar

namespace cpu {

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/rmsnorm.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  FORGE_SIMD_DISPATCH(rmsnorm_forward(out, rstd, inp, weight, N, C, eps));
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  FORGE_SIMD_DISPATCH(rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, nullptr, N, C));
}

void rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, const float* dresidual,
                               int N, int C) {
  FORGE_SIMD_DISPATCH(rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, dresidual, N, C));
}

}  // namespace cpu

}  // namespace forge::kernels
