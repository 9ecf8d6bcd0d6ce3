#include "forge/kernels/gqa_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "forge/core/error.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/cpu/simd.h"
#include "forge/kernels/cpu/tile_gemm.h"

namespace forge::kernels {

namespace {
void check_shape(const GqaShape& s) {
  FORGE_CHECK(s.KVH > 0 && s.NH % s.KVH == 0,
              "grouped-query attention: {} kv heads must divide {} query heads", s.KVH, s.NH);
}
}  // namespace

namespace scalar {

template <typename Real>
void gqa_attention_forward(Real* out, Real* probs, const Real* q, const Real* k, const Real* v,
                           const GqaShape& s) {
  check_shape(s);
  const int T = s.T, NH = s.NH, KVH = s.KVH, hd = s.hd, rep = NH / KVH;
  const size_t ldq = static_cast<size_t>(NH) * hd, ldk = static_cast<size_t>(KVH) * hd;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hd));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int g = h / rep;
      for (int i = 0; i < T; ++i) {
        const Real* qi = q + (static_cast<size_t>(b) * T + i) * ldq + h * hd;
        Real* p = probs + ((static_cast<size_t>(b) * NH + h) * T + i) * T;
        Real m = -std::numeric_limits<Real>::infinity();
        for (int j = 0; j <= i; ++j) {
          const Real* kj = k + (static_cast<size_t>(b) * T + j) * ldk + g * hd;
          Real dotp = 0;
          for (int d = 0; d < hd; ++d) dotp += qi[d] * kj[d];
          p[j] = dotp * scale;
          m = std::max(m, p[j]);
        }
        Real z = 0;
        for (int j = 0; j <= i; ++j) z += (p[j] = std::exp(p[j] - m));
        for (int j = 0; j <= i; ++j) p[j] /= z;
        for (int j = i + 1; j < T; ++j) p[j] = 0;
        Real* o = out + (static_cast<size_t>(b) * T + i) * ldq + h * hd;
        std::fill(o, o + hd, Real(0));
        for (int j = 0; j <= i; ++j) {
          const Real* vj = v + (static_cast<size_t>(b) * T + j) * ldk + g * hd;
          for (int d = 0; d < hd; ++d) o[d] += p[j] * vj[d];
        }
      }
    }
}

template <typename Real>
void gqa_attention_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q,
                            const Real* k, const Real* v, const Real* probs, const GqaShape& s) {
  check_shape(s);
  const int T = s.T, NH = s.NH, KVH = s.KVH, hd = s.hd, rep = NH / KVH;
  const size_t ldq = static_cast<size_t>(NH) * hd, ldk = static_cast<size_t>(KVH) * hd;
  const size_t rows = static_cast<size_t>(s.B) * T;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hd));
  std::fill(dq, dq + rows * ldq, Real(0));
  std::fill(dk, dk + rows * ldk, Real(0));
  std::fill(dv, dv + rows * ldk, Real(0));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int g = h / rep;
      for (int i = 0; i < T; ++i) {
        const size_t qi = (static_cast<size_t>(b) * T + i) * ldq + h * hd;
        const Real* p = probs + ((static_cast<size_t>(b) * NH + h) * T + i) * T;
        const Real* d = dout + qi;
        Real D = 0;
        for (int j = 0; j <= i; ++j) {
          const Real* vj = v + (static_cast<size_t>(b) * T + j) * ldk + g * hd;
          Real dp = 0;
          for (int e = 0; e < hd; ++e) dp += d[e] * vj[e];
          D += p[j] * dp;
        }
        for (int j = 0; j <= i; ++j) {
          const size_t kj = (static_cast<size_t>(b) * T + j) * ldk + g * hd;
          Real dp = 0;
          for (int e = 0; e < hd; ++e) dp += d[e] * v[kj + e];
          const Real ds = p[j] * (dp - D) * scale;
          for (int e = 0; e < hd; ++e) {
            dv[kj + e] += p[j] * d[e];
            dq[qi + e] += ds * k[kj + e];
            dk[kj + e] += ds * q[qi + e];
          }
        }
      }
    }
}

template void gqa_attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                           const GqaShape&);
template void gqa_attention_forward<double>(double*, double*, const double*, const double*,
                                            const double*, const GqaShape&);
template void gqa_attention_backward<float>(float*, float*, float*, const float*, const float*,
                                            const float*, const float*, const float*,
                                            const GqaShape&);
template void gqa_attention_backward<double>(double*, double*, double*, const double*,
                                             const double*, const double*, const double*,
                                             const double*, const GqaShape&);

}  // namespace scalar

