#include "forge/kernels/gelu.h"

#include <algorithm>
#include <cmath>

#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/simd.h"

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

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/gelu.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

void gelu_forward(float* out, const float* inp, size_t n) {
  FORGE_SIMD_DISPATCH(gelu_forward(out, inp, n));
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  FORGE_SIMD_DISPATCH(gelu_backward(dinp, inp, dout, n));
}

void gelu_forward_serial(float* out, const float* inp, size_t n) {
  FORGE_SIMD_DISPATCH(gelu_forward_serial(out, inp, n));
}

void gelu_backward_serial(float* dinp, const float* inp, const float* dout, size_t n) {
  FORGE_SIMD_DISPATCH(gelu_backward_serial(dinp, inp, dout, n));
}

}  // namespace cpu

}  // namespace forge::kernels
