#include "forge/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "forge/core/error.h"
#include "forge/kernels/cpu/simd.h"
#include "forge/kernels/cpu/tile_gemm.h"

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
template void attention_backward<float>(float*, const float*, const float*, const float*, int,
                                        int, int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         int, int, int, int);

}  // namespace scalar

namespace cpu {

namespace {

// Queries are processed kQTile at a time against tiles of kKTile keys: the score tile, the
// transposed key/value tile and the output accumulators stay in L1/L2, and the T x T
// score matrix is never formed.
constexpr int kQTile = 32;
constexpr int kKTile = 64;

// Per-thread working set of one (query tile, key tile) step, on the stack (~110 KB).
struct Tiles {
  float scores[kQTile * kKTile];  // S, then P
  float dscores[kQTile * kKTile];  // dP, then dS (backward)
  float kt[kMaxHeadDim * kKTile];  // K^T (or V^T) of the key tile
  float acc[kQTile * kMaxHeadDim];  // output (forward) or dQ (backward) accumulators
};

// dst[d][j] = src[j * stride + d] for j < n, d < hd: a key tile transposed so that score
// rows are contiguous along keys.
void transpose_tile(float* dst, const float* src, size_t stride, int n, int hd) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < hd; ++d) dst[d * kKTile + j] = src[j * stride + d];
}

// s[0, n) *= scale; entries of keys after query `row` (causal mask) become -inf.
void scale_and_mask(float* s, int n, float scale, int first_masked) {
  using namespace simd;
  const V vs = set1(scale);
  int j = 0;
  for (; j + W <= n; j += W) store(s + j, mul(load(s + j), vs));
  for (; j < n; ++j) s[j] *= scale;
  for (j = std::max(first_masked, 0); j < n; ++j) s[j] = -std::numeric_limits<float>::infinity();
}

// s[j] = exp(s[j] - shift) for j < n; returns their sum.
float exp_shifted(float* s, int n, float shift) {
  using namespace simd;
  const V vshift = set1(shift);
  V sum = zero();
  int j = 0;
  for (; j + W <= n; j += W) {
    const V e = simd::exp(sub(load(s + j), vshift));
    store(s + j, e);
    sum = add(sum, e);
  }
  float total = reduce_add(sum);
  for (; j < n; ++j) total += s[j] = exp_scalar(s[j] - shift);
  return total;
}

void scale_row(float* x, int n, float a) {
  using namespace simd;
  const V va = set1(a);
  int d = 0;
  for (; d + W <= n; d += W) store(x + d, mul(load(x + d), va));
  for (; d < n; ++d) x[d] *= a;
}

float max_of(const float* x, int n) {
  using namespace simd;
  V m = set1(-std::numeric_limits<float>::infinity());
  int j = 0;
  for (; j + W <= n; j += W) m = simd::max(m, load(x + j));
  float r = reduce_max(m);
  for (; j < n; ++j) r = std::max(r, x[j]);
  return r;
}

