// Fully connected layer, weights stored as torch.nn.Linear does: weight[OC, IC].
//   forward:  out[N,OC] = inp[N,IC] weight^T + bias            (bias may be null)
//   backward: dinp[N,IC] = dout weight                          (dinp may be null)
//             dweight[OC,IC] = dout^T inp,  dbias[OC] = sum_n dout   (dbias may be null)
// All outputs are overwritten.
#pragma once

#include <algorithm>
#include <cstddef>

#include "forge/kernels/cpu/prefetch.h"

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

// bias_gradient's loop over values a kernel makes row by row rather than reads:
// row_values(n, o0, o1, buf) returns columns [o0, o1) of row n (it may make them in buf, room
// for kColumnChunk floats, and return buf), called for every row in order, in the thread that
// sums those columns: each sum keeps a fixed row order whatever the thread count.
inline constexpr int kColumnChunk = 64;
template <typename RowValues>
void column_sums_of(float* sums, int N, int OC, RowValues&& row_values) {
  const int chunks = (OC + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int o0 = chunk * kColumnChunk, o1 = std::min(OC, o0 + kColumnChunk);
    // In double: summed in fp32 over N rows, small's bias gradients were ten times as far from
    // float64 as PyTorch's (whose reductions sum in cascades), enough on its first step to
    // move a query bias with a gradient under AdamW's eps past the alignment gate's bound.
    double acc[kColumnChunk] = {};
    alignas(64) float buf[kColumnChunk];
    for (int n = 0; n < N; ++n) {
      const float* r = row_values(n, o0, o1, buf);
      for (int o = 0; o < o1 - o0; ++o) acc[o] += r[o];
    }
    for (int o = o0; o < o1; ++o) sums[o] = static_cast<float>(acc[o - o0]);
  }
}

// bias_gradient's loop, for kernels that read dout for more than its sums: row_chunk(n, o0,
// o1) runs on columns [o0, o1) of row n just before they are added, in the same thread.
template <typename RowChunk>
void column_sums(float* sums, const float* x, int N, int OC, RowChunk&& row_chunk) {
  column_sums_of(sums, N, OC, [&](int n, int o0, int o1, float*) {
    // (bf16's linear backward, which rounds dout into the AMX tiles in this loop, was faster
    // with the prefetch in 6 of 7 interleaved pairs on small, medians 61.1 vs 62.3 ms a step.)
    prefetch_rows_ahead(n, N, OC, o0, o1, x);
    row_chunk(n, o0, o1);
    return x + static_cast<size_t>(n) * OC + o0;
  });
}
}  // namespace cpu

}  // namespace forge::kernels
