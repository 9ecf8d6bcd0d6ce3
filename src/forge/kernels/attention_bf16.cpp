#include "forge/kernels/attention_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "forge/core/error.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/bf16_gemm.h"
#include "forge/kernels/cpu/amx.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/simd.h"
#include "forge/kernels/gqa_attention.h"

namespace forge::kernels::cpu {

// Plain code, compiled for the build's target: what runs before attention_bf16_available()
// has said yes must not contain AVX-512 instructions.
namespace {

size_t round16(size_t n) { return (n + 15) / 16 * 16; }

// Sizes of one head's packs, in 4-byte words. On AMX tiles (amx) the packs are padded: a
// tile product reads whole tiles of 16 rows by 16 words, so every summed index is padded with
// zeros to a multiple of 16 words (a pad that met a stale NaN would spread it) and every
// row or column a tile may touch past the data exists.
struct Geometry {
  int T, hd, hp2, T2;  // hp2 = pairs per row of a head, T2 = pairs of positions
  bool amx;
  int rs;            // row stride of the rows of pairs: hp2, on AMX padded to 16
  int ldv;           // hd, on AMX padded to 16: the row stride of the pairs of positions and
                     // the rows of the transposed accumulators and packs
  size_t ldt, ldt2;  // strides of the transposed packs (padded against L1 set conflicts)
  Geometry(int T_, int hd_, bool amx_)
      : T(T_),
        hd(hd_),
        hp2((hd_ + 1) / 2),
        T2((T_ + 1) / 2),
        amx(amx_),
        rs(amx_ ? static_cast<int>(round16(hp2)) : hp2),
        ldv(amx_ ? static_cast<int>(round16(hd_)) : hd_),
        ldt(attention_key_stride(T_)),
        ldt2(attention_key_stride((T_ + 1) / 2)) {}
  size_t t_rows() const { return amx ? round16(T) : T; }
  size_t t2_rows() const { return amx ? round16(T2) : T2; }
  size_t rows() const { return round16(t_rows() * rs); }
  size_t pairs_t() const { return round16(static_cast<size_t>(rs) * ldt); }
  size_t vnni() const { return round16(t2_rows() * ldv); }
  size_t vnni_t() const { return round16(static_cast<size_t>(ldv) * ldt2); }
  size_t acc_t() const { return round16(static_cast<size_t>(ldv) * ldt); }
  size_t per_thread() const {
    return 3 * rows() + 2 * pairs_t() + 2 * vnni() + 2 * vnni_t() + 2 * acc_t();
  }
};

// A thread's share of the workspace: enough for either kind of pack, so that the plan does
// not depend on which kind runs.
size_t per_thread_floats(int T, int hd) {
  return std::max(Geometry(T, hd, false).per_thread(), Geometry(T, hd, true).per_thread());
}

}  // namespace

bool attention_bf16_available() {
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  return cpu && active_isa() == Isa::kAvx512;
}

Bf16Products attention_bf16_products() {
  return attention_bf16_available() && amx_kernels_enabled() ? Bf16Products::kAmxTiles
                                                             : Bf16Products::kDotProducts;
}

size_t attention_bf16_saved_floats(int B, int T, int NH) { return static_cast<size_t>(B) * NH * T; }

size_t attention_bf16_workspace_floats(int T, int hd, int threads) {
  return per_thread_floats(T, hd) * static_cast<size_t>(threads);
}

}  // namespace forge::kernels::cpu

// The kernels below are compiled for AVX-512 with bf16 dot products whatever the build's
// flags (the headers above are not); they run only after attention_bf16_available().
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma,amx-tile,amx-bf16")
// GCC 12 reports the deliberately undefined vectors inside its own AVX-512 intrinsics
// (_mm512_undefined_*) as uninitialised once they are inlined under this target.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace forge::kernels::cpu {

namespace {

namespace simd = ::forge::kernels::simd::avx512;
#include "forge/kernels/cpu/attention_rows.inc"

constexpr int kQTile = 32;  // queries per tile (even: pairs of queries never straddle tiles)
constexpr int kKTile = 64;  // keys per tile (even, likewise)
// Backward's key runs (backward_core) start their queries at their first key: a query tile.
static_assert(kKTile % kQTile == 0, "a key tile must start a query tile");

// A 4-byte word of a pack (pairs of bf16 written through other types): read by bytes.
inline uint32_t word(const uint32_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline __mmask16 first_lanes(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// bf16 bits (round to nearest even) of n <= 16 floats, as 16-bit lanes; zero past n.
inline __m256i to_bf16_lanes(const float* x, int n) {
  return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first_lanes(n), x));
}

// 16 words bf16(lo_j) | bf16(hi_j) << 16 from two rows' 16 bf16 lanes each: a pair of rows
// interleaved, the layout of a B operand summed over pairs ("VNNI", below).
inline __m512i pair_words(__m256i lo, __m256i hi) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

// --- packs -------------------------------------------------------------------------------
// The product C[M, N] += A[M, K] B[K, N] on VDPBF16PS takes A as rows of bf16 pairs along K
// (word (m, p) = A[m][2p] | A[m][2p + 1] << 16) and B as pairs along K ("VNNI": word (p, n) =
// B[2p][n] | B[2p + 1][n] << 16). An odd K gets a zero partner.

// The packs read one head's slice of rows thousands of bytes apart, a stride the hardware
// prefetchers do not follow: each row's lines are requested this many rows ahead.
constexpr int kPrefetchRows = 16;

inline void prefetch_row(const float* x, int n) {
  for (int d = 0; d < n; d += 16) _mm_prefetch(reinterpret_cast<const char*>(x + d), _MM_HINT_T0);
}

// dst[t * ld + p] = pair (2p, 2p + 1) of bf16(src[t * stride + 0..n)), t < rows; the words
// from ceil(n / 2) up to ld are zero.
void pack_rows(uint32_t* dst, size_t ld, const float* src, size_t stride, int rows, int n) {
  const int pairs = (n + 1) / 2;
  for (int t = 0; t < rows; ++t) {
    uint32_t* o = dst + static_cast<size_t>(t) * ld;
    std::fill(o + pairs, o + ld, 0u);
    const float* x = src + static_cast<size_t>(t) * stride;
    if (t + kPrefetchRows < rows) prefetch_row(x + kPrefetchRows * stride, n);
    for (int d = 0; d < n; d += 32) {
      // 32 values in order are 16 words; an odd tail's missing partner converts as zero.
      const int m = std::min(32, n - d);
      const __m256i lo = to_bf16_lanes(x + d, std::min(16, m));
      const __m256i hi = m > 16 ? to_bf16_lanes(x + d + 16, m - 16) : _mm256_setzero_si256();
      const __m512i packed = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      _mm512_mask_storeu_epi32(o + d / 2, first_lanes((m + 1) / 2), packed);
    }
  }
}

// dst[q * ldd + j] = bf16(src[2q][j]) | bf16(src[2q + 1][j]) << 16 for q < ceil(rows / 2),
// j < n; a missing odd row is zero. Rows of src are `stride` floats apart.
void pack_vnni(uint32_t* dst, size_t ldd, const float* src, size_t stride, int rows, int n) {
  for (int q = 0; q < (rows + 1) / 2; ++q) {
    const float* a = src + static_cast<size_t>(2 * q) * stride;
    const bool has_b = 2 * q + 1 < rows;
    for (int ahead = 2 * q + kPrefetchRows; ahead < std::min(rows, 2 * q + kPrefetchRows + 2);
         ++ahead)
      prefetch_row(src + static_cast<size_t>(ahead) * stride, n);
    uint32_t* o = dst + static_cast<size_t>(q) * ldd;
    for (int j = 0; j < n; j += 16) {
      const int m = std::min(16, n - j);
      const __m256i hi = has_b ? to_bf16_lanes(a + stride + j, m) : _mm256_setzero_si256();
      _mm512_mask_storeu_epi32(o + j, first_lanes(m), pair_words(to_bf16_lanes(a + j, m), hi));
    }
  }
}

// --- the tile product ------------------------------------------------------------------
// C[M, N] += A B over K2 pairs: A rows of words (lda words apart), B words [K2][ldb], C fp32.

// c[r][v] += A_r . B_v over K2 pairs, MR rows by NV vectors of 16 columns held in registers.
// Masked: the last vector's columns past `last` read as zero. (A plain load where nothing is
// masked: GCC does not fold an all-ones mask, and the masked loads cost the score blocks
// 20-30%.)
template <int MR, int NV, bool Masked>
[[gnu::always_inline]] inline void accumulate_block(__m512 (&c)[MR][NV], int K2, const uint32_t* A,
                                                    size_t lda, const uint32_t* B, size_t ldb,
                                                    __mmask16 last) {
  for (int k = 0; k < K2; ++k) {
    __m512i b[NV];
    for (int v = 0; v < NV; ++v) {
      const uint32_t* at = B + k * ldb + v * 16;
      if constexpr (Masked)
        b[v] = _mm512_maskz_loadu_epi32(v == NV - 1 ? last : 0xFFFF, at);
      else
        b[v] = _mm512_loadu_si512(at);
    }
    for (int r = 0; r < MR; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int>(word(A + r * lda + k)));
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], (__m512bh)a, (__m512bh)b[v]);
    }
  }
}

