// Token + position embedding.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwte[v,:] += sum_{(b,t): tokens[b,t]=v} dout[b,t,:]   (accumulates: tied head)
//             dwpe[t,:]  = sum_b dout[b,t,:]                         (overwritten; may be null)
#pragma once

#include <cstdint>

namespace forge::kernels {

namespace scalar {
template <typename Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B,
                       int T, int C);
template <typename Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B,
                        int T, int C);
}  // namespace scalar

namespace cpu {
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C);
}  // namespace cpu

}  // namespace forge::kernels
