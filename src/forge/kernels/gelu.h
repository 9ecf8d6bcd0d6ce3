// GELU, tanh approximation (torch's approximate="tanh"):
//   u = sqrt(2/pi) (x + 0.044715 x^3),   y = 0.5 x (1 + tanh u)
//   dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// backward overwrites dinp = dout * dy/dx.
#pragma once

#include <cstddef>

namespace forge::kernels {

namespace scalar {
template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t n);
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t n);
}  // namespace scalar

namespace cpu {
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
// gelu_forward on the calling thread alone, for a run of values inside another kernel's team
// (a GEMM's epilogue). A value's bits are gelu_forward's when n is a multiple of 16.
void gelu_forward_serial(float* out, const float* inp, size_t n);
// gelu_backward likewise (a backward's gradient rounding): gelu_backward's bits for a run
// that starts a multiple of 16 values into its arrays and holds a multiple of 16.
void gelu_backward_serial(float* dinp, const float* inp, const float* dout, size_t n);
}  // namespace cpu

}  // namespace forge::kernels