template <int MR, int NV>
[[gnu::always_inline]] inline void micro(int K2, const uint32_t* A, size_t lda, const uint32_t* B,
                                         size_t ldb, float* C, size_t ldc, __mmask16 last) {
  __m512 c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      c[r][v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xFFFF, C + r * ldc + v * 16);
  accumulate_block<MR, NV, true>(c, K2, A, lda, B, ldb, last);
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(C + r * ldc + v * 16, v == NV - 1 ? last : 0xFFFF, c[r][v]);
}

template <int NV>
void rows_of(int M, int K2, const uint32_t* A, size_t lda, const uint32_t* B, size_t ldb, float* C,
             size_t ldc, __mmask16 last) {
  // 6 rows x 4 vectors = 24 accumulators beside 4 B vectors and the broadcast.
  int m = 0;
  for (; m + 6 <= M; m += 6) micro<6, NV>(K2, A + m * lda, lda, B, ldb, C + m * ldc, ldc, last);
  for (; m + 2 <= M; m += 2) micro<2, NV>(K2, A + m * lda, lda, B, ldb, C + m * ldc, ldc, last);
  for (; m < M; ++m) micro<1, NV>(K2, A + m * lda, lda, B, ldb, C + m * ldc, ldc, last);
}

void gemm_acc(int M, int N, int K2, const uint32_t* A, size_t lda, const uint32_t* B, size_t ldb,
              float* C, size_t ldc) {
  for (int n0 = 0; n0 < N; n0 += 64) {
    const int nn = std::min(64, N - n0), nv = (nn + 15) / 16;
    const __mmask16 last = first_lanes(nn - (nv - 1) * 16);
    switch (nv) {
      case 4:
        rows_of<4>(M, K2, A, lda, B + n0, ldb, C + n0, ldc, last);
        break;
      case 3:
        rows_of<3>(M, K2, A, lda, B + n0, ldb, C + n0, ldc, last);
        break;
      case 2:
        rows_of<2>(M, K2, A, lda, B + n0, ldb, C + n0, ldc, last);
        break;
      default:
        rows_of<1>(M, K2, A, lda, B + n0, ldb, C + n0, ldc, last);
        break;
    }
  }
}

// --- the tile product on AMX ----------------------------------------------------------
// The same product C[M, N] (+)= A B from the same layouts: an A tile is 16 rows of 16 words
// (pairs along K), a B tile 16 rows of pairs by 16 columns, and TDPBF16PS adds their product to
// a 16 x 16 fp32 tile. The tiles as cpu/amx.h configures them (each thread of the team on
// entry): 0-3 a 32 x 32 block of C, 4-5 two A tiles, 6-7 two B tiles, all full size.

