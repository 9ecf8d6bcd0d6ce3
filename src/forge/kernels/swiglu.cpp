#include "forge/kernels/swiglu.h"

#include <algorithm>
#include <cmath>

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

// Large elementwise arrays: one parallel loop, fixed static split (results do not depend on
// the split since every element is independent).
constexpr size_t kBlock = 4096;

void swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
  using namespace simd;
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
  const V one = set1(1.0f);
#pragma omp parallel for schedule(static)
  for (long blk = 0; blk < blocks; ++blk) {
    const size_t i0 = static_cast<size_t>(blk) * kBlock, i1 = std::min(n, i0 + kBlock);
    size_t i = i0;
    for (; i + W <= i1; i += W) {
      const V g = load(gate + i);
      const V e = simd::exp(sub(zero(), g));
      store(out + i, mul(div(g, add(one, e)), load(up + i)));
    }
    for (; i < i1; ++i) out[i] = gate[i] / (1.0f + exp_scalar(-gate[i])) * up[i];
  }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, size_t n) {
  using namespace simd;
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
  const V one = set1(1.0f);
#pragma omp parallel for schedule(static)
  for (long blk = 0; blk < blocks; ++blk) {
    const size_t i0 = static_cast<size_t>(blk) * kBlock, i1 = std::min(n, i0 + kBlock);
    size_t i = i0;
    for (; i + W <= i1; i += W) {
      const V g = load(gate + i), d = load(dout + i);
      const V s = div(one, add(one, simd::exp(sub(zero(), g))));
      store(dup + i, mul(d, mul(g, s)));
      const V dsilu = mul(d, load(up + i));
      store(dgate + i, mul(mul(dsilu, s), add(one, mul(g, sub(one, s)))));
    }
    for (; i < i1; ++i) {
      const float g = gate[i];
      const float s = 1.0f / (1.0f + exp_scalar(-g));
      dup[i] = dout[i] * (g * s);
      dgate[i] = dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
    }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
