// Mean cross-entropy over N rows of logits[N, Vp]; only the first V columns are real.
//   lse_n = log sum_{v<V} exp(logits[n,v])  (stable: max subtracted first)
//   loss  = (1/N) sum_n (lse_n - logits[n, target_n])
//   dlogits[n,v] = dloss/N (exp(logits[n,v] - lse_n) - [v == target_n])  for v < V,
//   dlogits[n,v] = 0 for V <= v < Vp.
// saved = lse, N floats: backward reads the logits once more instead of keeping a full
// probability tensor. dlogits may alias logits (each element is read before it is written).
#pragma once

#include <cstddef>
#include <cstdint>

namespace forge::kernels {

namespace scalar {
template <typename Real>
Real cross_entropy_forward(Real* lse, const Real* logits, const int32_t* targets, int N, int V,
                           int Vp);
template <typename Real>
void cross_entropy_backward(Real* dlogits, const Real* logits, const Real* lse,
                            const int32_t* targets, int N, int V, int Vp, Real dloss);
}  // namespace scalar

namespace cpu {
inline size_t cross_entropy_saved_floats(int N) { return static_cast<size_t>(N); }
float cross_entropy_forward(float* lse, const float* logits, const int32_t* targets, int N, int V,
                            int Vp);
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, int N, int V, int Vp, float dloss);
}  // namespace cpu

}  // namespace forge::kernels