// A block of MT x NT tiles of C (MT, NT = 1 or 2) over K2 words rounded up to 16.
template <int MT, int NT>
[[gnu::always_inline]] inline void amx_block(int K2, const uint32_t* A, size_t lda,
                                             const uint32_t* B, size_t ldb, float* C, size_t ldc,
                                             bool accumulate) {
  const size_t a_bytes = lda * 4, b_bytes = ldb * 4, c_bytes = ldc * 4;
  float* c1 = C + 16 * ldc;
  if (accumulate) {
    _tile_loadd(0, C, c_bytes);
    if constexpr (NT == 2) _tile_loadd(1, C + 16, c_bytes);
    if constexpr (MT == 2) _tile_loadd(2, c1, c_bytes);
    if constexpr (MT == 2 && NT == 2) _tile_loadd(3, c1 + 16, c_bytes);
  } else {
    _tile_zero(0);
    if constexpr (NT == 2) _tile_zero(1);
    if constexpr (MT == 2) _tile_zero(2);
    if constexpr (MT == 2 && NT == 2) _tile_zero(3);
  }
  for (int k = 0; k < K2; k += 16) {
    _tile_loadd(4, A + k, a_bytes);
    if constexpr (MT == 2) _tile_loadd(5, A + 16 * lda + k, a_bytes);
    _tile_loadd(6, B + k * ldb, b_bytes);
    if constexpr (NT == 2) _tile_loadd(7, B + k * ldb + 16, b_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, C, c_bytes);
  if constexpr (NT == 2) _tile_stored(1, C + 16, c_bytes);
  if constexpr (MT == 2) _tile_stored(2, c1, c_bytes);
  if constexpr (MT == 2 && NT == 2) _tile_stored(3, c1 + 16, c_bytes);
}

// C[M, N] = A B, or += with accumulate; A [M][K2 words] (lda), B [K2][N] (ldb), C fp32 (ldc).
// Whole tiles are read and written: rows of A and C up to M rounded to 16, columns of B and C
// up to N rounded to 16, words of A and rows of B up to K2 rounded to 16. The rows and columns
// past M and N only reach C's past them; the words past K2 must be zero in A and in B (a
// stale NaN times zero is NaN).
void amx_product(int M, int N, int K2, const uint32_t* A, size_t lda, const uint32_t* B, size_t ldb,
                 float* C, size_t ldc, bool accumulate) {
  for (int m0 = 0; m0 < M; m0 += 32) {
    const uint32_t* a = A + m0 * lda;
    for (int n0 = 0; n0 < N; n0 += 32) {
      float* c = C + m0 * ldc + n0;
      const bool two_m = M - m0 > 16, two_n = N - n0 > 16;
      if (two_m && two_n)
        amx_block<2, 2>(K2, a, lda, B + n0, ldb, c, ldc, accumulate);
      else if (two_m)
        amx_block<2, 1>(K2, a, lda, B + n0, ldb, c, ldc, accumulate);
      else if (two_n)
        amx_block<1, 2>(K2, a, lda, B + n0, ldb, c, ldc, accumulate);
      else
        amx_block<1, 1>(K2, a, lda, B + n0, ldb, c, ldc, accumulate);
    }
  }
}

// --- one head --------------------------------------------------------------------------

// One thread's share of the workspace.
struct Packs {
  uint32_t *q_rows, *dout_rows, *tmp_rows;  // [T][hp2]
  uint32_t *k_t, *v_t;                      // [hp2][ldt]: pairs along the head dim, transposed
  uint32_t *kv_vnni, *tmp_vnni;             // [T2][hd]: pairs of positions
  uint32_t *q_vnni_t, *dout_vnni_t;         // [hd][ldt2]
  float *dk_t, *dv_t;                       // [hd][ldt] fp32 accumulators
  Packs(float* at, const Geometry& g) {
    auto take = [&](size_t words) {
      uint32_t* p = reinterpret_cast<uint32_t*>(at);
      at += words;
      return p;
    };
    q_rows = take(g.rows()), dout_rows = take(g.rows()), tmp_rows = take(g.rows());
    k_t = take(g.pairs_t()), v_t = take(g.pairs_t());
    kv_vnni = take(g.vnni()), tmp_vnni = take(g.vnni());
    q_vnni_t = take(g.vnni_t()), dout_vnni_t = take(g.vnni_t());
    dk_t = reinterpret_cast<float*>(take(g.acc_t()));
    dv_t = reinterpret_cast<float*>(take(g.acc_t()));
  }
};

constexpr int kRowWords = kKTile / 2;  // stride of a tile's rows of key pairs

struct Tiles {
  float probs[kQTile * kKTile];            // P in fp32 (backward, for dS)
  uint32_t rows[kQTile * kRowWords];       // P (forward) or dS (backward) as A rows
  uint32_t p_pairs[kQTile / 2 * kKTile];   // P as pairs of queries (backward)
  uint32_t ds_pairs[kQTile / 2 * kKTile];  // dS as pairs of queries (backward)
  float acc[kQTile * kMaxHeadDim];         // output or dq accumulators (rows Geometry::ldv apart)
  float dp[kQTile * kKTile];               // dP in fp32 (backward on AMX)
};

// Rows [r0, r1) of one head's keys (or values) as pairs along the head dim, transposed into
// columns [r0, r1) of [hp2][ldt].
// On AMX the pad rows up to Geometry::rs are zero (in those columns).
void pack_pairs_transposed(uint32_t* dst, uint32_t* tmp_rows, const float* src, size_t stride,
                           const Geometry& g, int r0, int r1) {
  pack_rows(tmp_rows, g.rs, src + static_cast<size_t>(r0) * stride, stride, r1 - r0, g.hd);
  transpose_head<uint32_t>(dst + r0, g.ldt, tmp_rows, g.rs, r1 - r0, g.rs);
}

// Rows [0, rows) of one head as pairs of positions ([T2][ldv]), and on AMX zero pairs after
// them up to a whole tile (the summed index of p v and ds k).
void pack_vnni_padded(uint32_t* dst, const Geometry& g, const float* src, size_t stride, int rows) {
  pack_vnni(dst, g.ldv, src, stride, rows, g.hd);
  if (!g.amx) return;
  const size_t packed = (rows + 1) / 2;
  std::fill(dst + packed * g.ldv, dst + round16(packed) * g.ldv, 0u);
}

// Pairs of positions of rows [r0, r1) of one head (r0 even), transposed into columns
// [r0 / 2, (r1 + 1) / 2) of [hd][ldt2]: an A operand summed over positions.
// On AMX the columns after them up to a whole tile are zero (the summed index of dK and dV).
void pack_vnni_transposed(uint32_t* dst, uint32_t* tmp_vnni, const float* src, size_t stride,
                          const Geometry& g, int r0, int r1) {
  pack_vnni(tmp_vnni, g.hd, src + static_cast<size_t>(r0) * stride, stride, r1 - r0, g.hd);
  transpose_head<uint32_t>(dst + r0 / 2, g.ldt2, tmp_vnni, g.hd, (r1 - r0 + 1) / 2, g.hd);
  if (!g.amx) return;
  const size_t packed = (r1 + 1) / 2;
  for (int d = 0; d < g.hd; ++d)
    std::fill(dst + d * g.ldt2 + packed, dst + d * g.ldt2 + round16(packed), 0u);
}

// Checked before the parallel region (an exception must not leave one): the team it opens
// is at most omp_get_max_threads() threads, each taking its own share of the workspace.
void check_team(int threads) {
  FORGE_CHECK(omp_get_max_threads() <= threads,
              "bf16 attention: {} threads, workspace planned for {}", omp_get_max_threads(),
              threads);
}

// --- one (query tile, key tile) step, a block of rows at a time ------------------------
// The score products run on blocks of MR query rows whose scores stay in registers (MR x NV
// vectors of 16 keys) until they leave as bf16 pairs: scaling, the causal mask, the softmax
// and the packing happen there, with no pass over a score tile in memory. A block stops at
// the last key its last row may see, so the masked corner of a diagonal tile costs nothing.

inline __mmask16 lanes_below(int n) { return n <= 0 ? 0 : first_lanes(n); }

// One (query tile, key tile) step: queries [i0, i0 + nq) against keys [j0, j0 + nk).
struct TileStep {
  int i0, nq, j0, nk;
  float scale;
  // Keys of the tile that query row r (of the tile) may see.
  int visible(int r) const { return std::min(nk, i0 + r + 1 - j0); }
  // Vectors of 16 keys that a block of rows [r0, r0 + m) needs: up to its last row's last
  // visible key.
  int vectors(int r0, int m) const { return (visible(r0 + m - 1) + 15) / 16; }
};

// Runs rows.template operator()<MR, NV>(r0) over the tile's rows: blocks of 6 rows (24 score
// vectors in registers), then 4, 2, 1 for the rest. Every block starts at an even row, so a
// pair of queries never straddles two blocks.
template <int MR, typename Rows>
void row_block(const TileStep& t, int r0, Rows& rows) {
  const int nv = t.vectors(r0, MR);
  if (nv == 1)
    rows.template operator()<MR, 1>(r0);
  else if (nv == 2)
    rows.template operator()<MR, 2>(r0);
  else if (nv == 3)
    rows.template operator()<MR, 3>(r0);
  else
    rows.template operator()<MR, 4>(r0);
}

template <typename Rows>
void for_row_blocks(const TileStep& t, Rows&& rows) {
  int r0 = 0;
  for (; r0 + 6 <= t.nq; r0 += 6) row_block<6>(t, r0, rows);
  if (r0 + 4 <= t.nq) row_block<4>(t, r0, rows), r0 += 4;
  if (r0 + 2 <= t.nq) row_block<2>(t, r0, rows), r0 += 2;
  if (r0 < t.nq) row_block<1>(t, r0, rows);
}

// Row r's scores scaled, and -inf past its visible keys.
template <int NV>
[[gnu::always_inline]] inline void scale_and_mask_row(__m512 (&s)[NV], float scale, int visible) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int v = 0; v < NV; ++v)
    s[v] = _mm512_mask_mov_ps(ninf, lanes_below(visible - 16 * v),
                              _mm512_mul_ps(s[v], _mm512_set1_ps(scale)));
}

