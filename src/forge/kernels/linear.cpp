#include "forge/kernels/linear.h"

#include <algorithm>
#include <cstddef>

#include "forge/kernels/gemm.h"
#ifdef FORGE_HAVE_DNNL
#include "forge/kernels/cpu/onednn_matmul.h"
#endif

namespace forge::kernels {

namespace scalar {

template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int IC,
                    int OC) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      Real acc = bias ? bias[o] : Real(0);
      for (int i = 0; i < IC; ++i)
        acc += inp[static_cast<size_t>(n) * IC + i] * weight[static_cast<size_t>(o) * IC + i];
      out[static_cast<size_t>(n) * OC + o] = acc;
    }
}

template <typename Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int N, int IC, int OC) {
  if (dinp)
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < IC; ++i) {
        Real acc = 0;
        for (int o = 0; o < OC; ++o)
          acc += dout[static_cast<size_t>(n) * OC + o] * weight[static_cast<size_t>(o) * IC + i];
        dinp[static_cast<size_t>(n) * IC + i] = acc;
      }
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) {
      Real acc = 0;
      for (int n = 0; n < N; ++n)
        acc += dout[static_cast<size_t>(n) * OC + o] * inp[static_cast<size_t>(n) * IC + i];
      dweight[static_cast<size_t>(o) * IC + i] = acc;
    }
  if (dbias)
    for (int o = 0; o < OC; ++o) {
      Real acc = 0;
      for (int n = 0; n < N; ++n) acc += dout[static_cast<size_t>(n) * OC + o];
      dbias[o] = acc;
    }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int);
template void linear_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int);

}  // namespace scalar

namespace cpu {

size_t linear_weight_workspace_floats(int IC, int OC) {
#ifdef FORGE_HAVE_DNNL
  return onednn_blocked_b_floats(OneDnnType::kF32, IC, OC);
#else
  (void)IC, (void)OC;
  return 0;
#endif
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC, float* weight_workspace) {
#ifdef FORGE_HAVE_DNNL
  // The matmul primitive adds the bias in its epilogue, saving fill_rows_with_bias's pass.
  if (gemm_backend_for(false, true, N, OC, IC) == GemmBackend::kOneDnnMatmul) {
    onednn_matmul(OneDnnType::kF32, false, true, N, OC, IC, inp, IC, weight, IC, 0.0f, out, OC,
                  bias, weight_workspace);
    return;
  }
#else
  (void)weight_workspace;
#endif
  float beta = 0.0f;
  if (bias) {
    // Start from the bias and let the GEMM accumulate onto it (beta = 1): one pass over out.
    fill_rows_with_bias(out, bias, N, OC);
    beta = 1.0f;
  }
  gemm(false, true, N, OC, IC, inp, IC, weight, IC, beta, out, OC);
}

namespace {
// Calls row(n, column, i) for layer i's part of stacked row n, rows split between threads.
template <typename Row>
void for_each_part(const int* widths, int count, int N, Row&& row) {
  int total = 0;
  for (int i = 0; i < count; ++i) total += widths[i];
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n)
    for (int i = 0, column = 0; i < count; column += widths[i], ++i)
      row(static_cast<size_t>(n), static_cast<size_t>(n) * total + column, i);
}
}  // namespace

void split_columns(float* const* outs, const int* widths, int count, const float* stacked, int N) {
  for_each_part(widths, count, N, [&](size_t n, size_t from, int i) {
    std::copy_n(stacked + from, widths[i], outs[i] + n * widths[i]);
  });
}

void join_columns(float* stacked, const float* const* ins, const int* widths, int count, int N) {
  for_each_part(widths, count, N, [&](size_t n, size_t to, int i) {
    std::copy_n(ins[i] + n * widths[i], widths[i], stacked + to);
  });
}

void fill_rows_with_bias(float* out, const float* bias, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) std::copy(bias, bias + OC, out + static_cast<size_t>(n) * OC);
}

void bias_gradient(float* dbias, const float* dout, int N, int OC) {
  column_sums(dbias, dout, N, OC, [](int, int, int) {});
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  if (dinp) gemm(false, false, N, IC, OC, dout, OC, weight, IC, 0.0f, dinp, IC);
  gemm(true, false, OC, IC, N, dout, OC, inp, IC, 0.0f, dweight, IC);
  if (dbias) bias_gradient(dbias, dout, N, OC);
}

}  // namespace cpu

}  // namespace forge::kernels
