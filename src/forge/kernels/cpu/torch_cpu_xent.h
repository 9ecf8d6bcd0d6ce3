// torch-cpu classifier loss: F.cross_entropy(logits[..., :V].reshape(-1, V), targets), i.e.
// log_softmax + nll_loss with mean reduction, and their backward (PyTorch 1.13.1 CPU fp32).
#pragma once

#include <cstdint>

namespace forge::tcpu {

// logp [N, V]: the log-probabilities (kept for backward). logits rows have stride Vp.
float cross_entropy_forward(float* logp, const float* logits, const int32_t* targets, int64_t N,
                            int64_t V, int64_t Vp);
// dlogits [N, Vp]; the padded columns get +0.
void cross_entropy_backward(float* dlogits, const float* logp, const int32_t* targets, int64_t N,
                            int64_t V, int64_t Vp, float dloss);

}  // namespace forge::tcpu
