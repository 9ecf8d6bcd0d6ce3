// Token + position embedding.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwte[v,:] += sum_{(b,t): tokens[b,t]=v} dout[b,t,:]   (accumulates: tied head)
//             dwpe[t,:]  = sum_b dout[b,t,:]                         (overwritten; may be null)
// Each sum runs in double and is rounded to fp32 once, its token's earlier gradient (the tied
// head's) included: a token that appears k times in the batch is rounded once, not k times.
#pragma once

#include <cstddef>
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
// The int64s embedding_backward's scratch holds (the positions sorted by token).
size_t embedding_backward_scratch(int B, int T);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int64_t* scratch);
}  // namespace cpu

}  // namespace forge::kernels
