// torch-cpu tanh-approximated GELU (PyTorch 1.13.1 CPU fp32).
#pragma once

#include <cstddef>

namespace forge::tcpu {

// aten/src/ATen/native/cpu/Activation.cpp GeluKernelImpl (GeluType::Tanh): Sleef tanh in the
// vector body, glibc tanhf in each chunk's scalar tail.
void gelu_forward(float* out, const float* x, size_t n);
// GeluBackwardKernelImpl (GeluType::Tanh).
void gelu_backward(float* dinp, const float* x, const float* dout, size_t n);

}  // namespace forge::tcpu