float dot(const float* a, const float* b, int n) {
  using namespace simd;
  V acc = zero();
  int d = 0;
  for (; d + W <= n; d += W) acc = fmadd(load(a + d), load(b + d), acc);
  float r = reduce_add(acc);
  for (; d < n; ++d) r += a[d] * b[d];
  return r;
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const int hd = C / NH;
  FORGE_CHECK(hd <= kMaxHeadDim, "attention head dim {} exceeds {}", hd, kMaxHeadDim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t C3 = 3 * static_cast<size_t>(C);
  const int q_tiles = (T + kQTile - 1) / kQTile;
  // Tasks are (b, h, query tile); later query tiles see more keys, so hand them out
  // dynamically.
#pragma omp parallel
  {
    Tiles tiles;
    float row_max[kQTile], row_sum[kQTile];
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int qt = 0; qt < q_tiles; ++qt) {
          const float* base = qkv + static_cast<size_t>(b) * T * C3 + h * hd;
          const int i0 = qt * kQTile, nq = std::min(kQTile, T - i0);
          for (int r = 0; r < nq; ++r) {
            row_max[r] = -std::numeric_limits<float>::infinity();
            row_sum[r] = 0.0f;
          }
          std::fill(tiles.acc, tiles.acc + nq * hd, 0.0f);
          for (int j0 = 0; j0 < i0 + nq; j0 += kKTile) {
            const int nk = std::min(kKTile, i0 + nq - j0);
            transpose_tile(tiles.kt, base + j0 * C3 + C, C3, nk, hd);
            std::fill(tiles.scores, tiles.scores + nq * kKTile, 0.0f);
            tile::gemm_acc(nq, nk, hd, base + i0 * C3, static_cast<int>(C3), 1, tiles.kt, kKTile,
                           tiles.scores, kKTile);
            for (int r = 0; r < nq; ++r) {
              float* s = tiles.scores + r * kKTile;
              scale_and_mask(s, nk, scale, i0 + r + 1 - j0);
              const float m_new = std::max(row_max[r], max_of(s, nk));
              if (m_new > row_max[r]) {
                // Online softmax: rescale what was accumulated under the old maximum.
                const float corr = std::exp(row_max[r] - m_new);
                scale_row(tiles.acc + r * hd, hd, corr);
                row_sum[r] *= corr;
                row_max[r] = m_new;
              }
              row_sum[r] += exp_shifted(s, nk, m_new);
            }
            tile::gemm_acc(nq, hd, nk, tiles.scores, kKTile, 1, base + j0 * C3 + 2 * C,
                           static_cast<int>(C3), tiles.acc, hd);
          }
          for (int r = 0; r < nq; ++r) {
            const size_t i = i0 + r;
            float* o = out + (static_cast<size_t>(b) * T + i) * C + h * hd;
            const float inv = 1.0f / row_sum[r];
            for (int d = 0; d < hd; ++d) o[d] = tiles.acc[r * hd + d] * inv;
            lse[(static_cast<size_t>(b) * NH + h) * T + i] = row_max[r] + std::log(row_sum[r]);
          }
        }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH) {
  const int hd = C / NH;
  FORGE_CHECK(hd <= kMaxHeadDim, "attention head dim {} exceeds {}", hd, kMaxHeadDim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t C3 = 3 * static_cast<size_t>(C);
  const int ldq = static_cast<int>(C3), ldo = C;
  // Each (b, h) task owns its q/k/v slices of dqkv: dK and dV accumulate over query tiles
  // without any other thread touching them.
#pragma omp parallel
  {
    Tiles tiles;
    float delta[kQTile];
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h) {
        const float* base = qkv + static_cast<size_t>(b) * T * C3 + h * hd;
        float* dbase = dqkv + static_cast<size_t>(b) * T * C3 + h * hd;
        const float* dobase = dout + static_cast<size_t>(b) * T * C + h * hd;
        const float* obase = out + static_cast<size_t>(b) * T * C + h * hd;
        const float* row_lse = lse + (static_cast<size_t>(b) * NH + h) * T;
        for (int t = 0; t < T; ++t) {
          std::fill(dbase + t * C3 + C, dbase + t * C3 + C + hd, 0.0f);
          std::fill(dbase + t * C3 + 2 * C, dbase + t * C3 + 2 * C + hd, 0.0f);
        }
        for (int i0 = 0; i0 < T; i0 += kQTile) {
          const int nq = std::min(kQTile, T - i0);
          // D_i = dout_i . out_i equals sum_j p_ij (dout_i . v_j).
          for (int r = 0; r < nq; ++r)
            delta[r] = dot(dobase + (i0 + r) * C, obase + (i0 + r) * C, hd);
          std::fill(tiles.acc, tiles.acc + nq * hd, 0.0f);
          for (int j0 = 0; j0 < i0 + nq; j0 += kKTile) {
            const int nk = std::min(kKTile, i0 + nq - j0);
            const float* kblk = base + j0 * C3 + C;
            const float* vblk = base + j0 * C3 + 2 * C;
            // P = exp(scale Q K^T - lse), masked.
            transpose_tile(tiles.kt, kblk, C3, nk, hd);
            std::fill(tiles.scores, tiles.scores + nq * kKTile, 0.0f);
            tile::gemm_acc(nq, nk, hd, base + i0 * C3, ldq, 1, tiles.kt, kKTile, tiles.scores,
                           kKTile);
            for (int r = 0; r < nq; ++r) {
              float* s = tiles.scores + r * kKTile;
              scale_and_mask(s, nk, scale, i0 + r + 1 - j0);
              exp_shifted(s, nk, row_lse[i0 + r]);
            }
            // dP = dO V^T
            transpose_tile(tiles.kt, vblk, C3, nk, hd);
            std::fill(tiles.dscores, tiles.dscores + nq * kKTile, 0.0f);
            tile::gemm_acc(nq, nk, hd, dobase + i0 * C, ldo, 1, tiles.kt, kKTile, tiles.dscores,
                           kKTile);
            // dS = P (dP - D) scale   (the 1/sqrt(hd) of the scores folded in here)
            for (int r = 0; r < nq; ++r) {
              const float* p = tiles.scores + r * kKTile;
              float* ds = tiles.dscores + r * kKTile;
              for (int j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - delta[r]) * scale;
            }
            // dV += P^T dO;  dQ += dS K;  dK += dS^T Q
            tile::gemm_acc(nk, hd, nq, tiles.scores, 1, kKTile, dobase + i0 * C, ldo,
                           dbase + j0 * C3 + 2 * C, ldq);
            tile::gemm_acc(nq, hd, nk, tiles.dscores, kKTile, 1, kblk, ldq, tiles.acc, hd);
            tile::gemm_acc(nk, hd, nq, tiles.dscores, 1, kKTile, base + i0 * C3, ldq,
                           dbase + j0 * C3 + C, ldq);
          }
          for (int r = 0; r < nq; ++r)
            std::copy(tiles.acc + r * hd, tiles.acc + (r + 1) * hd, dbase + (i0 + r) * C3);
        }
      }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
