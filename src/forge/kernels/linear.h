// Fully connected layer, weights stored as torch.nn.Linear does: weight[OC, IC].
//   forward:  out[N,OC] = inp[N,IC] weight^T + bias            (bias may be null)
//   backward: dinp[N,IC] = dout weight                          (dinp may be null)
//             dweight[OC,IC] = dout^T inp,  dbias[OC] = sum_n dout   (dbias may be null)
// All outputs are overwritten.
#pragma once

namespace forge::kernels {

namespace scalar {
template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N,
                    int IC, int OC);
template <typename Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int N, int IC, int OC);
}  // namespace scalar

namespace cpu {
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int IC, int OC);
// The two bias passes, shared with the bf16 linear kernels: every row of out[N, OC] set to
// bias (the GEMM then accumulates onto it), and dbias[o] = sum over rows of dout[n, o], each
// column summed in row order whatever the thread count.
void fill_rows_with_bias(float* out, const float* bias, int N, int OC);
void bias_gradient(float* dbias, const float* dout, int N, int OC);
}  // namespace cpu

}  // namespace forge::kernels
