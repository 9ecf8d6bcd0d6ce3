#include "forge/kernels/swiglu.h"

#include <algorithm>
#include <cmath>

#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/simd.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void swiglu_forward(Real* out, const Real* gate, const Real* up, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (Real(1) + std::exp(-gate[i])) * up[i];
}

template <typename Real>
void swiglu_backward(Real* dgate, Real* dup, const Real* dout, const Real* gate, const Real* up,
                     size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Real s = Real(1) / (Real(1) + std::exp(-gate[i]));
    dup[i] = dout[i] * (gate[i] * s);
    dgate[i] = dout[i] * up[i] * s * (Real(1) + gate[i] * (Real(1) - s));
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, size_t);
template void swiglu_forward<double>(double*, const double*, const double*, size_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*,
                                     size_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*,
                                      size_t);

}  // namespace scalar

namespace cpu {

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/swiglu.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

void swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
  FORGE_SIMD_DISPATCH(swiglu_forward(out, gate, up, n));
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, size_t n) {
  FORGE_SIMD_DISPATCH(swiglu_backward(dgate, dup, dout, gate, up, n));
}

void swiglu_forward_serial(float* out, const float* gate, const float* up, size_t n) {
  FORGE_SIMD_DISPATCH(swiglu_forward_serial(out, gate, up, n));
}

void swiglu_backward_serial(float* dgate, float* dup, const float* dout, const float* gate,
                            const float* up, size_t n) {
  FORGE_SIMD_DISPATCH(swiglu_backward_serial(dgate, dup, dout, gate, up, n));
}

}  // namespace cpu

}  // namespace forge::kernels
