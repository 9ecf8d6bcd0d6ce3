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
#include "forge/kernels/cpu/attention_tiles.inc"

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
    ForwardTiles<kGqaMaxHeadDim> tl;
    // Later query tiles see more keys: tasks are handed out dynamically.
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int qt = 0; qt < q_tiles; ++qt) {
          const int g = h / rep, i0 = qt * kQTile;
          const size_t q0 = static_cast<size_t>(b) * T * ldq + h * hd;
          forward_query_tile(tl, out + q0, ldq, sv.lse + (static_cast<size_t>(b) * NH + h) * T,
                             q + q0, ldq, sv.head_kt(static_cast<size_t>(b) * KVH + g), ldt,
                             v + static_cast<size_t>(b) * T * ldk + g * hd, ldk, i0,
                             std::min(kQTile, T - i0), hd, scale);
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
    BackwardTiles<kGqaMaxHeadDim> tl;
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; ++b)
      for (int g = 0; g < KVH; ++g) {
        const size_t kv0 = static_cast<size_t>(b) * T * ldk + g * hd;
        const size_t kv_head = static_cast<size_t>(b) * KVH + g;
        for (int j0 = 0; j0 < T; j0 += kKTile) {
          for (int h = g * rep; h < (g + 1) * rep; ++h) {
            const size_t q0 = static_cast<size_t>(b) * T * ldq + h * hd;
            backward_key_tile(tl, dq + q0, q + q0, ldq, dout + q0, out + q0, ldq, k + kv0, ldk,
                              sv.head_kt(kv_head), sv.head_vt(kv_head), ldt,
                              sv.lse + (static_cast<size_t>(b) * NH + h) * T, h == g * rep, T, j0,
                              hd, scale);
          }
          store_key_tile(tl, dk + kv0, dv + kv0, ldk, T, j0, hd);
        }
      }
  }
}

}  // namespace cpu

}  // namespace forge::kernels
