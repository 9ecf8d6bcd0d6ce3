#include "forge/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "forge/core/error.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/simd.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void attention_forward(Real* out, Real* probs, const Real* qkv, int B, int T, int C, int NH) {
  const int hd = C / NH;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hd));
  const size_t C3 = 3 * static_cast<size_t>(C);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const Real* q = qkv + (static_cast<size_t>(b) * T + i) * C3 + h * hd;
        Real* p = probs + ((static_cast<size_t>(b) * NH + h) * T + i) * T;
        Real m = -std::numeric_limits<Real>::infinity();
        for (int j = 0; j <= i; ++j) {
          const Real* k = qkv + (static_cast<size_t>(b) * T + j) * C3 + C + h * hd;
          Real s = 0;
          for (int d = 0; d < hd; ++d) s += q[d] * k[d];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        Real z = 0;
        for (int j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - m);
          z += p[j];
        }
        for (int j = 0; j <= i; ++j) p[j] /= z;
        for (int j = i + 1; j < T; ++j) p[j] = 0;
        Real* o = out + (static_cast<size_t>(b) * T + i) * C + h * hd;
        for (int d = 0; d < hd; ++d) o[d] = 0;
        for (int j = 0; j <= i; ++j) {
          const Real* v = qkv + (static_cast<size_t>(b) * T + j) * C3 + 2 * C + h * hd;
          for (int d = 0; d < hd; ++d) o[d] += p[j] * v[d];
        }
      }
}

template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* probs, int B,
                        int T, int C, int NH) {
  const int hd = C / NH;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hd));
  const size_t C3 = 3 * static_cast<size_t>(C);
  std::fill(dqkv, dqkv + static_cast<size_t>(B) * T * C3, Real(0));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const size_t row_i = (static_cast<size_t>(b) * T + i) * C3 + h * hd;
        const Real* p = probs + ((static_cast<size_t>(b) * NH + h) * T + i) * T;
        const Real* d = dout + (static_cast<size_t>(b) * T + i) * C + h * hd;
        // D_i = sum_j p_ij (dout_i . v_j)
        Real D = 0;
        for (int j = 0; j <= i; ++j) {
          const Real* v = qkv + (static_cast<size_t>(b) * T + j) * C3 + 2 * C + h * hd;
          Real dp = 0;
          for (int e = 0; e < hd; ++e) dp += d[e] * v[e];
          D += p[j] * dp;
        }
        for (int j = 0; j <= i; ++j) {
          const size_t row_j = (static_cast<size_t>(b) * T + j) * C3 + h * hd;
          const Real* v = qkv + row_j + 2 * C;
          Real dp = 0;
          for (int e = 0; e < hd; ++e) dp += d[e] * v[e];
          const Real ds = p[j] * (dp - D) * scale;
          for (int e = 0; e < hd; ++e) {
            dqkv[row_j + 2 * C + e] += p[j] * d[e];
            dqkv[row_i + e] += ds * qkv[row_j + C + e];
            dqkv[row_j + C + e] += ds * qkv[row_i + e];
          }
        }
      }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int,
                                        int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, int,
                                         int, int, int);

}  // namespace scalar

namespace cpu {

// The SIMD source, compiled once per ISA (see cpu/dispatch.h).
#define FORGE_ISA_SOURCE "forge/kernels/cpu/attention.inc"
#include "forge/kernels/cpu/for_each_isa.inc"

void attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                       const AttentionLayout& L) {
  FORGE_SIMD_DISPATCH(attention_forward(out, saved, q, k, v, L));
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* saved,
                        const AttentionLayout& L) {
  FORGE_SIMD_DISPATCH(attention_backward(dq, dk, dv, dout, q, k, v, out, saved, L));
}

void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH) {
  attention_forward(out, saved, qkv, qkv + C, qkv + 2 * C, AttentionLayout::qkv(B, T, C, NH));
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* saved, int B, int T, int C, int NH) {
  attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out, saved,
                     AttentionLayout::qkv(B, T, C, NH));
}

}  // namespace cpu

}  // namespace forge::kernels
