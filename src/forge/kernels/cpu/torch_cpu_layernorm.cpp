// torch-cpu LayerNorm, ported from PyTorch 1.13.1:
// aten/src/ATen/native/cpu/layer_norm_kernel.cpp (LayerNormKernelImplInternal,
// LayerNormBackwardKernelImplInternal) and cpu/moments_utils.h (RowwiseMoments,
// AddMoments, AddMomentsVec). Measured against torch: the products in the map lambdas, the
// ds/db reductions and the scalar coefficients round once into their add (FMA); the
// Welford moments round every product.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_layernorm.h"

#include <cmath>
#include <utility>
#include <vector>

#include "forge/kernels/cpu/torch_cpu_vec.h"

namespace forge::tcpu {
namespace {

constexpr int64_t kChunkSize = 16;

int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t v = x - 1, fls = 0;
  while (v >>= 1) ++fls;
  return fls + 1;
}

// AddMomentsVec / AddMoments: m1 += c*delta; m2 += m2_add + delta*delta*c*m0.
inline void add_moments_vec(int64_t m0_add, V m1_add, V m2_add, int64_t& m0, V& m1, V& m2) {
  const int64_t n = m0 + m0_add;
  const float c = n == 0 ? 0.0f : static_cast<float>(m0_add) / static_cast<float>(n);
  const V cv = vset1(c);
  const V delta = vsub(m1_add, m1);
  m1 = vadd(m1, vmul(cv, delta));
  m2 = vadd(m2, vadd(m2_add, vmul(vmul(vmul(delta, delta), cv), vset1(static_cast<float>(m0)))));
  m0 = n;
}
inline void add_moments(int64_t m0_add, float m1_add, float m2_add, int64_t& m0, float& m1,
                        float& m2) {
  const int64_t n = m0 + m0_add;
  const float c = n == 0 ? 0.0f : static_cast<float>(m0_add) / static_cast<float>(n);
  const float delta = m1_add - m1;
  m1 += c * delta;
  m2 += m2_add + delta * delta * c * static_cast<float>(m0);
  m0 = n;
}

// RowwiseMomentsImpl: Welford over chunks of 16 vectors, merged in a binary-counter cascade,
// then the scalar tail and the lanes folded in with AddMoments. Returns (mean, var).
std::pair<float, float> rowwise_moments(const float* X, int64_t N) {
  const int64_t n = N / kVec;
  const int64_t m = divup(n, kChunkSize);
  const int64_t depth = ceil_log2(m);
  const V zero = _mm256_setzero_ps();
  int64_t m0_stk[64] = {};
  V m1_stk[64], m2_stk[64];
  for (int64_t i = 0; i < depth; ++i) m1_stk[i] = m2_stk[i] = zero;

  for (int64_t i = 0; i < m; ++i) {
    const float* X_ptr = X + i * kChunkSize * kVec;
    const int64_t m0 = std::min(kChunkSize, n - i * kChunkSize);
    V m1v = zero, m2v = zero;
    for (int64_t j = 0; j < m0; ++j) {
      const V x = vload(X_ptr + j * kVec);
      const V delta = vsub(x, m1v);
      m1v = vadd(m1v, vmul(delta, vset1(1.0f / static_cast<float>(j + 1))));
      m2v = vadd(m2v, vmul(delta, vsub(x, m1v)));
    }
    add_moments_vec(m0, m1v, m2v, m0_stk[0], m1_stk[0], m2_stk[0]);
    int64_t mask = i + 1;
    for (int64_t j = 1; j < depth && (mask & 1) == 0; ++j) {
      add_moments_vec(m0_stk[j - 1], m1_stk[j - 1], m2_stk[j - 1], m0_stk[j], m1_stk[j], m2_stk[j]);
      m0_stk[j - 1] = 0;
      m1_stk[j - 1] = zero;
      m2_stk[j - 1] = zero;
      mask >>= 1;
    }
  }
  for (int64_t i = 1; i < depth; ++i)
    add_moments_vec(m0_stk[i], m1_stk[i], m2_stk[i], m0_stk[0], m1_stk[0], m2_stk[0]);

  alignas(32) float m1_arr[kVec], m2_arr[kVec];
  _mm256_store_ps(m1_arr, m1_stk[0]);
  _mm256_store_ps(m2_arr, m2_stk[0]);

  int64_t m0 = 0;
  float m1 = 0, m2 = 0;
  for (int64_t i = n * kVec; i < N; ++i) {
    const float delta = X[i] - m1;
    ++m0;
    m1 += delta / static_cast<float>(m0);
    m2 += delta * (X[i] - m1);
  }
  for (int64_t i = 0; i < kVec; ++i) add_moments(n, m1_arr[i], m2_arr[i], m0, m1, m2);
  return {m1, m2 / static_cast<float>(N)};
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int64_t N, int64_t C, float eps) {
  parallel_for(0, N, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const float* X_ptr = x + i * C;
      auto [mean_val, var] = rowwise_moments(X_ptr, C);
      const float rstd_val = 1.0f / std::sqrt(var + eps);
      const V scale = vset1(rstd_val);
      const V bias = vset1(-rstd_val * mean_val);
      // (x * scale + bias) * gamma + beta
      map3([&](V xv, V g, V bt) { return vfma(vfma(xv, scale, bias), g, bt); }, out + i * C, X_ptr,
           w, b, C);
      if (mean) mean[i] = mean_val;
      if (rstd) rstd[i] = rstd_val;
    }
  });
}