// Online softmax over one row's scores in a key tile: a higher maximum rescales what was
// accumulated under the old one (the output row acc and the sum), then the scores become
// exp(s - max) in place and add to the sum.
template <int NV>
[[gnu::always_inline]] inline void online_softmax_row(__m512 (&s)[NV], float& row_max,
                                                      float& row_sum, float* acc, int hd) {
  __m512 m = s[0];
  for (int v = 1; v < NV; ++v) m = _mm512_max_ps(m, s[v]);
  const float m_new = std::max(row_max, _mm512_reduce_max_ps(m));
  if (m_new > row_max) {
    const float corr = std::exp(row_max - m_new);
    scale_row(acc, hd, corr);
    row_sum *= corr;
    row_max = m_new;
  }
  const __m512 shift = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int v = 0; v < NV; ++v) {
    s[v] = simd::exp(_mm512_sub_ps(s[v], shift));
    sum = _mm512_add_ps(sum, s[v]);
  }
  row_sum += _mm512_reduce_add_ps(sum);
}

// Row of probabilities exp(s - lse) in place, the log-sum-exp saved by forward (backward's
// recomputation).
template <int NV>
[[gnu::always_inline]] inline void probabilities_row(__m512 (&s)[NV], float lse) {
  const __m512 shift = _mm512_set1_ps(lse);
  for (int v = 0; v < NV; ++v) s[v] = simd::exp(_mm512_sub_ps(s[v], shift));
}

// D_i = bf16(dO_i) . out_i, with bf16(dO_i) read from the row of pairs pack_rows wrote for
// dP = bf16(dO) bf16(V)^T: D must see dO as dP does. Softmax's gradient needs
// sum_j P_ij (dP_ij - D_i) = 0, and with D from the unrounded dO each row kept a residue
// (bf16(dO_i) - dO_i) . out_i, which dQ_i = scale sum_j dS_ij K_j carried along the row's
// mean key. Over training steps that residue accumulated in Wq and Wk: on a Llama config of
// awkward sizes, 8 steps took layer 1's query gradient 0.068-0.19 (rel_l2) from fp32,
// 2.2-2.6x PyTorch autocast's drift; with D from bf16(dO), 0.020-0.049, below autocast's
// (three seeds). Reading the pack, not rounding dO again, also gives the tail of a head
// dimension that is not a multiple of 16 the pack's rounding (which flushes denormals).
inline float dot_bf16_row(const uint32_t* pairs, const float* b, int n) {
  __m512 acc = _mm512_setzero_ps();
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pairs + d / 2));
    const __m512 a = _mm512_cvtpbh_ps((__m256bh)bits);
    acc = _mm512_fmadd_ps(a, _mm512_loadu_ps(b + d), acc);
  }
  float r = _mm512_reduce_add_ps(acc);
  for (; d < n; ++d) {  // fused multiply-adds, like the lanes above
    const uint16_t bits = static_cast<uint16_t>(word(pairs + d / 2) >> (16 * (d & 1)));
    r = std::fma(scalar::bf16_to_float(bits), b[d], r);
  }
  return r;
}

// dS = P (dP - D) scale over a row's NV vectors (p: the row's probabilities in memory), zero
// past its visible keys.
template <int NV>
[[gnu::always_inline]] inline void score_gradient_row(__m512 (&dp)[NV], const float* p, float delta,
                                                      float scale, int visible) {
  const __m512 d = _mm512_set1_ps(delta);
  for (int v = 0; v < NV; ++v)
    dp[v] = _mm512_maskz_mov_ps(
        lanes_below(visible - 16 * v),
        _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p + 16 * v), _mm512_sub_ps(dp[v], d)),
                      _mm512_set1_ps(scale)));
}

// S[r][v] = A_r . B_v over K2 pairs, from zero: a score block in registers.
template <int MR, int NV>
[[gnu::always_inline]] inline void product_block(__m512 (&s)[MR][NV], int K2, const uint32_t* A,
                                                 size_t lda, const uint32_t* B, size_t ldb) {
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  accumulate_block<MR, NV, false>(s, K2, A, lda, B, ldb, 0xFFFF);
}

// S = scale Q K^T for rows [r0, r0 + MR) of the tile against NV vectors of its keys, -inf
// past each row's visible keys: the first product of both passes. q_tile: the tile's query
// rows (pairs along the head dim); k_t: k^T's pairs ([hp2][ldt]).
template <int MR, int NV>
[[gnu::always_inline]] inline void masked_scores(__m512 (&s)[MR][NV], const TileStep& t,
                                                 const Geometry& g, const uint32_t* q_tile,
                                                 const uint32_t* k_t, int r0) {
  product_block<MR, NV>(s, g.hp2, q_tile + r0 * g.hp2, g.hp2, k_t + t.j0, g.ldt);
  for (int r = 0; r < MR; ++r) scale_and_mask_row<NV>(s[r], t.scale, t.visible(r0 + r));
}

