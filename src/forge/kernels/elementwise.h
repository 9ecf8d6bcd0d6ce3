// Elementwise sums used by the residual stream.
//   add:         out = a + b   (out may alias a or b)
//   add_inplace: acc += x
#pragma once

#include <cstddef>

namespace forge::kernels {

namespace scalar {
template <typename Real>
void add(Real* out, const Real* a, const Real* b, size_t n);
template <typename Real>
void add_inplace(Real* acc, const Real* x, size_t n);
}  // namespace scalar

namespace cpu {
void add(float* out, const float* a, const float* b, size_t n);
void add_inplace(float* acc, const float* x, size_t n);
}  // namespace cpu

}  // namespace forge::kernels
