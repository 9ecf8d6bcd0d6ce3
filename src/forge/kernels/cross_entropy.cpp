#include "forge/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/simd.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
Real cross_entropy_forward(Real* lse, const Real* logits, const int32_t* targets, int N, int V,
                           int Vp) {
  Real total = 0;
  for (int n = 0; n < N; ++n) {
    const Real* x = logits + static_cast<size_t>(n) * Vp;
    Real m = x[0];
    for (int v = 1; v < V; ++v) m = std::max(m, x[v]);
    Real z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(x[v] - m);
    lse[n] = m + std::log(z);
    total += lse[n] - x[targets[n]];
  }
  return total / N;
}

template <typename Real>
void cross_entropy_backward(Real* dlogits, const Real* logits, const Real* lse,
                            const int32_t* targets, int N, int V, int Vp, Real dloss) {
  const Real scale = dloss / N;
  for (int n = 0; n < N; ++n) {
    const Real* x = logits + static_cast<size_t>(n) * Vp;
    Real* d = dlogits + static_cast<size_t>(n) * Vp;
    for (int v = 0; v < V; ++v)
      d[v] = (std::exp(x[v] - lse[n]) - (v == targets[n] ? Real(1) : Real(0))) * scale;
    for (int v = V; v < Vp; ++v) d[v] = 0;
  }
}

template float cross_entropy_forward<float>(float*, const float*, const int32_t*, int, int, int);
template double cross_entropy_forward<double>(double*, const double*, const int32_t*, int, int,
                                              int);
template void cross_entropy_backward<float>(float*, const float*, const float*, const int32_t*, int,
                                            int, int, float);
template void cross_entropy_backward<double>(double*, const double*, const double*, const int32_t*,
                                             int, int, int, double);

}  // namespace scalar

namespace cpu {

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/cross_entropy.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

float cross_entropy_forward(float* lse, const float* logits, const int32_t* targets, int N, int V,
                            int Vp) {
  FORGE_SIMD_DISPATCH(cross_entropy_forward(lse, logits, targets, N, V, Vp));
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, int N, int V, int Vp, float dloss) {
  FORGE_SIMD_DISPATCH(cross_entropy_backward(dlogits, logits, lse, targets, N, V, Vp, dloss));
}

}  // namespace cpu

}  // namespace forge::kernels