// Key pairs NV vectors of the tile span (the masked keys among them are zero).
inline int key_pairs(const TileStep& t, int nv) { return std::min((t.nk + 1) / 2, nv * 8); }

// Row of P (or dS) as pairs along keys, for the A operand of a product over keys.
template <int NV>
[[gnu::always_inline]] inline void store_key_pairs(uint32_t* row, const __m512 (&x)[NV]) {
  int v = 0;
  for (; v + 2 <= NV; v += 2)
    _mm512_storeu_si512(row + 8 * v, (__m512i)_mm512_cvtne2ps_pbh(x[v + 1], x[v]));
  if (v < NV)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 8 * v), (__m256i)_mm512_cvtneps_pbh(x[v]));
}

// Two rows of P (or dS) as pairs of queries, word j = bf16(a_j) | bf16(b_j) << 16, for the B
// operand of a product over queries; zero words from vector NV up to the tile's nk keys.
template <int NV>
[[gnu::always_inline]] inline void store_query_pairs(uint32_t* out, const __m512 (&a)[NV],
                                                     const __m512* b, int nk) {
  for (int v = 0; v < NV; ++v) {
    const __m256i hi = b ? (__m256i)_mm512_cvtneps_pbh(b[v]) : _mm256_setzero_si256();
    _mm512_storeu_si512(out + 16 * v, pair_words((__m256i)_mm512_cvtneps_pbh(a[v]), hi));
  }
  for (int v = NV; 16 * v < nk; ++v) _mm512_storeu_si512(out + 16 * v, _mm512_setzero_si512());
}

// What both passes check before their parallel region, and the packs' sizes.
Geometry checked_geometry(const AttentionLayout& L, int threads, Bf16Products products) {
  FORGE_CHECK(L.hd <= kMaxHeadDim, "attention head dim {} exceeds {}", L.hd, kMaxHeadDim);
  const bool amx = products == Bf16Products::kAmxTiles;
  FORGE_CHECK(!amx || amx_tiles_available(), "bf16 attention: AMX tiles asked for, none usable");
  check_team(threads);
  return Geometry(L.T, L.hd, amx);
}

// --- the steps on AMX tiles -------------------------------------------------------------
// The products of a (query tile, key tile) step run on whole tiles into fp32 blocks in
// memory; the row blocks then read their scores from there instead of making them.

template <int NV>
[[gnu::always_inline]] inline void load_row(__m512 (&s)[NV], const float* row) {
  for (int v = 0; v < NV; ++v) s[v] = _mm512_loadu_ps(row + 16 * v);
}

// store_key_pairs, then zeros to the end of the row: the tile product sums over whole tiles
// of key pairs, past the keys this row's block reached.
template <int NV>
[[gnu::always_inline]] inline void store_key_pairs_padded(uint32_t* row, const __m512 (&x)[NV]) {
  store_key_pairs<NV>(row, x);
  for (int w = 8 * NV; w < kRowWords; w += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + w), _mm256_setzero_si256());
}

// forward_head's query tile against one key tile on AMX: acc (rows g.ldv apart) += p v.
void forward_step_amx(Tiles& tl, const TileStep& t, const Geometry& g, const uint32_t* q_tile,
                      const uint32_t* k_t, const uint32_t* v_vnni, float* row_max, float* row_sum) {
  amx_product(t.nq, t.nk, g.rs, q_tile, g.rs, k_t + t.j0, g.ldt, tl.probs, kKTile, false);
  for_row_blocks(t, [&]<int MR, int NV>(int r0) {
    for (int R = r0; R < r0 + MR; ++R) {
      __m512 s[NV];
      load_row<NV>(s, tl.probs + R * kKTile);
      scale_and_mask_row<NV>(s, t.scale, t.visible(R));
      online_softmax_row<NV>(s, row_max[R], row_sum[R], tl.acc + R * g.ldv, g.hd);
      store_key_pairs_padded<NV>(tl.rows + R * kRowWords, s);
    }
  });
  amx_product(t.nq, g.hd, (t.nk + 1) / 2, tl.rows, kRowWords,
              v_vnni + static_cast<size_t>(t.j0 / 2) * g.ldv, g.ldv, tl.acc, g.ldv, true);
}