int64_t layernorm_backward_scratch(int64_t C, int threads) { return 2 * threads * C; }

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                        float* buffer) {
  const int num_threads = torch_threads();
  const float scale = 1.0f / static_cast<float>(C);
  for (int64_t i = 0; i < 2 * num_threads * C; ++i) buffer[i] = 0.0f;

  parallel_for(0, N, 1, [&](int64_t start, int64_t end, int tid) {
    float* dgamma_buf = buffer + tid * C;
    float* dbeta_buf = buffer + num_threads * C + tid * C;
    for (int64_t i = start; i < end; ++i) {
      const float* dY = dout + i * C;
      const float* X = x + i * C;
      {
        const float a = rstd[i];
        const float bb = -a * mean[i];
        const V av = vset1(a), bv = vset1(bb);
        // dgamma + dy * (a * x + b)
        map3([&](V dg, V dy, V xv) { return vfma(dy, vfma(av, xv, bv), dg); }, dgamma_buf,
             dgamma_buf, dY, X, C);
        map2([](V dbt, V dy) { return vadd(dbt, dy); }, dbeta_buf, dbeta_buf, dY, C);
      }
      if (dinp != nullptr) {
        // ds = sum(dy * x * gamma), db = sum(dy * gamma)
        const float ds =
            map3_reduce_all([](V dy, V xv, V g) { return vmul(vmul(dy, xv), g); },
                            [](V acc, V dy, V xv, V g) { return vfma(vmul(dy, xv), g, acc); },
                            AddOp{}, dY, X, w, C);
        const float dbs =
            map2_reduce_all([](V dy, V g) { return vmul(dy, g); },
                            [](V acc, V dy, V g) { return vfma(dy, g, acc); }, AddOp{}, dY, w, C);
        const float a = rstd[i];
        const float bcoef = std::fma(dbs, mean[i], -ds) * a * a * a * scale;
        const float ccoef = std::fma(-bcoef, mean[i], -(dbs * a * scale));
        const V av = vset1(a), bv = vset1(bcoef), cv = vset1(ccoef);
        // a * dy * gamma + b * x + c
        map3([&](V dy, V g, V xv) { return vadd(vfma(bv, xv, vmul(vmul(av, dy), g)), cv); },
             dinp + i * C, dY, w, X, C);
      }
    }
  });

  parallel_for(0, C, 1, [&](int64_t start, int64_t end, int) {
    for (int64_t j = start; j < end; ++j) {
      float dgamma_v = 0, dbeta_v = 0;
      for (int i = 0; i < num_threads; ++i) {
        dgamma_v += buffer[i * C + j];
        dbeta_v += buffer[num_threads * C + i * C + j];
      }
      if (dw) dw[j] = dgamma_v;
      if (db) db[j] = dbeta_v;
    }
  });
}

}  // namespace forge::tcpu
