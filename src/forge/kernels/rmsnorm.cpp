#include "forge/kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

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

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  using namespace simd;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    V vss = zero();
    int c = 0;
    for (; c + W <= C; c += W) vss = fmadd(load(x + c), load(x + c), vss);
    float ss = reduce_add(vss);
    for (; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / C + eps);
    const V vr = set1(r);
    float* o = out + static_cast<size_t>(n) * C;
    // weight * (x * rstd), rounded in that order as Hugging Face's LlamaRMSNorm does.
    for (c = 0; c + W <= C; c += W) store(o + c, mul(load(weight + c), mul(load(x + c), vr)));
    for (; c < C; ++c) o[c] = weight[c] * (x[c] * r);
    rstd[n] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  using namespace simd;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* d = dout + static_cast<size_t>(n) * C;
      const float r = rstd[n];
      const V vr = set1(r);
      V vgx = zero();
      int c = 0;
      for (; c + W <= C; c += W)
        vgx = fmadd(mul(load(d + c), load(weight + c)), mul(load(x + c), vr), vgx);
      float gx = reduce_add(vgx);
      for (; c < C; ++c) gx += d[c] * weight[c] * (x[c] * r);
      const float gx_mean = gx / C;
      const V vgxm = set1(gx_mean);
      float* di = dinp + static_cast<size_t>(n) * C;
      for (c = 0; c + W <= C; c += W) {
        const V xhat = mul(load(x + c), vr);
        const V g = mul(load(d + c), load(weight + c));
        store(di + c, mul(vr, sub(g, mul(xhat, vgxm))));
      }
      for (; c < C; ++c) di[c] = r * (d[c] * weight[c] - (x[c] * r) * gx_mean);
    }
    // dweight sums over rows: threads split the channels, so nothing is shared and every
    // sum runs over the rows in the same order whatever the thread count.
    constexpr int kChunk = 64;
    const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp for schedule(static)
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int c0 = chunk * kChunk, c1 = std::min(C, c0 + kChunk);
      float dw[kChunk] = {};
      for (int n = 0; n < N; ++n) {
        const float* x = inp + static_cast<size_t>(n) * C;
        const float* d = dout + static_cast<size_t>(n) * C;
        const float r = rstd[n];
        const V vr = set1(r);
        int c = c0;
        for (; c + W <= c1; c += W)
          store(dw + (c - c0), fmadd(load(d + c), mul(load(x + c), vr), load(dw + (c - c0))));
        for (; c < c1; ++c) dw[c - c0] += d[c] * (x[c] * r);
      }
      std::copy(dw, dw + (c1 - c0), dweight + c0);
    }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
