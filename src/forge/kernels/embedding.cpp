#include "forge/kernels/embedding.h"

#include <algorithm>
#include <cstddef>

namespace forge::kernels {

namespace scalar {

template <typename Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B,
                       int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const size_t row = static_cast<size_t>(b) * T + t;
      const Real* w = wte + static_cast<size_t>(tokens[row]) * C;
      const Real* p = wpe + static_cast<size_t>(t) * C;
      for (int c = 0; c < C; ++c) out[row * C + c] = w[c] + p[c];
    }
}

template <typename Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B,
                        int T, int C) {
  if (dwpe) std::fill(dwpe, dwpe + static_cast<size_t>(T) * C, Real(0));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const size_t row = static_cast<size_t>(b) * T + t;
      Real* dw = dwte + static_cast<size_t>(tokens[row]) * C;
      for (int c = 0; c < C; ++c) {
        dw[c] += dout[row * C + c];
        if (dwpe) dwpe[static_cast<size_t>(t) * C + c] += dout[row * C + c];
      }
    }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int,
                                       int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int,
                                        int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int,
                                        int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int,
                                         int);

}  // namespace scalar

namespace cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  const int rows = B * T;
#pragma omp parallel for schedule(static)
  for (int row = 0; row < rows; ++row) {
    const float* w = wte + static_cast<size_t>(tokens[row]) * C;
    const float* p = wpe + static_cast<size_t>(row % T) * C;
    float* o = out + static_cast<size_t>(row) * C;
    for (int c = 0; c < C; ++c) o[c] = w[c] + p[c];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) {
  // Several rows may hit the same token, so threads split the channels instead of the rows:
  // no two threads ever write the same float, and the summation order over rows is fixed.
  constexpr int kChunk = 64;
  const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int c0 = chunk * kChunk, c1 = std::min(C, c0 + kChunk);
    for (int row = 0; row < B * T; ++row) {
      float* dw = dwte + static_cast<size_t>(tokens[row]) * C;
      const float* d = dout + static_cast<size_t>(row) * C;
      for (int c = c0; c < c1; ++c) dw[c] += d[c];
    }
    if (dwpe) {
      for (int t = 0; t < T; ++t) {
        float* dp = dwpe + static_cast<size_t>(t) * C;
        for (int c = c0; c < c1; ++c) dp[c] = 0.0f;
        for (int b = 0; b < B; ++b) {
          const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
          for (int c = c0; c < c1; ++c) dp[c] += d[c];
        }
      }
    }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
