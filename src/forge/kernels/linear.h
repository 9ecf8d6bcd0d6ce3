// Fully connected layer, weights stored as torch.nn.Linear does: weight[OC, IC].
//   forward:  out[N,OC] = inp[N,IC] weight^T + bias            (bias may be null)
//   backward: dinp[N,IC] = dout weight                          (dinp may be null)
//             dweight[OC,IC] = dout^T inp,  dbias[OC] = sum_n dout   (dbias may be null)
// All outputs are overwritten.
#pragma once

#include <cstddef>

#include "forge/kernels/cpu/column_sums.h"

namespace forge::kernels {

namespace scalar {
template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int IC,
                    int OC);
template <typename Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int N, int IC, int OC);
}  // namespace scalar

namespace cpu {
// weight_workspace (may be null): linear_weight_workspace_floats(IC, OC) floats where the
// forward may put the weight in the GEMM's own layout first (cpu/onednn_matmul.h's b_blocked:
// up to 1.1x on a 2048-row forward, the same bits).
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC, float* weight_workspace = nullptr);
size_t linear_weight_workspace_floats(int IC, int OC);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);
// Linear layers that read one input and whose weights lie back to back ([sum widths, IC]:
// one stacked weight), such as Llama's q, k, v and gate, up, run as one layer of the stacked
// weight: one GEMM instead of one per layer, which matters most for GQA's narrow k and v.
// split_columns copies the stacked product [N, sum widths] into each layer's [N, widths[i]]
// output; join_columns is its inverse, for the layers' output gradients in backward.
void split_columns(float* const* outs, const int* widths, int count, const float* stacked, int N);
void join_columns(float* stacked, const float* const* ins, const int* widths, int count, int N);
// The two bias passes, shared with the bf16 linear kernels: every row of out[N, OC] set to
// bias (the GEMM then accumulates onto it), and dbias[o] = sum over rows of dout[n, o], each
// column summed in row order in double (rounded to fp32 once) whatever the thread count.
void fill_rows_with_bias(float* out, const float* bias, int N, int OC);
void bias_gradient(float* dbias, const float* dout, int N, int OC);

// bias_gradient's loop, for the kernels that fuse their own work into it:
// cpu/column_sums.h.
}  // namespace cpu

}  // namespace forge::kernels
