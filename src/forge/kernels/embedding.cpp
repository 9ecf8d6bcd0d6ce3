#include "forge/kernels/embedding.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <vector>

#include "forge/kernels/cpu/column_sums.h"
#include "forge/kernels/linear.h"

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
  // Each token's rows summed in double in position order, then added once onto its row of dwte
  // (which holds the tied head's gradient). Only the tokens present get a sum, so the map is
  // small whatever the vocabulary.
  std::map<int32_t, std::vector<double>> sums;
  for (int row = 0; row < B * T; ++row) {
    std::vector<double>& sum = sums.try_emplace(tokens[row], static_cast<size_t>(C)).first->second;
    for (int c = 0; c < C; ++c)
      sum[c] += static_cast<double>(dout[static_cast<size_t>(row) * C + c]);
  }
  for (const auto& [v, sum] : sums) {
    Real* dw = dwte + static_cast<size_t>(v) * C;
    for (int c = 0; c < C; ++c) dw[c] = static_cast<Real>(static_cast<double>(dw[c]) + sum[c]);
  }
  if (dwpe)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        double sum = 0.0;
        for (int b = 0; b < B; ++b)
          sum += static_cast<double>(dout[(static_cast<size_t>(b) * T + t) * C + c]);
        dwpe[static_cast<size_t>(t) * C + c] = static_cast<Real>(sum);
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

size_t embedding_backward_scratch(int B, int T) { return 2 * static_cast<size_t>(B) * T + 1; }

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int64_t* scratch) {
  // The positions sorted by token (the position in the key's low half keeps each token's rows
  // in position order), then where each token's run of them begins.
  const int N = B * T;
  int64_t* key = scratch;      // [N]
  int64_t* run = scratch + N;  // [runs + 1]
  for (int i = 0; i < N; ++i)
    key[i] = static_cast<int64_t>(static_cast<uint32_t>(tokens[i])) << 32 | i;
  std::sort(key, key + N);
  int runs = 0;
  for (int i = 0; i < N; ++i)
    if (i == 0 || key[i] >> 32 != key[i - 1] >> 32) run[runs++] = i;
  run[runs] = N;

  // One thread owns each token's row, so no two threads write the same float and the order
  // does not depend on the thread count. Its columns sum kColumnChunk at a time in double, as
  // the other parameter gradients' (cpu/column_sums.h), but over the token's rows only and onto
  // the gradient the tied head left.
#pragma omp parallel for schedule(static)
  for (int r = 0; r < runs; ++r) {
    float* dw = dwte + static_cast<size_t>(key[run[r]] >> 32) * C;
    for (int c0 = 0; c0 < C; c0 += kColumnChunk) {
      const int width = std::min(kColumnChunk, C - c0);
      double sum[kColumnChunk] = {};
      for (int64_t k = run[r]; k < run[r + 1]; ++k) {
        const float* d = dout + static_cast<size_t>(key[k] & 0xffffffff) * C + c0;
        for (int c = 0; c < width; ++c) sum[c] += static_cast<double>(d[c]);
      }
      for (int c = 0; c < width; ++c)
        dw[c0 + c] = static_cast<float>(static_cast<double>(dw[c0 + c]) + sum[c]);
    }
  }
  // dwpe[t, :] sums dout[b, t, :] over b: the column sums of dout seen as B rows of T x C,
  // which the bias gradient's pass makes (in double, in row order, rounded once).
  if (dwpe) bias_gradient(dwpe, dout, B, T * C);
}

}  // namespace cpu

}  // namespace forge::kernels