namespace cpu {

namespace {

#include "forge/kernels/cpu/attention_rows.inc"

// kQTile queries against kKTile keys at a time: the score tile and the row accumulators stay
// in L1, one kv head's k^T and v^T in L2.
constexpr int kQTile = 32;
constexpr int kKTile = 64;
// Backward's key-outer loop starts a key tile's query tiles at its first key.
static_assert(kKTile % kQTile == 0);

struct Tiles {                         // forward's, per thread, on the stack (~40 KB)
  float scores[kQTile * kKTile];       // S, then P
  float acc[kQTile * kGqaMaxHeadDim];  // the query tile's output accumulators
};
struct BackwardTiles {  // backward's, with a key tile's dk and dv (~144 KB at kGqaMaxHeadDim)
  float scores[kQTile * kKTile];   // P
  float dscores[kQTile * kKTile];  // dP, then dS
  float dk[kKTile * kGqaMaxHeadDim];
  float dv[kKTile * kGqaMaxHeadDim];
};

}  // namespace

size_t gqa_attention_saved_floats(const GqaShape& s) {
  return AttentionSaved::floats(s.B, s.T, s.NH, s.KVH, s.hd);
}

void gqa_attention_forward(float* out, float* saved, const float* q, const float* k, const float* v,
                           const GqaShape& s) {
  check_shape(s);
  const int T = s.T, NH = s.NH, KVH = s.KVH, hd = s.hd, rep = NH / KVH;
  FORGE_CHECK(hd <= kGqaMaxHeadDim, "attention head dim {} exceeds {}", hd, kGqaMaxHeadDim);
  const int ldq = NH * hd, ldk = KVH * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const AttentionSaved sv(saved, s.B, s.T, s.NH, s.KVH, s.hd);
  const int ldt = static_cast<int>(sv.ldt);
  const int q_tiles = (T + kQTile - 1) / kQTile;
#pragma omp parallel
  {
    // Each kv head's keys and values transposed once, for all its query heads and tiles here
    // and for backward.
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < s.B; ++b)
      for (int g = 0; g < KVH; ++g) {
        const size_t kv0 = static_cast<size_t>(b) * T * ldk + g * hd, kv_head = b * KVH + g;
        transpose_head(sv.head_kt(kv_head), sv.ldt, k + kv0, ldk, T, hd);
        transpose_head(sv.head_vt(kv_head), sv.ldt, v + kv0, ldk, T, hd);
      }
    Tiles tl;
    float m[kQTile], z[kQTile];
    // Later query tiles see more keys: tasks are handed out dynamically.
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int qt = 0; qt < q_tiles; ++qt) {
          const int g = h / rep;
          const float* qb = q + static_cast<size_t>(b) * T * ldq + h * hd;
          const float* kt = sv.head_kt(static_cast<size_t>(b) * KVH + g);
          const float* vb = v + static_cast<size_t>(b) * T * ldk + g * hd;
          const int i0 = qt * kQTile, nq = std::min(kQTile, T - i0);
          std::fill(m, m + nq, -std::numeric_limits<float>::infinity());
          std::fill(z, z + nq, 0.0f);
          // The accumulators start at the first key tile's P V (a product from zero), so they
          // are neither zeroed nor rescaled before it.
          for (int j0 = 0; j0 < i0 + nq; j0 += kKTile) {
            const int nk = std::min(kKTile, i0 + nq - j0);
            tile::gemm(nq, nk, hd, qb + static_cast<size_t>(i0) * ldq, ldq, 1, kt + j0, ldt,
                       tl.scores, kKTile);
            for (int r = 0; r < nq; ++r) {
              float* srow = tl.scores + r * kKTile;
              scale_and_mask(srow, nk, scale, i0 + r + 1 - j0);
              const float m_new = std::max(m[r], max_of(srow, nk));
              if (m_new > m[r]) {
                if (j0 > 0) {
                  // Online softmax: what was summed under the old maximum is rescaled.
                  const float corr = std::exp(m[r] - m_new);
                  scale_row(tl.acc + r * hd, hd, corr);
                  z[r] *= corr;
                }
                m[r] = m_new;
              }
              z[r] += exp_shifted(srow, nk, m[r]);
            }
            tile::gemm_acc_kept_rows(j0 > 0 ? nq : 0, nq, hd, nk, tl.scores, kKTile, 1,
                                     vb + static_cast<size_t>(j0) * ldk, ldk, tl.acc, hd);
          }
          for (int r = 0; r < nq; ++r) {
            const int i = i0 + r;
            float* o = out + (static_cast<size_t>(b) * T + i) * ldq + h * hd;
            const float inv = 1.0f / z[r];
            for (int d = 0; d < hd; ++d) o[d] = tl.acc[r * hd + d] * inv;
            sv.lse[(static_cast<size_t>(b) * NH + h) * T + i] = m[r] + std::log(z[r]);
          }
        }
  }
}

