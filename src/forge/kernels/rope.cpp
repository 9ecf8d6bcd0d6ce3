#include "forge/kernels/rope.h"

#include <cmath>
#include <cstddef>

#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/simd.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void rope_tables(Real* cos, Real* sin, int T, int hd, double theta) {
  const int half = hd / 2;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const Real inv_freq = Real(1) / std::pow(static_cast<Real>(theta), Real(2 * i) / Real(hd));
      const Real a = static_cast<Real>(t) * inv_freq;
      cos[static_cast<size_t>(t) * half + i] = std::cos(a);
      sin[static_cast<size_t>(t) * half + i] = std::sin(a);
    }
}

template <typename Real>
void rope_forward(Real* out, const Real* inp, const Real* cos, const Real* sin, int B, int T,
                  int n_heads, int hd) {
  const int half = hd / 2;
  for (int n = 0; n < B * T; ++n) {
    const Real* c = cos + static_cast<size_t>(n % T) * half;
    const Real* s = sin + static_cast<size_t>(n % T) * half;
    for (int h = 0; h < n_heads; ++h) {
      const Real* x = inp + (static_cast<size_t>(n) * n_heads + h) * hd;
      Real* y = out + (static_cast<size_t>(n) * n_heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        y[i] = x[i] * c[i] - x[i + half] * s[i];
        y[i + half] = x[i + half] * c[i] + x[i] * s[i];
      }
    }
  }
}

template <typename Real>
void rope_backward(Real* dinp, const Real* dout, const Real* cos, const Real* sin, int B, int T,
                   int n_heads, int hd) {
  const int half = hd / 2;
  for (int n = 0; n < B * T; ++n) {
    const Real* c = cos + static_cast<size_t>(n % T) * half;
    const Real* s = sin + static_cast<size_t>(n % T) * half;
    for (int h = 0; h < n_heads; ++h) {
      const Real* dy = dout + (static_cast<size_t>(n) * n_heads + h) * hd;
      Real* dx = dinp + (static_cast<size_t>(n) * n_heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        dx[i] = dy[i] * c[i] + dy[i + half] * s[i];
        dx[i + half] = dy[i + half] * c[i] - dy[i] * s[i];
      }
    }
  }
}

template void rope_tables<float>(float*, float*, int, int, double);
template void rope_tables<double>(double*, double*, int, int, double);
template void rope_forward<float>(float*, const float*, const float*, const float*, int, int, int,
                                  int);
template void rope_forward<double>(double*, const double*, const double*, const double*, int, int,
                                   int, int);
template void rope_backward<float>(float*, const float*, const float*, const float*, int, int, int,
                                   int);
template void rope_backward<double>(double*, const double*, const double*, const double*, int, int,
                                    int, int);

}  // namespace scalar

namespace cpu {

void rope_tables(float* cos, float* sin, int T, int hd, double theta) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    // torch: 1.0 / (base ** (arange(0, hd, 2).float() / hd)), every op in fp32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(hd);
    const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), expo);
    for (int t = 0; t < T; ++t) {
      const float a = static_cast<float>(t) * inv_freq;  // position_ids.float() * inv_freq
      cos[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(static_cast<double>(a)));
      sin[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(static_cast<double>(a)));
    }
  }
}

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/rope.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T,
                  int n_heads, int hd) {
  FORGE_SIMD_DISPATCH(rope_forward(out, inp, cos, sin, B, T, n_heads, hd));
}

void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B, int T,
                   int n_heads, int hd) {
  FORGE_SIMD_DISPATCH(rope_backward(dinp, dout, cos, sin, B, T, n_heads, hd));
}

}  // namespace cpu

}  // namespace forge::kernels
