#include "forge/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "forge/kernels/cpu/vecmath.h"

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
template void cross_entropy_backward<float>(float*, const float*, const float*, const int32_t*,
                                            int, int, int, float);
template void cross_entropy_backward<double>(double*, const double*, const double*,
                                             const int32_t*, int, int, int, double);

}  // namespace scalar

namespace cpu {

float cross_entropy_forward(float* lse, const float* logits, const int32_t* targets, int N, int V,
                            int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<size_t>(n) * Vp;
    const float m = vec::max(x, V);
    float acc[vec::kLanes] = {};
    int v = 0;
    for (; v + vec::kLanes <= V; v += vec::kLanes)
      for (int k = 0; k < vec::kLanes; ++k) acc[k] += vec::exp(x[v + k] - m);
    float z = 0.0f;
    for (; v < V; ++v) z += vec::exp(x[v] - m);
    for (int k = 0; k < vec::kLanes; ++k) z += acc[k];
    lse[n] = m + std::log(z);
  }
  // The mean is summed in double in row order: cheap, and the same on any thread count.
  double total = 0.0;
  for (int n = 0; n < N; ++n)
    total += static_cast<double>(lse[n]) - logits[static_cast<size_t>(n) * Vp + targets[n]];
  return static_cast<float>(total / N);
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, int N, int V, int Vp, float dloss) {
  const float scale = dloss / static_cast<float>(N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<size_t>(n) * Vp;
    float* d = dlogits + static_cast<size_t>(n) * Vp;
    const float l = lse[n];
    const int t = targets[n];
    const float xt = x[t];  // read before the row may be overwritten in place
    for (int v = 0; v < V; ++v) d[v] = vec::exp(x[v] - l) * scale;
    d[t] = (std::exp(xt - l) - 1.0f) * scale;
    for (int v = V; v < Vp; ++v) d[v] = 0.0f;
  }
}

}  // namespace cpu

}  // namespace forge::kernels
