#include "forge/kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "forge/kernels/cpu/vecmath.h"

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

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    // Two passes over a row that sits in L1: the shifted variance avoids the cancellation
    // of E[x^2] - E[x]^2 on rows with a large mean (residual streams drift).
    const float m = vec::sum(x, C) / C;
    float acc[vec::kLanes] = {};
    int c = 0;
    for (; c + vec::kLanes <= C; c += vec::kLanes)
      for (int k = 0; k < vec::kLanes; ++k) {
        const float dx = x[c + k] - m;
        acc[k] += dx * dx;
      }
    float v = 0.0f;
    for (; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    for (int k = 0; k < vec::kLanes; ++k) v += acc[k];
    const float s = 1.0f / std::sqrt(v / C + eps);
    float* o = out + static_cast<size_t>(n) * C;
    for (int i = 0; i < C; ++i) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C) {
#pragma omp parallel
  {
    // Input gradient: rows are independent.
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* d = dout + static_cast<size_t>(n) * C;
      const float m = mean[n], s = rstd[n];
      float ga[vec::kLanes] = {}, gxa[vec::kLanes] = {};
      int c = 0;
      for (; c + vec::kLanes <= C; c += vec::kLanes)
        for (int k = 0; k < vec::kLanes; ++k) {
          const float g = d[c + k] * weight[c + k];
          ga[k] += g;
          gxa[k] += g * ((x[c + k] - m) * s);
        }
      float g_sum = 0.0f, gx_sum = 0.0f;
      for (; c < C; ++c) {
        const float g = d[c] * weight[c];
        g_sum += g;
        gx_sum += g * ((x[c] - m) * s);
      }
      for (int k = 0; k < vec::kLanes; ++k) {
        g_sum += ga[k];
        gx_sum += gxa[k];
      }
      const float g_mean = g_sum / C, gx_mean = gx_sum / C;
      float* di = dinp + static_cast<size_t>(n) * C;
      for (int i = 0; i < C; ++i)
        di[i] = (d[i] * weight[i] - g_mean - ((x[i] - m) * s) * gx_mean) * s;
    }
    // Parameter gradients sum over rows: threads split the channels so that nothing is
    // shared and the row order of every sum is fixed.
    constexpr int kChunk = 64;
    const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp for schedule(static)
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const int c0 = chunk * kChunk, c1 = std::min(C, c0 + kChunk);
      float dw[kChunk] = {}, db[kChunk] = {};
      for (int n = 0; n < N; ++n) {
        const float* x = inp + static_cast<size_t>(n) * C;
        const float* d = dout + static_cast<size_t>(n) * C;
        const float m = mean[n], s = rstd[n];
        for (int c = c0; c < c1; ++c) {
          dw[c - c0] += d[c] * ((x[c] - m) * s);
          db[c - c0] += d[c];
        }
      }
      for (int c = c0; c < c1; ++c) {
        dweight[c] = dw[c - c0];
        dbias[c] = db[c - c0];
      }
    }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
