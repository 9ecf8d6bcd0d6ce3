// SwiGLU (Shazeer 2020), the gate of Llama's MLP, elementwise over n values:
//   out = silu(gate) * up,   silu(x) = x sigmoid(x) = x / (1 + exp(-x))
// backward, with s = sigmoid(gate):
//   dup   = dout silu(gate)
//   dgate = (dout up) s (1 + gate (1 - s))      (torch's silu_backward of dout * up)
// dgate and dup are overwritten.
#pragma once

#include <cstddef>

namespace forge::kernels {

namespace scalar {
template <typename Real>
void swiglu_forward(Real* out, const Real* gate, const Real* up, size_t n);
template <typename Real>
void swiglu_backward(Real* dgate, Real* dup, const Real* dout, const Real* gate, const Real* up,
                     size_t n);
}  // namespace scalar

namespace cpu {
void swiglu_forward(float* out, const float* gate, const float* up, size_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, size_t n);
// The same on the calling thread (for a fused op's parallel loop): the same bits for a run
// that starts a multiple of 16 values into the arrays the parallel kernels take and ends at a
// multiple of 16 or at their end (values past a run's last whole vector take a scalar path).
void swiglu_forward_serial(float* out, const float* gate, const float* up, size_t n);
void swiglu_backward_serial(float* dgate, float* dup, const float* dout, const float* gate,
                            const float* up, size_t n);
}  // namespace cpu

}  // namespace forge::kernels
