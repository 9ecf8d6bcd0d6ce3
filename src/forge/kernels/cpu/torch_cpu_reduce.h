// torch-cpu reductions: sums over a leading dimension (bias and position gradients) and the
// 2-norm of a whole tensor (clip_grad_norm_), with PyTorch 1.13.1's CPU summation trees.
#pragma once

#include <cstdint>

namespace forge::tcpu {

// out[c] = sum over r of in[r, c] for a contiguous [rows, cols] tensor: at::sum(t, 0)
// (cpu/SumKernel.cpp cascade_sum through TensorIterator::parallel_reduce).
void sum_dim0(float* out, const float* in, int64_t rows, int64_t cols);

// out[r] = sum over c of in[r, c] for a contiguous [rows, cols] tensor: at::sum(t, -1)
// (cascade_sum's vectorized_inner_sum, or scalar_inner_sum below 8 columns). Each row is
// summed whole by one thread, so the thread count does not change the bits.
void sum_lastdim(float* out, const float* in, int64_t rows, int64_t cols);

// torch.norm(t, 2.0) of a contiguous tensor of n floats (cpu/ReduceOpsKernel.cpp
// norm_kernel_tensor_iterator_impl, the p == 2 fast path).
float norm2(const float* in, int64_t n);

}  // namespace forge::tcpu
