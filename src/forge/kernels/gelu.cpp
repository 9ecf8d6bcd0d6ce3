#include "forge/kernels/gelu.h"

#include <algorithm>
#include <cmath>

#include "forge/kernels/cpu/vecmath.h"

namespace forge::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;
}  // namespace

namespace scalar {

template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Real x = inp[i];
    const Real u = Real(kSqrt2OverPi) * (x + Real(kCubic) * x * x * x);
    out[i] = Real(0.5) * x * (Real(1) + std::tanh(u));
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Real x = inp[i];
    const Real u = Real(kSqrt2OverPi) * (x + Real(kCubic) * x * x * x);
    const Real th = std::tanh(u);
    const Real du = Real(kSqrt2OverPi) * (Real(1) + Real(3 * kCubic) * x * x);
    dinp[i] = dout[i] * (Real(0.5) * (Real(1) + th) + Real(0.5) * x * (Real(1) - th * th) * du);
  }
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace scalar

namespace cpu {

namespace {
// Threads take contiguous chunks; small tensors stay on one thread (fork cost > work).
constexpr size_t kChunk = 16384;
}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; ++c) {
    const size_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    for (size_t i = i0; i < i1; ++i) {
      const float x = inp[i];
      const float u = static_cast<float>(kSqrt2OverPi) * (x + static_cast<float>(kCubic) * x * x * x);
      out[i] = 0.5f * x * (1.0f + vec::tanh(u));
    }
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; ++c) {
    const size_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    for (size_t i = i0; i < i1; ++i) {
      const float x = inp[i];
      const float u = static_cast<float>(kSqrt2OverPi) * (x + static_cast<float>(kCubic) * x * x * x);
      const float th = vec::tanh(u);
      const float du = static_cast<float>(kSqrt2OverPi) * (1.0f + static_cast<float>(3 * kCubic) * x * x);
      dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