void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* out, const float* saved,
                            const GqaShape& s) {
  check_shape(s);
  const int T = s.T, NH = s.NH, KVH = s.KVH, hd = s.hd, rep = NH / KVH;
  FORGE_CHECK(hd <= kGqaMaxHeadDim, "attention head dim {} exceeds {}", hd, kGqaMaxHeadDim);
  const int ldq = NH * hd, ldk = KVH * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const AttentionSaved sv(saved, s.B, s.T, s.NH, s.KVH, s.hd);
  const int ldt = static_cast<int>(sv.ldt);
  // One task per (b, kv head): it owns that head's dk/dv rows and the dq columns of the query
  // heads in its group. Key tiles are the outer loop: a key tile's dk and dv accumulate in
  // BackwardTiles over the group's heads (in head order, then query tiles) and are written out
  // once, while each head's dq accumulates in dq over key tiles. Every element is summed in the
  // same order as with query tiles outermost. Nothing is zeroed first: the first product into a
  // row overwrites it.
#pragma omp parallel
  {
    BackwardTiles tl;
    float delta[kQTile];
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; ++b)
      for (int g = 0; g < KVH; ++g) {
        const size_t kv0 = static_cast<size_t>(b) * T * ldk + g * hd;
        const size_t kv_head = static_cast<size_t>(b) * KVH + g;
        const float* kt = sv.head_kt(kv_head);
        const float* vt = sv.head_vt(kv_head);
        for (int j0 = 0; j0 < T; j0 += kKTile) {
          const float* kblk = k + kv0 + static_cast<size_t>(j0) * ldk;
          for (int h = g * rep; h < (g + 1) * rep; ++h) {
            const size_t q0 = static_cast<size_t>(b) * T * ldq + h * hd;
            const float* row_lse = sv.lse + (static_cast<size_t>(b) * NH + h) * T;
            // The queries that see these keys start at j0 (a multiple of kQTile).
            for (int i0 = j0; i0 < T; i0 += kQTile) {
              const int nq = std::min(kQTile, T - i0);
              const int nk = std::min(kKTile, i0 + nq - j0);
              const size_t qrow = q0 + static_cast<size_t>(i0) * ldq;
              // D_i = dout_i . out_i equals sum_j p_ij (dout_i . v_j).
              for (int r = 0; r < nq; ++r)
                delta[r] = dot(dout + qrow + static_cast<size_t>(r) * ldq,
                               out + qrow + static_cast<size_t>(r) * ldq, hd);
              // P = exp(scale Q K^T - lse), masked.
              tile::gemm(nq, nk, hd, q + qrow, ldq, 1, kt + j0, ldt, tl.scores, kKTile);
              for (int r = 0; r < nq; ++r) {
                float* srow = tl.scores + r * kKTile;
                scale_and_mask(srow, nk, scale, i0 + r + 1 - j0);
                exp_shifted(srow, nk, row_lse[i0 + r]);
              }
              // dP = dO V^T
              tile::gemm(nq, nk, hd, dout + qrow, ldq, 1, vt + j0, ldt, tl.dscores, kKTile);
              // dS = P (dP - D) scale   (the score scale folded in here)
              for (int r = 0; r < nq; ++r) {
                const float* p = tl.scores + r * kKTile;
                float* ds = tl.dscores + r * kKTile;
                for (int j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - delta[r]) * scale;
              }
              // dV += P^T dO;  dQ += dS K;  dK += dS^T Q
              // (keys before i0 were reached by earlier query tiles or heads, queries by
              // earlier key tiles)
              const int kept = h == g * rep ? i0 - j0 : nk;
              tile::gemm_acc_kept_rows(kept, nk, hd, nq, tl.scores, 1, kKTile, dout + qrow, ldq,
                                       tl.dv, hd);
              tile::gemm_acc_kept_rows(j0 > 0 ? nq : 0, nq, hd, nk, tl.dscores, kKTile, 1, kblk,
                                       ldk, dq + qrow, ldq);
              tile::gemm_acc_kept_rows(kept, nk, hd, nq, tl.dscores, 1, kKTile, q + qrow, ldq,
                                       tl.dk, hd);
            }
          }
          for (int r = 0; r < std::min(kKTile, T - j0); ++r) {
            const size_t row = kv0 + static_cast<size_t>(j0 + r) * ldk;
            std::copy_n(tl.dk + r * hd, hd, dk + row);
            std::copy_n(tl.dv + r * hd, hd, dv + row);
          }
        }
      }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
