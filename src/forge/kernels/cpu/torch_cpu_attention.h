// torch-cpu causal self-attention as reference/forge_ref/gpt2.py writes it with plain ops:
// (q @ k^T) * (1/sqrt(hd)), masked_fill(-inf), softmax(dim=-1), @ v; and its autograd.
#pragma once

#include <cstddef>
#include <cstdint>

#include "forge/kernels/cpu/torch_cpu_linear.h"

namespace forge::tcpu {

// Floats of scratch: the contiguous copies matmul makes of q, k^T, v (3*B*T*C), the
// attention matrix (B*NH*T*T) and the backward's temporaries.
size_t attention_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH);
// saved: the softmax probabilities [B*NH, T, T].
void attention_forward(float* out, float* probs, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* scratch);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        int64_t B, int64_t T, int64_t C, int64_t NH, float* scratch);

// SoftMaxKernel.cpp _vec_softmax_lastdim / _vec_host_softmax_backward_lastdim on rows.
void softmax_lastdim(float* out, const float* in, int64_t rows, int64_t dim);
void softmax_backward_lastdim(float* gin, const float* grad, const float* out, int64_t rows,
                              int64_t dim);

// The gradient of y.transpose(1, 2) ([B, NH, T, hd] with strides (T*NH*hd, hd, NH*hd, 1),
// from dout [B, T, NH*hd]) as matmul's reshape hands it to bmm's backward: a view of dout
// where the heads fold into the batch, else copied into dy ([B*NH, T, hd]).
BatchView attention_output_gradient(float* dy, const float* dout, int64_t B, int64_t T, int64_t NH,
                                    int64_t hd);
// y.transpose(1, 2).contiguous(): the heads' outputs y [B, NH, T, hd] gathered into rows of
// out [B, T, NH*hd].
void attention_output_rows(float* out, const float* y, int64_t B, int64_t T, int64_t NH,
                           int64_t hd);

}  // namespace forge::tcpu