// One query head's forward, its query rows packed in pk.q_rows, against its kv head's keys in
// pk.k_t and values in v_vnni (pairs of positions): the output rows (ldo apart from out_head)
// are overwritten, and lse gets each row's log-sum-exp.
void forward_head(Tiles& tl, const Geometry& g, const Packs& pk, const uint32_t* v_vnni,
                  float scale, float* out_head, size_t ldo, float* lse) {
  const int T = g.T, hd = g.hd;
  float row_max[kQTile], row_sum[kQTile];
  for (int i0 = 0; i0 < T; i0 += kQTile) {
    const int nq = std::min(kQTile, T - i0);
    for (int r = 0; r < nq; ++r) {
      row_max[r] = -std::numeric_limits<float>::infinity();
      row_sum[r] = 0.0f;
    }
    // On AMX whole tiles of rows: those past nq collect what their stale rows of p add.
    std::fill(tl.acc, tl.acc + (g.amx ? kQTile : nq) * g.ldv, 0.0f);
    const uint32_t* q_tile = pk.q_rows + static_cast<size_t>(i0) * g.rs;
    for (int j0 = 0; j0 < i0 + nq; j0 += kKTile) {
      const TileStep t{i0, nq, j0, std::min(kKTile, i0 + nq - j0), scale};
      if (g.amx) {
        forward_step_amx(tl, t, g, q_tile, pk.k_t, v_vnni, row_max, row_sum);
        continue;
      }
      const uint32_t* v_pairs = v_vnni + static_cast<size_t>(j0 / 2) * hd;
      for_row_blocks(t, [&]<int MR, int NV>(int r0) {
        __m512 s[MR][NV];
        masked_scores<MR, NV>(s, t, g, q_tile, pk.k_t, r0);
        for (int r = 0; r < MR; ++r) {
          const int R = r0 + r;
          online_softmax_row<NV>(s[r], row_max[R], row_sum[R], tl.acc + R * hd, hd);
          store_key_pairs<NV>(tl.rows + R * kRowWords, s[r]);
        }
        // out += bf16(p) bf16(v): the unnormalised probabilities rounded, their sum not.
        gemm_acc(MR, hd, key_pairs(t, NV), tl.rows + r0 * kRowWords, kRowWords, v_pairs, hd,
                 tl.acc + r0 * hd, hd);
      });
    }
    for (int r = 0; r < nq; ++r) {
      float* o = out_head + (i0 + r) * ldo;
      const float inv = 1.0f / row_sum[r];
      for (int d = 0; d < hd; ++d) o[d] = tl.acc[r * g.ldv + d] * inv;
      lse[i0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  }
}

void forward_core(float* out, float* lse, const float* q, const float* k, const float* v,
                  const AttentionLayout& L, float* workspace, int threads, Bf16Products products) {
  const int T = L.T, hd = L.hd, group = L.group();
  const float scale = L.scale();
  const Geometry g = checked_geometry(L, threads, products);
  const size_t share = per_thread_floats(T, hd);
  const int parts = L.forward_whole_pairs(omp_get_max_threads()) ? 1 : group;  // of its heads
#pragma omp parallel
  {
    const Packs pk(workspace + share * omp_get_thread_num(), g);
    Tiles tl;
    if (g.amx) configure_tiles();
      // Tasks are (sequence, kv head) where there are at least 4 per thread: its keys and
      // values are packed once for the group. Fewer (one sequence with one kv head would run on
      // one thread) make a task one query head, which packs its kv head's keys and values
      // again (O(T hd) against the head's O(T^2 hd) products). Same bits either way.
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < L.B; ++b)
      for (int kvh = 0; kvh < L.KVH; ++kvh)
        for (int part = 0; part < parts; ++part) {
          pack_pairs_transposed(pk.k_t, pk.tmp_rows, k + L.kv_at(b, kvh), L.kv_stride, g, 0, T);
          uint32_t* v_vnni = pk.kv_vnni;  // forward keeps v's pairs here
          pack_vnni_padded(v_vnni, g, v + L.kv_at(b, kvh), L.kv_stride, T);
          const int h0 = kvh * group + part * (group / parts);
          for (int h = h0; h < h0 + group / parts; ++h) {
            pack_rows(pk.q_rows, g.rs, q + L.q_at(b, h), L.q_stride, T, hd);
            forward_head(tl, g, pk, v_vnni, scale, out + L.out_at(b, h), L.out_stride,
                         lse + L.lse_at(b, h));
          }
        }
    if (g.amx) release_tiles();
  }
}

// The products a backward task makes on a (query tile, key tile) step, beside P and dS, which
// every task computes: all three (dQ += dS K, dV += P^T dO, dK += dS^T Q), dQ's alone or dK's
// and dV's alone (the split schedule, backward_core).
enum class Grads { kAll, kQuery, kKeyValue };

// One (query tile, key tile) step of backward on the thread's packs of a query head and its
// kv head. delta, lse: D and the log-sum-exp of the tile's query rows; dQ accumulates in
// tl.acc, dK^T and dV^T in pk.dk_t and pk.dv_t.
template <Grads G>
void backward_step(Tiles& tl, const TileStep& t, const Geometry& g, const Packs& pk,
                   const float* delta, const float* lse) {
  constexpr bool kDq = G != Grads::kKeyValue, kDkv = G != Grads::kQuery;
  const int hd = g.hd;
  const uint32_t* q_tile = pk.q_rows + static_cast<size_t>(t.i0) * g.hp2;
  const uint32_t* dout_tile = pk.dout_rows + static_cast<size_t>(t.i0) * g.hp2;
  for_row_blocks(t, [&]<int MR, int NV>(int r0) {
    {
      // P = exp(scale Q K^T - lse), masked; kept in fp32 for dS and as pairs of queries for dV.
      __m512 p[MR][NV];
      masked_scores<MR, NV>(p, t, g, q_tile, pk.k_t, r0);
      for (int r = 0; r < MR; ++r) {
        const int R = r0 + r;
        probabilities_row<NV>(p[r], lse[R]);
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(tl.probs + R * kKTile + 16 * v, p[r][v]);
      }
      if constexpr (kDkv)
        for (int r = 0; r < MR; r += 2)
          store_query_pairs<NV>(tl.p_pairs + (r0 + r) / 2 * kKTile, p[r],
                                r + 1 < MR ? p[r + 1] : nullptr, t.nk);
    }
    // dP = dO V^T, then dS = P (dP - D) scale (zero past the visible keys).
    __m512 ds[MR][NV];
    product_block<MR, NV>(ds, g.hp2, dout_tile + r0 * g.hp2, g.hp2, pk.v_t + t.j0, g.ldt);
    for (int r = 0; r < MR; ++r) {
      const int R = r0 + r;
      score_gradient_row<NV>(ds[r], tl.probs + R * kKTile, delta[R], t.scale, t.visible(R));
      if constexpr (kDq) store_key_pairs<NV>(tl.rows + R * kRowWords, ds[r]);
    }
    if constexpr (kDkv)
      for (int r = 0; r < MR; r += 2)
        store_query_pairs<NV>(tl.ds_pairs + (r0 + r) / 2 * kKTile, ds[r],
                              r + 1 < MR ? ds[r + 1] : nullptr, t.nk);
    if constexpr (kDq)  // dQ += dS K
      gemm_acc(MR, hd, key_pairs(t, NV), tl.rows + r0 * kRowWords, kRowWords,
               pk.kv_vnni + static_cast<size_t>(t.j0 / 2) * hd, hd, tl.acc + r0 * hd, hd);
  });
  if constexpr (kDkv) {
    // dV^T += dO^T P;  dK^T += Q^T dS   (the transposed accumulators take the pairs of
    // queries as B, which the blocks wrote without a transpose).
    const int nq2 = (t.nq + 1) / 2;
    gemm_acc(hd, t.nk, nq2, pk.dout_vnni_t + t.i0 / 2, g.ldt2, tl.p_pairs, kKTile, pk.dv_t + t.j0,
             g.ldt);
    gemm_acc(hd, t.nk, nq2, pk.q_vnni_t + t.i0 / 2, g.ldt2, tl.ds_pairs, kKTile, pk.dk_t + t.j0,
             g.ldt);
  }
}

// backward_step on AMX tiles: the same products and roundings.
template <Grads G>
void backward_step_amx(Tiles& tl, const TileStep& t, const Geometry& g, const Packs& pk,
                       const float* delta, const float* lse) {
  constexpr bool kDq = G != Grads::kKeyValue, kDkv = G != Grads::kQuery;
  const uint32_t* q_tile = pk.q_rows + static_cast<size_t>(t.i0) * g.rs;
  const uint32_t* dout_tile = pk.dout_rows + static_cast<size_t>(t.i0) * g.rs;
  amx_product(t.nq, t.nk, g.rs, q_tile, g.rs, pk.k_t + t.j0, g.ldt, tl.probs, kKTile, false);
  amx_product(t.nq, t.nk, g.rs, dout_tile, g.rs, pk.v_t + t.j0, g.ldt, tl.dp, kKTile, false);
  for_row_blocks(t, [&]<int MR, int NV>(int r0) {
    for (int R = r0; R < r0 + MR; R += 2) {  // pairs of rows: the pairs of queries dK, dV take
      const bool pair = R + 1 < r0 + MR;
      __m512 p[2][NV], ds[2][NV];
      for (int r = 0; r < 1 + pair; ++r) {
        float* probs = tl.probs + (R + r) * kKTile;
        load_row<NV>(p[r], probs);
        scale_and_mask_row<NV>(p[r], t.scale, t.visible(R + r));
        probabilities_row<NV>(p[r], lse[R + r]);
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(probs + 16 * v, p[r][v]);
        load_row<NV>(ds[r], tl.dp + (R + r) * kKTile);
        score_gradient_row<NV>(ds[r], probs, delta[R + r], t.scale, t.visible(R + r));
        if constexpr (kDq) store_key_pairs_padded<NV>(tl.rows + (R + r) * kRowWords, ds[r]);
      }
      if constexpr (kDkv) {
        store_query_pairs<NV>(tl.p_pairs + R / 2 * kKTile, p[0], pair ? p[1] : nullptr, t.nk);
        store_query_pairs<NV>(tl.ds_pairs + R / 2 * kKTile, ds[0], pair ? ds[1] : nullptr, t.nk);
      }
    }
  });
  if constexpr (kDq)  // dQ += dS K
    amx_product(t.nq, g.hd, (t.nk + 1) / 2, tl.rows, kRowWords,
                pk.kv_vnni + static_cast<size_t>(t.j0 / 2) * g.ldv, g.ldv, tl.acc, g.ldv, true);
  if constexpr (kDkv) {
    // The pairs of queries past the tile's, up to a whole tile of them, are zero.
    const int nq2 = (t.nq + 1) / 2;
    std::fill(tl.p_pairs + nq2 * kKTile, tl.p_pairs + kQTile / 2 * kKTile, 0u);
    std::fill(tl.ds_pairs + nq2 * kKTile, tl.ds_pairs + kQTile / 2 * kKTile, 0u);
    amx_product(g.hd, t.nk, nq2, pk.dout_vnni_t + t.i0 / 2, g.ldt2, tl.p_pairs, kKTile,
                pk.dv_t + t.j0, g.ldt, true);
    amx_product(g.hd, t.nk, nq2, pk.q_vnni_t + t.i0 / 2, g.ldt2, tl.ds_pairs, kKTile,
                pk.dk_t + t.j0, g.ldt, true);
  }
}

// One query head's backward over its query tiles from row i_lo up to i_hi, each against the
// key tiles from j_lo up to j_hi that it sees (tile boundaries all). out_head, dq_head: the
// head's first row of out (ldo apart) and of dq (ldq apart); lse: the head's log-sum-exp.
// With dQ among the products the tiles' dq rows are overwritten.
template <Grads G>
void backward_head(Tiles& tl, const Geometry& g, const Packs& pk, float scale,
                   const float* out_head, size_t ldo, const float* lse, float* dq_head, size_t ldq,
                   int i_lo, int i_hi, int j_lo, int j_hi) {
  constexpr bool kDq = G != Grads::kKeyValue;
  const int hd = g.hd;
  float delta[kQTile];
  for (int i0 = i_lo; i0 < i_hi; i0 += kQTile) {
    const int nq = std::min(kQTile, g.T - i0);
    for (int r = 0; r < nq; ++r)
      delta[r] = dot_bf16_row(pk.dout_rows + static_cast<size_t>(i0 + r) * g.rs,
                              out_head + (i0 + r) * ldo, hd);
    if constexpr (kDq) std::fill(tl.acc, tl.acc + (g.amx ? kQTile : nq) * g.ldv, 0.0f);
    for (int j0 = j_lo; j0 < std::min(j_hi, i0 + nq); j0 += kKTile) {
      const TileStep t{i0, nq, j0, std::min(kKTile, i0 + nq - j0), scale};
      if (g.amx)
        backward_step_amx<G>(tl, t, g, pk, delta, lse + i0);
      else
        backward_step<G>(tl, t, g, pk, delta, lse + i0);
    }
    if constexpr (kDq)
      for (int r = 0; r < nq; ++r)
        std::copy(tl.acc + r * g.ldv, tl.acc + r * g.ldv + hd, dq_head + (i0 + r) * ldq);
  }
}

// First tile of run p when `tiles` tiles are cut into `runs` runs of consecutive tiles of
// about equal work (work(t): what tile t costs); run p is [run_start(p), run_start(p + 1)).
template <typename Work>
int run_start(int p, int runs, int tiles, Work work) {
  long total = 0;
  for (int t = 0; t < tiles; ++t) total += work(t);
  long done = 0;
  int t = 0;
  while (t < tiles && done * runs < total * p) done += work(t++);
  return t;
}

// dq, dk, dv are overwritten, in the layout of q, k, v (dq with q_stride, dk and dv with
// kv_stride); dout has out_stride.
void backward_core(float* dq, float* dk, float* dv, const float* dout, const float* q,
                   const float* k, const float* v, const float* out, const float* lse,
                   const AttentionLayout& L, float* workspace, int threads, Bf16Products products) {
  const int T = L.T, hd = L.hd, group = L.group();
  const float scale = L.scale();
  const Geometry g = checked_geometry(L, threads, products);
  const size_t share = per_thread_floats(T, hd);
  // A task of the first schedule is a (sequence, kv head) pair: it owns its dk, dv rows, which
  // sum over the group's query heads (in head order, then query tiles) in fp32 accumulators no
  // other thread touches, and its heads' dq rows (summed over key tiles).
  // Too few pairs to share out (one sequence with one kv head leaves a thread idle) take the
  // second: key tasks, each a run of a kv head's key tiles, for dk and dv, then query tasks,
  // each a run of a query head's query tiles, for dq. Both recompute P and dS (7 tile products
  // instead of 5) and pack only the rows they read. Each sum keeps its order, so the bits are
  // the first schedule's on any thread count.
  const int team = omp_get_max_threads(), heads = L.B * L.NH;
  const bool split = L.split_backward(team);
  const int k_tiles = (T + kKTile - 1) / kKTile, q_tiles = (T + kQTile - 1) / kQTile;
  const int key_runs = team, query_runs = std::max(1, (2 * team + heads - 1) / heads);
  // A key tile is seen by the queries from its first row on, a query tile sees the keys up to
  // its last row.
  auto key_work = [&](int t) { return T - t * kKTile; };
  auto query_work = [&](int t) { return std::min(T, (t + 1) * kQTile); };
#pragma omp parallel
  {
    const Packs pk(workspace + share * omp_get_thread_num(), g);
    Tiles tl;
    if (g.amx) configure_tiles();
    // Rows [r0, r1) of query head h's q and dout as the score products read them, and with
    // for_dkv also as the A operands of dK and dV.
    auto pack_query_head = [&](int b, int h, int r0, int r1, bool for_dkv) {
      const float *qh = q + L.q_at(b, h), *oh = dout + L.out_at(b, h);
      pack_rows(pk.q_rows + static_cast<size_t>(r0) * g.rs, g.rs,
                qh + static_cast<size_t>(r0) * L.q_stride, L.q_stride, r1 - r0, hd);
      pack_rows(pk.dout_rows + static_cast<size_t>(r0) * g.rs, g.rs,
                oh + static_cast<size_t>(r0) * L.out_stride, L.out_stride, r1 - r0, hd);
      if (for_dkv) {
        pack_vnni_transposed(pk.q_vnni_t, pk.tmp_vnni, qh, L.q_stride, g, r0, r1);
        pack_vnni_transposed(pk.dout_vnni_t, pk.tmp_vnni, oh, L.out_stride, g, r0, r1);
      }
    };
    // Keys and values [r0, r1) of kv head kvh as the score products read them.
    auto pack_kv_head = [&](int b, int kvh, int r0, int r1) {
      pack_pairs_transposed(pk.k_t, pk.tmp_rows, k + L.kv_at(b, kvh), L.kv_stride, g, r0, r1);
      pack_pairs_transposed(pk.v_t, pk.tmp_rows, v + L.kv_at(b, kvh), L.kv_stride, g, r0, r1);
    };
    // dK^T and dV^T's columns [j0, j1) to their rows of dk and dv.
    auto store_dkv = [&](int b, int kvh, int j0, int j1) {
      const size_t at = L.kv_at(b, kvh) + static_cast<size_t>(j0) * L.kv_stride;
      transpose_head<float>(dk + at, L.kv_stride, pk.dk_t + j0, g.ldt, hd, j1 - j0);
      transpose_head<float>(dv + at, L.kv_stride, pk.dv_t + j0, g.ldt, hd, j1 - j0);
    };
    if (!split) {
#pragma omp for collapse(2) schedule(dynamic, 1)
      for (int b = 0; b < L.B; ++b)
        for (int kvh = 0; kvh < L.KVH; ++kvh) {
          pack_kv_head(b, kvh, 0, T);
          pack_vnni_padded(pk.kv_vnni, g, k + L.kv_at(b, kvh), L.kv_stride, T);
          std::fill(pk.dk_t, pk.dk_t + g.acc_t(), 0.0f);
          std::fill(pk.dv_t, pk.dv_t + g.acc_t(), 0.0f);
          for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
            pack_query_head(b, h, 0, T, true);
            backward_head<Grads::kAll>(tl, g, pk, scale, out + L.out_at(b, h), L.out_stride,
                                       lse + L.lse_at(b, h), dq + L.q_at(b, h), L.q_stride, 0, T, 0,
                                       T);
          }
          store_dkv(b, kvh, 0, T);
        }
    } else {
#pragma omp for collapse(3) schedule(dynamic, 1) nowait
      for (int b = 0; b < L.B; ++b)
        for (int kvh = 0; kvh < L.KVH; ++kvh)
          for (int run = 0; run < key_runs; ++run) {
            const int j_lo = run_start(run, key_runs, k_tiles, key_work) * kKTile;
            const int j_hi = std::min(T, run_start(run + 1, key_runs, k_tiles, key_work) * kKTile);
            if (j_lo >= j_hi) continue;
            pack_kv_head(b, kvh, j_lo, j_hi);
            for (int d = 0; d < hd; ++d) {
              std::fill(pk.dk_t + d * g.ldt + j_lo, pk.dk_t + d * g.ldt + j_hi, 0.0f);
              std::fill(pk.dv_t + d * g.ldt + j_lo, pk.dv_t + d * g.ldt + j_hi, 0.0f);
            }
            // The queries that see these keys: from the first one on (j_lo starts a query tile).
            for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
              pack_query_head(b, h, j_lo, T, true);
              backward_head<Grads::kKeyValue>(tl, g, pk, scale, out + L.out_at(b, h), L.out_stride,
                                              lse + L.lse_at(b, h), nullptr, 0, j_lo, T, j_lo,
                                              j_hi);
            }
            store_dkv(b, kvh, j_lo, j_hi);
          }
#pragma omp for collapse(3) schedule(dynamic, 1)
      for (int b = 0; b < L.B; ++b)
        for (int h = 0; h < L.NH; ++h)
          for (int run = 0; run < query_runs; ++run) {
            const int i_lo = run_start(run, query_runs, q_tiles, query_work) * kQTile;
            const int i_hi =
                std::min(T, run_start(run + 1, query_runs, q_tiles, query_work) * kQTile);
            if (i_lo >= i_hi) continue;
            const int kvh = h / group;  // the keys these queries see: up to their last row
            pack_kv_head(b, kvh, 0, i_hi);
            pack_vnni_padded(pk.kv_vnni, g, k + L.kv_at(b, kvh), L.kv_stride, i_hi);
            pack_query_head(b, h, i_lo, i_hi, false);
            backward_head<Grads::kQuery>(tl, g, pk, scale, out + L.out_at(b, h), L.out_stride,
                                         lse + L.lse_at(b, h), dq + L.q_at(b, h), L.q_stride, i_lo,
                                         i_hi, 0, T);
          }
    }
    if (g.amx) release_tiles();
  }
}

}  // namespace

void attention_forward_bf16(float* out, float* saved, const float* qkv, int B, int T, int C, int NH,
                            float* workspace, int threads, Bf16Products products) {
  forward_core(out, saved, qkv, qkv + C, qkv + 2 * C, AttentionLayout::qkv(B, T, C, NH), workspace,
               threads, products);
}

void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* saved, int B, int T, int C, int NH, float* workspace,
                             int threads, Bf16Products products) {
  backward_core(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out, saved,
                AttentionLayout::qkv(B, T, C, NH), workspace, threads, products);
}

void gqa_attention_forward_bf16(float* out, float* saved, const float* q, const float* k,
                                const float* v, const GqaShape& s, float* workspace, int threads,
                                Bf16Products products) {
  forward_core(out, saved, q, k, v, AttentionLayout::separate(s), workspace, threads, products);
}

void gqa_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                 const float* k, const float* v, const float* out,
                                 const float* saved, const GqaShape& s, float* workspace,
                                 int threads, Bf16Products products) {
  backward_core(dq, dk, dv, dout, q, k, v, out, saved, AttentionLayout::separate(s), workspace,
                threads, products);
}

}  // namespace forge::kernels::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
