#include "forge/kernels/bf16_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <span>

#ifdef FORGE_HAVE_DNNL
#include <dnnl.h>

#include "forge/kernels/cpu/onednn_matmul.h"
#endif

#include "forge/core/env.h"
#include "forge/core/error.h"
#include "forge/kernels/cpu/amx.h"
#include "forge/kernels/cpu/amx_gemm.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/prefetch.h"
#include "forge/kernels/cpu/thread_share.h"
#include "forge/kernels/elementwise.h"
#include "forge/kernels/gelu.h"
#include "forge/kernels/gemm.h"
#include "forge/kernels/linear.h"
#include "forge/kernels/swiglu.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void bf16_linear_forward(Real* out, const float* inp, const float* weight, const float* bias, int N,
                         int IC, int OC) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      Real acc = bias ? Real(bias[o]) : Real(0);
      for (int i = 0; i < IC; ++i)
        acc += Real(bf16_round(inp[static_cast<size_t>(n) * IC + i])) *
               Real(bf16_round(weight[static_cast<size_t>(o) * IC + i]));
      out[static_cast<size_t>(n) * OC + o] = acc;
    }
}

template <typename Real>
void bf16_linear_backward(Real* dinp, Real* dweight, Real* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int IC, int OC) {
  auto g = [&](int n, int o) { return Real(bf16_round(dout[static_cast<size_t>(n) * OC + o])); };
  if (dinp)
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < IC; ++i) {
        Real acc = 0;
        for (int o = 0; o < OC; ++o)
          acc += g(n, o) * Real(bf16_round(weight[static_cast<size_t>(o) * IC + i]));
        dinp[static_cast<size_t>(n) * IC + i] = acc;
      }
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) {
      Real acc = 0;
      for (int n = 0; n < N; ++n)
        acc += g(n, o) * Real(bf16_round(inp[static_cast<size_t>(n) * IC + i]));
      dweight[static_cast<size_t>(o) * IC + i] = acc;
    }
  // The bias gradient sums the unrounded fp32 gradient: it is no matmul operand.
  if (dbias)
    for (int o = 0; o < OC; ++o) {
      Real acc = 0;
      for (int n = 0; n < N; ++n) acc += Real(dout[static_cast<size_t>(n) * OC + o]);
      dbias[o] = acc;
    }
}

void bf16_gradient_operands(uint16_t* g, uint16_t* gt, float* dbias, const float* dout, int N,
                            int OC) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      const uint16_t b = bf16_bits(dout[static_cast<size_t>(n) * OC + o]);
      g[static_cast<size_t>(n) * OC + o] = b;
      gt[static_cast<size_t>(o) * N + n] = b;
    }
  if (dbias)
    for (int o = 0; o < OC; ++o) {
      double acc = 0.0;
      for (int n = 0; n < N; ++n) acc += dout[static_cast<size_t>(n) * OC + o];
      dbias[o] = static_cast<float>(acc);
    }
}

template void bf16_linear_forward<double>(double*, const float*, const float*, const float*, int,
                                          int, int);
template void bf16_linear_backward<double>(double*, double*, double*, const float*, const float*,
                                           const float*, int, int, int);

}  // namespace scalar

namespace cpu {

namespace {

// The rounding is memory-bound; below this many elements a thread team costs more than it saves.
constexpr size_t kParallelMin = size_t{1} << 16;

// 8 lanes of scalar::bf16_bits, left in the high half of each 32-bit lane (the low half zero),
// i.e. the bf16 value as an fp32 bit pattern.
__attribute__((target("avx2"))) inline __m256i round_lanes_avx2(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  // NaN: carrying into the exponent could turn a NaN whose payload sits in the low bits into
  // Inf, so NaNs take the truncated value with the quiet bit set instead.
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
  return _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
}

__attribute__((target("avx2"))) void round_bf16_avx2(float* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(round_lanes_avx2(_mm256_loadu_ps(in + i))));
  for (; i < n; ++i) out[i] = scalar::bf16_round(in[i]);
}

__attribute__((target("avx2"))) void to_bf16_avx2(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_srli_epi32(round_lanes_avx2(_mm256_loadu_ps(in + i)), 16);
    const __m256i b = _mm256_srli_epi32(round_lanes_avx2(_mm256_loadu_ps(in + i + 8)), 16);
    // packus works per 128-bit lane: a0 b0 a1 b1 -> restore a0 a1 b0 b1.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = scalar::bf16_bits(in[i]);
}

// One instruction per 16 values where the CPU has it (VCVTNEPS2BF16: round to nearest even,
// NaN quietened as scalar::bf16_bits does). It reads denormal inputs as zero, so a vector
// holding one takes the integer path instead; training values are never that small, so the
// check costs a compare and a rarely taken branch.
// bf16_bits of x, the 16 values at in (x loaded from there).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline __m256i bf16_lanes16(
    const float* in, __m512 x) {
  const __m512 mag = _mm512_abs_ps(x);
  const __mmask16 denormal = _mm512_cmp_ps_mask(mag, _mm512_set1_ps(1.17549435e-38f), _CMP_LT_OQ) &
                             _mm512_cmp_ps_mask(mag, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  if (denormal) {
    alignas(32) uint16_t bits[16];
    for (int k = 0; k < 16; ++k) bits[k] = scalar::bf16_bits(in[k]);
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(bits));
  }
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void to_bf16_avx512bf16(
    uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        bf16_lanes16(in + i, _mm512_loadu_ps(in + i)));
  for (; i < n; ++i) out[i] = scalar::bf16_bits(in[i]);
}

// A 16 x 16 block transposed in registers: on entry r[i] holds row i, on return col[c] holds
// column c (r is overwritten). Four rounds of unpacks interleave ever wider units (16, 32, 64
// bits, then 128-bit lanes), as in any register transpose.
__attribute__((target("avx2"))) inline void transpose16(__m256i col[16], __m256i r[16]) {
  __m256i t[16];
  // t[2i], t[2i+1]: rows 2i and 2i+1 paired per column (columns 0-3 | 4-7 of each lane).
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  // r[4j+k]: rows 4j..4j+3 of columns 2k, 2k+1 of each lane.
  for (int j = 0; j < 4; ++j) {
    r[4 * j] = _mm256_unpacklo_epi32(t[4 * j], t[4 * j + 2]);
    r[4 * j + 1] = _mm256_unpackhi_epi32(t[4 * j], t[4 * j + 2]);
    r[4 * j + 2] = _mm256_unpacklo_epi32(t[4 * j + 1], t[4 * j + 3]);
    r[4 * j + 3] = _mm256_unpackhi_epi32(t[4 * j + 1], t[4 * j + 3]);
  }
  // t[8m+c]: rows 8m..8m+7 of column c of each lane.
  for (int m = 0; m < 2; ++m)
    for (int k = 0; k < 4; ++k) {
      t[8 * m + 2 * k] = _mm256_unpacklo_epi64(r[8 * m + k], r[8 * m + 4 + k]);
      t[8 * m + 2 * k + 1] = _mm256_unpackhi_epi64(r[8 * m + k], r[8 * m + 4 + k]);
    }
  // Column c (< 8) is lane 0 of t[c] then of t[8+c]; column 8+c lane 1 of both.
  for (int c = 0; c < 8; ++c) {
    col[c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x20);
    col[8 + c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x31);
  }
}

// One 16 x 16 block of 16-bit values: dst[c * ldd + r] = src[r * lds + c].
__attribute__((target("avx2"))) void transpose_block16_avx2(uint16_t* dst, size_t ldd,
                                                            const uint16_t* src, size_t lds) {
  __m256i row[16], col[16];
  for (int i = 0; i < 16; ++i)
    row[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * lds));
  transpose16(col, row);
  for (int c = 0; c < 16; ++c)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * ldd), col[c]);
}

bool cpu_has_avx512bf16() {
  static const bool yes = __builtin_cpu_supports("avx512bf16");
  return yes;
}

void round_bf16_generic(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = scalar::bf16_round(in[i]);
}

void to_bf16_generic(uint16_t* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = scalar::bf16_bits(in[i]);
}

bool use_avx2() { return active_isa() != Isa::kGeneric; }

// round_bf16 on one thread.
void round_bf16_serial(float* out, const float* in, size_t n) {
  if (use_avx2())
    round_bf16_avx2(out, in, n);
  else
    round_bf16_generic(out, in, n);
}

// to_bf16 on one thread, in the widest form this CPU and the active ISA allow.
void to_bf16_serial(uint16_t* out, const float* in, size_t n) {
  if (active_isa() == Isa::kAvx512 && cpu_has_avx512bf16())
    to_bf16_avx512bf16(out, in, n);
  else if (use_avx2())
    to_bf16_avx2(out, in, n);
  else
    to_bf16_generic(out, in, n);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void row_to_tiles_avx512bf16(
    uint16_t* tiles, const float* src, int n, int o0, int o1, int OC) {
  for (int o = o0; o < o1; o += 32, src += 32) {
    auto* out = reinterpret_cast<__m256i*>(tiles + amx_tiles_index(n, o, OC));
    _mm256_storeu_si256(out, bf16_lanes16(src, _mm512_loadu_ps(src)));
    _mm256_storeu_si256(out + 1, bf16_lanes16(src + 16, _mm512_loadu_ps(src + 16)));
  }
}

// Columns [o0, o1) of row n of an [N, OC] matrix, read from src (its value at column o0), whole
// runs of 32, rounded into the AMX tiles' order: a call per row segment, not per run.
void row_to_tiles(uint16_t* tiles, const float* src, int n, int o0, int o1, int OC) {
  if (active_isa() == Isa::kAvx512 && cpu_has_avx512bf16())
    return row_to_tiles_avx512bf16(tiles, src, n, o0, o1, OC);
  for (int o = o0; o < o1; o += 32, src += 32)
    to_bf16_serial(tiles + amx_tiles_index(n, o, OC), src, 32);
}

// One block of 16-bit values (rows, cols <= 16) transposed: in registers when it is whole and
// the CPU has AVX2, else one value at a time.
void transpose_block(uint16_t* d, size_t ldd, const uint16_t* s, size_t lds, int rows, int cols,
                     bool avx2) {
  if (avx2 && rows == 16 && cols == 16) {
    transpose_block16_avx2(d, ldd, s, lds);
    return;
  }
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < rows; ++r) d[c * ldd + r] = s[r * lds + c];
}

// Splits [0, n) over the OpenMP team in chunks of whole cache lines.
template <typename F>
void parallel_chunks(size_t n, F&& f) {
  if (n < kParallelMin) {
    f(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const Range share = thread_share(n, 16, omp_get_thread_num(), omp_get_num_threads());
    if (share.begin < share.end) f(share.begin, share.end);
  }
}

}  // namespace

void round_bf16(float* out, const float* in, size_t n) {
  parallel_chunks(n, [&](size_t lo, size_t hi) { round_bf16_serial(out + lo, in + lo, hi - lo); });
}

void to_bf16(uint16_t* out, const float* in, size_t n) {
  parallel_chunks(n, [&](size_t lo, size_t hi) { to_bf16_serial(out + lo, in + lo, hi - lo); });
}

namespace {

// Columns a thread takes at a time: their dbias accumulators (4 KiB) stay in L1.
constexpr int kGradientColumns = 512;
// Rows per band: each of gt's rows then takes a whole 64-byte line (32 bf16) from one block.
constexpr int kGradientRows = 32;
// How many 16-column blocks ahead of the one in hand round_transpose_32x16 prefetches.
constexpr int kPrefetchBlocks = 4;

// Rows [0, 32) by columns [0, 16) of dout (rows ldd apart), whole: each row rounded to bf16 in
// a register and added into acc (16 column sums in double, in row order; null: none), and the block
// written transposed into gt: 16 rows of 32 values (a whole 64-byte line each), ldgt apart.
// Neither the rounded rows nor the fp32 values leave the registers: the pass reads dout once
// and writes g and gt once. ahead (null: none), a block a few blocks later, is prefetched:
// the 32 rows are 32 streams, a row apart, more than the hardware prefetchers follow.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_transpose_32x16(
    uint16_t* g, uint16_t* gt, size_t ldgt, double* acc, const float* dout, size_t ldd,
    const float* ahead) {
  if (ahead)
    for (int i = 0; i < kGradientRows; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + static_cast<size_t>(i) * ldd),
                   _MM_HINT_T0);
  __m256i top[16], bottom[16], rows[16];
  __m512d sum_lo = acc ? _mm512_loadu_pd(acc) : _mm512_setzero_pd(),
          sum_hi = acc ? _mm512_loadu_pd(acc + 8) : _mm512_setzero_pd();
  for (int half = 0; half < 2; ++half) {
    for (int i = 0; i < 16; ++i) {
      const float* in = dout + static_cast<size_t>(16 * half + i) * ldd;
      const __m512 x = _mm512_loadu_ps(in);
      // (the maskz forms: gcc 12 warns of the plain ones' undefined pass-through operand)
      const __m512d halves = _mm512_castps_pd(x);
      sum_lo = _mm512_add_pd(
          sum_lo, _mm512_maskz_cvtps_pd(
                      0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, halves, 0))));
      sum_hi = _mm512_add_pd(
          sum_hi, _mm512_maskz_cvtps_pd(
                      0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, halves, 1))));
      rows[i] = bf16_lanes16(in, x);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(g + static_cast<size_t>(16 * half + i) * ldd),
                          rows[i]);
    }
    transpose16(half ? bottom : top, rows);
  }
  if (acc) {
    _mm512_storeu_pd(acc, sum_lo);
    _mm512_storeu_pd(acc + 8, sum_hi);
  }
  for (int c = 0; c < 16; ++c) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(gt + c * ldgt), top[c]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(gt + c * ldgt + 16), bottom[c]);
  }
}

// The same for a block of any size up to 32 x 16 (the edges of dout, or a CPU without
// avx512_bf16): rows rounded 16 at a time into a small buffer, then transposed from there.
void round_transpose_block(uint16_t* g, uint16_t* gt, size_t ldgt, double* acc, const float* dout,
                           size_t ldd, int rows, int cols, bool avx2) {
  alignas(32) uint16_t rounded[16 * 16];
  for (int r0 = 0; r0 < rows; r0 += 16) {
    const int count = std::min(16, rows - r0);
    for (int r = 0; r < count; ++r) {
      const float* in = dout + static_cast<size_t>(r0 + r) * ldd;
      to_bf16_serial(rounded + 16 * r, in, static_cast<size_t>(cols));
      std::copy(rounded + 16 * r, rounded + 16 * r + cols, g + static_cast<size_t>(r0 + r) * ldd);
      if (acc)
        for (int c = 0; c < cols; ++c) acc[c] += in[c];
    }
    transpose_block(gt + r0, ldgt, rounded, 16, count, cols, avx2);
  }
}

// The block kPrefetchBlocks after the one at rows [r, r + 32), column c, in the order the
// pass takes them (a band's blocks from c_lo to c_hi, then the next band's), or null when
// that block is not a whole one.
const float* block_ahead(const float* dout, size_t ldd, int N, int r, int c, int c_lo, int c_hi) {
  int ahead_c = c + 16 * kPrefetchBlocks, ahead_r = r;
  if (ahead_c + 16 > c_hi) {
    ahead_c = c_lo + (ahead_c - (c_lo + (c_hi - c_lo) / 16 * 16));
    ahead_r += kGradientRows;
  }
  if (ahead_r + kGradientRows > N || ahead_c + 16 > c_hi) return nullptr;
  return dout + static_cast<size_t>(ahead_r) * ldd + ahead_c;
}

}  // namespace

void bf16_gradient_operands(uint16_t* g, uint16_t* gt, float* dbias, const float* dout, int N,
                            int OC) {
  const bool registers = active_isa() == Isa::kAvx512 && cpu_has_avx512bf16();
  const bool avx2 = use_avx2();
  const size_t ldgt = static_cast<size_t>(N), ldd = static_cast<size_t>(OC);
  // Each thread owns a run of whole 16-column blocks (so its column sums keep the row order)
  // and walks every band of rows over it, reading dout a band of rows at a time.
#pragma omp parallel if (static_cast <size_t>(N) * OC >= kParallelMin)
  {
    const Range share = thread_share(OC, 16, omp_get_thread_num(), omp_get_num_threads());
    const int lo = static_cast<int>(share.begin), hi = static_cast<int>(share.end);
    alignas(64) double acc[kGradientColumns];
    for (int c_lo = lo; c_lo < hi; c_lo += kGradientColumns) {
      const int c_hi = std::min(hi, c_lo + kGradientColumns);
      std::fill(acc, acc + (c_hi - c_lo), 0.0);
      for (int r = 0; r < N; r += kGradientRows) {
        const int rows = std::min(kGradientRows, N - r);
        for (int c = c_lo; c < c_hi; c += 16) {
          const int cols = std::min(16, c_hi - c);
          double* sums = dbias ? acc + (c - c_lo) : nullptr;
          const float* src = dout + static_cast<size_t>(r) * ldd + c;
          uint16_t* dst = gt + static_cast<size_t>(c) * ldgt + r;
          uint16_t* row_major = g + static_cast<size_t>(r) * ldd + c;
          if (registers && rows == kGradientRows && cols == 16)
            round_transpose_32x16(row_major, dst, ldgt, sums, src, ldd,
                                  block_ahead(dout, ldd, N, r, c, c_lo, c_hi));
          else
            round_transpose_block(row_major, dst, ldgt, sums, src, ldd, rows, cols, avx2);
        }
      }
      if (dbias)
        for (int c = c_lo; c < c_hi; ++c) dbias[c] = static_cast<float>(acc[c - c_lo]);
    }
  }
}

void bf16_gradient_tiles(uint16_t* tiles, float* dbias, const float* dout, int N, int OC) {
  FORGE_CHECK(amx_operand_fits(N, OC), "bf16_gradient_tiles: {} x {} is not whole tiles", N, OC);
  // Each row's runs of 32 columns go where amx_gemm reads them.
  const auto row_runs = [&](int n, int o0, int o1) {
    row_to_tiles(tiles, dout + static_cast<size_t>(n) * OC + o0, n, o0, o1, OC);
  };
  if (dbias) {
    column_sums(dbias, dout, N, OC, row_runs);  // chunks of whole runs: OC is a multiple of 32
    return;
  }
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) row_runs(n, 0, OC);
}

void bf16_gradient_rows(uint16_t* g, float* dbias, const float* dout, int N, int OC) {
  if (!dbias) {
    to_bf16(g, dout, static_cast<size_t>(N) * OC);
    return;
  }
  column_sums(dbias, dout, N, OC, [&](int n, int o0, int o1) {
    const size_t at = static_cast<size_t>(n) * OC + o0;
    to_bf16(g + at, dout + at, static_cast<size_t>(o1 - o0));
  });
}

#ifdef FORGE_HAVE_DNNL

bool bf16_gemm_on_amx() {
  static const bool yes = native_bf16_available() && onednn_runs_isa(dnnl_cpu_isa_avx512_core_amx);
  return yes;
}

bool amx_linear_available() { return native_bf16_available() && amx_kernels_enabled(); }

bool amx_linear_forward_runs(int M, int N, int K) {
  return amx_linear_available() && amx_gemm_fits(M, N, K);
}

bool amx_linear_backward_runs(int N, int IC, int OC) {
  return amx_linear_available() && amx_gemm_fits(N, IC, OC);
}

bool native_bf16_available() {
  static const bool yes = bf16_native_requested() && onednn_runs_isa(dnnl_cpu_isa_avx512_core_bf16);
  return yes;
}

void gemm_bf16(bool transA, bool transB, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc, const float* bias,
               void* b_blocked) {
  FORGE_CHECK(native_bf16_available(), "gemm_bf16 without bf16 instructions");
  onednn_matmul(OneDnnType::kBf16, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, bias,
                b_blocked);
}

size_t gemm_bf16_blocked_b_floats(int K, int N) {
  return onednn_blocked_b_floats(OneDnnType::kBf16, K, N);
}

#else

bool native_bf16_available() { return false; }

void gemm_bf16(bool, bool, int, int, int, const uint16_t*, int, const uint16_t*, int, float, float*,
               int, const float*, void*) {
  fail("gemm_bf16: forge was built without oneDNN");
}

size_t gemm_bf16_blocked_b_floats(int, int) { return 0; }

bool bf16_gemm_on_amx() { return false; }

bool amx_linear_available() { return false; }

bool amx_linear_forward_runs(int, int, int) { return false; }

bool amx_linear_backward_runs(int, int, int) { return false; }

#endif

namespace {

// W [OC, IC] rounded to bf16 a slab of 32 rows at a time into rows (its row-major bf16, OC x
// IC values) and packed from there, while the slab is still in the core's caches, into the
// AMX kernel's B of x W^T (forward, amx_pack_b_transposed's order) and of dout W (backward,
// amx_pack_b's order), either may be null: one read of W for both, not a conversion pass and
// then a pass per packing. Same bits as to_bf16 and then the two packings.
void amx_pack_weight(float* forward, float* backward, uint16_t* rows, const float* w, int IC,
                     int OC) {
#pragma omp parallel for schedule(static)
  for (int slab = 0; slab < OC / 32; ++slab) {
    const size_t at = static_cast<size_t>(slab) * 32 * IC;
    to_bf16_serial(rows + at, w + at, static_cast<size_t>(32) * IC);
    if (forward) amx_pack_b_transposed_slab(forward, rows, IC, IC, slab);
    if (backward) amx_pack_b_slab(backward, rows, IC, OC, IC, slab);
  }
}

// Sibling layers' output gradients side by side: part i [N, widths[i]] at data[i].
struct GradientParts {
  std::span<const float* const> data;
  std::span<const int> widths;
};

// The output gradient of GPT-2's c_fc, not yet computed: GELU's backward of dact [N, OC] at
// c_fc's output pre [N, OC] (kernels/gelu.h) gives it.
struct GeluGradient {
  const float *dact, *pre;
};

// The output gradients of Llama's gate | up, not yet computed: SwiGLU's backward of dact [N,
// F] at gate and up [N, F] (kernels/swiglu.h) gives them, dgate the first F columns.
struct SwigluGradient {
  const float *dact, *gate, *up;
  int F;
};

// The two ways to multiply bf16 operands, behind one interface so that the linear layer is
// written once: packed bf16 into forge's AMX kernel or oneDNN's bf16 matmul where the CPU has
// bf16 dot products, else bf16-rounded values left in fp32 into the fp32 GEMM (the same
// products, see the header). Each path plans its own room: forward_room_floats for the forward
// product, backward_room_floats for the backward's beside dout's operand(s).
struct NativeBf16 {
  using Operand = uint16_t;
  // The backward's dout operands. On forge's AMX kernel (whole tiles) dout is rounded straight
  // into the tiles' order, which dout W reads as it is and dout^T inp transposes block by
  // block. Elsewhere oneDNN 2.6: on avx512_bf16 (Zen 4) it runs dout^T @ inp slower with dout^T
  // read through strides than from a transposed copy (bench_kernels gemm/onednn_bf16/*/dweight
  // vs dweight_nn), and dout @ W slower from that copy through strides than from dout's own
  // layout (dinp_tn vs dinp: 3-8% on most shapes of small and gpt2-124m), so backward makes
  // both, in one pass over dout that also sums the bias gradient (bf16_gradient_operands);
  // where oneDNN runs on AMX, dweight through strides ran faster than from the copy on 8 of the
  // 10 shapes of small and llama-small, so there dout is only rounded.
  static bool amx_backward(int N, int IC, int OC) { return amx_linear_backward_runs(N, IC, OC); }
  static bool transposed_gradient(int N, int IC, int OC) {
    return !amx_backward(N, IC, OC) && !bf16_gemm_on_amx();
  }
  // dout's operand, and room for dout^T (oneDNN's transposed copy, or on AMX its tiles)
  static constexpr int kGradientOperands = 2;
  static size_t forward_room_floats(int N, int IC, int OC) {
    const size_t amx = amx_linear_forward_runs(N, OC, IC)
                           ? amx_packed_floats(OC, IC) + amx_packed_floats(N, IC)
                           : 0;
    return std::max(gemm_bf16_blocked_b_floats(IC, OC), amx);
  }
  // inp as the B of the AMX backward's dout^T inp in its tiles' order, or W's rows rounded on
  // their way to dout W's B when the forward kept none; the tiles of dout^T go where oneDNN's
  // dout^T would be.
  static size_t backward_room_floats(int N, int IC, int OC) {
    return amx_backward(N, IC, OC) ? amx_packed_floats(std::max(N, OC), IC) : 0;
  }
  static void convert(Operand* out, const float* in, size_t n) { to_bf16(out, in, n); }
  // The weight's operands, in `rows` (OC x IC operands): the forward product's (returned) and,
  // when kept is not null, the backward's for dout W (in kept, where backward_products takes
  // it). On forge's AMX kernel they are B in the tiles' orders, the forward's in room (where
  // forward_product reads it), packed as W is rounded (amx_pack_weight); on oneDNN both are
  // bf16(W) row-major, in kept when there is one.
  static const Operand* convert_weight(Operand* kept, Operand* rows, const float* weight, int N,
                                       int IC, int OC, float* room) {
    if (!amx_linear_forward_runs(N, OC, IC)) {
      Operand* w = kept ? kept : rows;
      convert(w, weight, static_cast<size_t>(OC) * IC);
      return w;
    }
    amx_pack_weight(room, reinterpret_cast<float*>(kept), rows, weight, IC, OC);
    return reinterpret_cast<const Operand*>(room);
  }
  // The backward's operand for dout W when the forward kept none: into out, with rows (OC x IC
  // operands) to round W through on AMX.
  static const Operand* convert_backward_weight(Operand* out, Operand* rows, const float* weight,
                                                int N, int IC, int OC) {
    if (!amx_backward(N, IC, OC)) {
      convert(out, weight, static_cast<size_t>(OC) * IC);
      return out;
    }
    amx_pack_weight(nullptr, reinterpret_cast<float*>(out), rows, weight, IC, OC);
    return out;
  }
  static void convert_gradient(Operand* g, Operand* gt, float* dbias, const float* dout, int N,
                               int IC, int OC) {
    if (amx_backward(N, IC, OC))
      bf16_gradient_tiles(g, dbias, dout, N, OC);
    else if (transposed_gradient(N, IC, OC))
      bf16_gradient_operands(g, gt, dbias, dout, N, OC);
    else
      bf16_gradient_rows(g, dbias, dout, N, OC);
  }
  // g from sibling layers' output gradients side by side (no bias), in the AMX tiles' order.
  // Requires amx_backward(N, IC, OC).
  static void convert_gradient(Operand* g, Operand* /*gt*/, float* /*dbias*/,
                               const GradientParts& dout, int N, int /*IC*/, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      int o = 0;  // part i's first column in g
      for (size_t i = 0; i < dout.data.size(); ++i) {
        const int width = dout.widths[i];
        row_to_tiles(g, dout.data[i] + static_cast<size_t>(n) * width, n, o, o + width, OC);
        o += width;
      }
    }
  }
  // g from GELU's backward, kColumnChunk columns of a row at a time into a buffer in L1 and
  // from there into the tiles and (when dbias is not null) the bias gradient's column sums:
  // dout is never written out in fp32, nor read back. Requires amx_backward(N, IC, OC).
  static void convert_gradient(Operand* g, Operand* /*gt*/, float* dbias, const GeluGradient& d,
                               int N, int /*IC*/, int OC) {
    const auto row_values = [&](int n, int o0, int o1, float* buf) -> const float* {
      const size_t at = static_cast<size_t>(n) * OC + o0;
      prefetch_rows_ahead(n, N, OC, o0, o1, d.pre, d.dact);
      gelu_backward_serial(buf, d.pre + at, d.dact + at, static_cast<size_t>(o1 - o0));
      row_to_tiles(g, buf, n, o0, o1, OC);
      return buf;
    };
    if (dbias) {
      column_sums_of(dbias, N, OC, row_values);
      return;
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      alignas(64) float buf[kColumnChunk];
      for (int o = 0; o < OC; o += kColumnChunk)
        row_values(n, o, std::min(OC, o + kColumnChunk), buf);
    }
  }
  // g from SwiGLU's backward, a row's run of columns at a time into a buffer in L1 and from
  // there into the tiles: dgate and dup are never written out in fp32, nor read back. Requires
  // amx_backward(N, IC, 2 F).
  static void convert_gradient(Operand* g, Operand* /*gt*/, float* /*dbias*/,
                               const SwigluGradient& d, int N, int /*IC*/, int OC) {
    constexpr int kRun = 256;  // columns: 2 KiB of dgate and of dup
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      alignas(64) float dgate[kRun], dup[kRun];
      const size_t row = static_cast<size_t>(n) * d.F;
      for (int o = 0; o < d.F; o += kRun) {
        const int run = std::min(kRun, d.F - o);  // a multiple of 32, as F is
        swiglu_backward_serial(dgate, dup, d.dact + row + o, d.gate + row + o, d.up + row + o,
                               static_cast<size_t>(run));
        row_to_tiles(g, dgate, n, o, o + run, OC);
        row_to_tiles(g, dup, n, d.F + o, d.F + o + run, OC);
      }
    }
  }
  // out = x W^T + bias, w as convert_weight returned it: forge's AMX kernel where it takes the
  // shape, x packed into room after w; else oneDNN with the weight in its own layout there.
  static void forward_product(float* out, const Operand* x, const Operand* w, const float* bias,
                              int N, int IC, int OC, float* room, const AmxEpilogue& after) {
    if (amx_linear_forward_runs(N, OC, IC))
      return forward_product(amx_c(out, OC, OC), x, w, bias, N, IC, OC, room, after);
    FORGE_CHECK(!after.apply, "bf16 linear forward: an epilogue off the AMX kernel");
    gemm_bf16(false, true, N, OC, IC, x, IC, w, IC, 0.0f, out, OC, bias, room);
  }
  // The same on forge's AMX kernel into sibling layers' outputs. Requires
  // amx_linear_forward_runs(N, OC, IC).
  static void forward_product(const AmxC& out, const Operand* x, const Operand* w,
                              const float* bias, int N, int IC, int OC, float* room,
                              const AmxEpilogue& after) {
    amx_gemm(out, {x, IC, AmxLayout::kRows, room + amx_packed_floats(OC, IC)},
             reinterpret_cast<const float*>(w), bias, N, OC, IC, after);
  }
  // dinp = dout W (when dinp is not null) and dweight = dout^T inp from g and gt as
  // convert_gradient left them: on AMX g in the tiles' order and gt room for dout^T's tiles; on
  // oneDNN g dout's rows and gt dout^T where transposed_gradient.
  static void backward_products(float* dinp, float* dweight, const Operand* g, Operand* gt,
                                const Operand* w, const Operand* x, int N, int IC, int OC,
                                float* room) {
    if (amx_backward(N, IC, OC)) {
      if (dinp)
        amx_gemm(amx_c(dinp, IC, IC), {g, OC, AmxLayout::kTiles, nullptr},
                 reinterpret_cast<const float*>(w), nullptr, N, IC, OC);
      amx_pack_b(room, x, IC, N, IC);
      amx_gemm(amx_c(dweight, IC, IC),
               {g, OC, AmxLayout::kTilesOfTranspose, reinterpret_cast<float*>(gt)}, room, nullptr,
               OC, IC, N);
      return;
    }
    if (dinp) gemm_bf16(false, false, N, IC, OC, g, OC, w, IC, 0.0f, dinp, IC);
    if (transposed_gradient(N, IC, OC))
      gemm_bf16(false, false, OC, IC, N, gt, N, x, IC, 0.0f, dweight, IC);
    else
      gemm_bf16(true, false, OC, IC, N, g, OC, x, IC, 0.0f, dweight, IC);
  }
};

struct RoundedFp32 {
  using Operand = float;
  static constexpr int kGradientOperands = 1;
  static size_t forward_room_floats(int, int, int) { return 0; }  // the fp32 GEMM packs its own
  static size_t backward_room_floats(int, int, int) { return 0; }
  static void convert(Operand* out, const float* in, size_t n) { round_bf16(out, in, n); }
  static const Operand* convert_weight(Operand* kept, Operand* rows, const float* weight, int,
                                       int IC, int OC, float* /*room*/) {
    Operand* w = kept ? kept : rows;
    convert(w, weight, static_cast<size_t>(OC) * IC);
    return w;
  }
  static const Operand* convert_backward_weight(Operand* out, Operand* /*rows*/,
                                                const float* weight, int, int IC, int OC) {
    convert(out, weight, static_cast<size_t>(OC) * IC);
    return out;
  }
  // g = bf16(dout), as fp32 values, and when dbias is given, dbias = column sums of the
  // unrounded dout (in bias_gradient's order), in one read of dout.
  static void convert_gradient(Operand* g, Operand* /*gt*/, float* dbias, const float* dout, int N,
                               int /*IC*/, int OC) {
    if (!dbias) {
      round_bf16(g, dout, static_cast<size_t>(N) * OC);
      return;
    }
    column_sums(dbias, dout, N, OC, [&](int n, int o0, int o1) {
      const size_t at = static_cast<size_t>(n) * OC + o0;
      round_bf16_serial(g + at, dout + at, static_cast<size_t>(o1 - o0));
    });
  }
  static void forward_product(float* out, const Operand* x, const Operand* w, const float* bias,
                              int N, int IC, int OC, float* /*room*/, const AmxEpilogue& after) {
    FORGE_CHECK(!after.apply, "bf16 linear forward: an epilogue without bf16 dot products");
    float beta = 0.0f;
    if (bias) {
      fill_rows_with_bias(out, bias, N, OC);
      beta = 1.0f;
    }
    gemm(false, true, N, OC, IC, x, IC, w, IC, beta, out, OC);
  }
  static void backward_products(float* dinp, float* dweight, const Operand* g, Operand* /*gt*/,
                                const Operand* w, const Operand* x, int N, int IC, int OC,
                                float* /*room*/) {
    if (dinp) gemm(false, false, N, IC, OC, g, OC, w, IC, 0.0f, dinp, IC);  // dout @ W
    gemm(true, false, OC, IC, N, g, OC, x, IC, 0.0f, dweight, IC);          // dout^T @ inp
  }
};

// n operands of Path in floats, rounded up to whole cache lines so that each operand placed
// after another starts 64-byte aligned.
template <typename Path>
size_t operand_floats(size_t n) {
  const size_t floats = (n * sizeof(typename Path::Operand) + sizeof(float) - 1) / sizeof(float);
  return (floats + 15) / 16 * 16;
}

template <typename Path>
size_t saved_floats(int N, int IC) {
  return operand_floats<Path>(static_cast<size_t>(N) * IC);
}

// The forward's scratch: inp's operand (without saved), the weight's (without a
// weight_operand), then the path's room for its product.
template <typename Path>
size_t forward_scratch_floats(int N, int IC, int OC) {
  return saved_floats<Path>(N, IC) + operand_floats<Path>(static_cast<size_t>(OC) * IC) +
         Path::forward_room_floats(N, IC, OC);
}

// out: float* (one [N, OC] matrix) or, on the AMX kernel, AmxC (sibling layers' outputs).
template <typename Path, typename Out>
void forward_on(const Out& out, float* saved, const float* inp, const float* weight,
                const float* bias, int N, int IC, int OC, float* scratch, bool inp_in_saved,
                float* weight_operand, const AmxEpilogue& after = {}) {
  using T = typename Path::Operand;
  const size_t x_floats = saved_floats<Path>(N, IC);
  const size_t w_floats = operand_floats<Path>(static_cast<size_t>(OC) * IC);
  T* x = reinterpret_cast<T*>(saved ? saved : scratch);
  float* room = scratch + x_floats + w_floats;
  if (!(saved && inp_in_saved)) Path::convert(x, inp, static_cast<size_t>(N) * IC);
  const T* w =
      Path::convert_weight(reinterpret_cast<T*>(weight_operand),
                           reinterpret_cast<T*>(scratch + x_floats), weight, N, IC, OC, room);
  Path::forward_product(out, x, w, bias, N, IC, OC, room, after);
}

// The backward's scratch: dout's operand(s), inp's (without saved), the weight's (without a
// weight_operand), then the path's room for its products.
// dout: const float* (one [N, OC] matrix) or, on the AMX kernel, GradientParts.
template <typename Path, typename Dout>
void backward_on(float* dinp, float* dweight, float* dbias, const Dout& dout, const float* inp,
                 const float* weight, const float* saved, int N, int IC, int OC, float* scratch,
                 const float* weight_operand) {
  using T = typename Path::Operand;
  const size_t g_floats = operand_floats<Path>(static_cast<size_t>(N) * OC);
  T* g = reinterpret_cast<T*>(scratch);
  T* gt = reinterpret_cast<T*>(scratch + g_floats);  // dout^T, where the path wants it
  float* rest = scratch + Path::kGradientOperands * g_floats;
  T* x = reinterpret_cast<T*>(saved ? const_cast<float*>(saved) : rest);
  if (!saved) Path::convert(x, inp, static_cast<size_t>(N) * IC);
  rest += saved ? 0 : saved_floats<Path>(N, IC);
  Path::convert_gradient(g, gt, dbias, dout, N, IC, OC);
  const T* w = reinterpret_cast<const T*>(weight_operand);
  float* room = rest + (weight_operand ? 0 : operand_floats<Path>(static_cast<size_t>(OC) * IC));
  if (dinp && !w)  // W rounded through room, which the products use only after
    w = Path::convert_backward_weight(reinterpret_cast<T*>(rest), reinterpret_cast<T*>(room),
                                      weight, N, IC, OC);
  Path::backward_products(dinp, dweight, g, gt, w, x, N, IC, OC, room);
}

template <typename Path>
size_t scratch_floats(int N, int IC, int OC, bool weight_operand_given) {
  const size_t g = operand_floats<Path>(static_cast<size_t>(N) * OC);
  const size_t w = weight_operand_given ? 0 : operand_floats<Path>(static_cast<size_t>(OC) * IC);
  const size_t backward = Path::kGradientOperands * g + saved_floats<Path>(N, IC) + w +
                          Path::backward_room_floats(N, IC, OC);
  return std::max(backward, forward_scratch_floats<Path>(N, IC, OC));
}

}  // namespace

size_t bf16_linear_saved_floats(int N, int IC, int OC) {
  (void)OC;
  return native_bf16_available() ? saved_floats<NativeBf16>(N, IC)
                                 : saved_floats<RoundedFp32>(N, IC);
}

size_t bf16_linear_scratch_floats(int N, int IC, int OC, bool weight_operand_given) {
  // Room for dout's, inp's and (unless the caller keeps it) the weight's operands.
  return native_bf16_available() ? scratch_floats<NativeBf16>(N, IC, OC, weight_operand_given)
                                 : scratch_floats<RoundedFp32>(N, IC, OC, weight_operand_given);
}

size_t bf16_operand_floats(size_t n) {
  return native_bf16_available() ? operand_floats<NativeBf16>(n) : operand_floats<RoundedFp32>(n);
}

void bf16_linear_forward(float* out, float* saved, const float* inp, const float* weight,
                         const float* bias, int N, int IC, int OC, float* scratch,
                         bool inp_in_saved, float* weight_operand) {
  if (native_bf16_available())
    forward_on<NativeBf16>(out, saved, inp, weight, bias, N, IC, OC, scratch, inp_in_saved,
                           weight_operand);
  else
    forward_on<RoundedFp32>(out, saved, inp, weight, bias, N, IC, OC, scratch, inp_in_saved,
                            weight_operand);
}

void bf16_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* saved, int N, int IC,
                          int OC, float* scratch, const float* weight_operand) {
  if (native_bf16_available())
    backward_on<NativeBf16>(dinp, dweight, dbias, dout, inp, weight, saved, N, IC, OC, scratch,
                            weight_operand);
  else
    backward_on<RoundedFp32>(dinp, dweight, dbias, dout, inp, weight, saved, N, IC, OC, scratch,
                             weight_operand);
}

namespace {

// act = gelu(pre) on the block of rows and columns the product has just written into pre.
struct GeluAfterProduct {
  float* act;
  const float* pre;
  size_t ld;
  static void apply(const void* context, int m0, int m1, int n0, int n1) {
    const auto& e = *static_cast<const GeluAfterProduct*>(context);
    for (int m = m0; m < m1; ++m) {
      const size_t at = static_cast<size_t>(m) * e.ld + n0;
      gelu_forward_serial(e.act + at, e.pre + at, static_cast<size_t>(n1 - n0));
    }
  }
};

}  // namespace

void bf16_linear_gelu_forward(float* out, float* act, float* saved, const float* inp,
                              const float* weight, const float* bias, int N, int IC, int OC,
                              float* scratch, float* weight_operand) {
  FORGE_CHECK(amx_linear_forward_runs(N, OC, IC),
              "bf16_linear_gelu_forward: {} x {} x {} not on the AMX kernel", N, IC, OC);
  const GeluAfterProduct gelu{act, out, static_cast<size_t>(OC)};
  forward_on<NativeBf16>(out, saved, inp, weight, bias, N, IC, OC, scratch, /*inp_in_saved=*/false,
                         weight_operand, {&GeluAfterProduct::apply, &gelu});
}

bool bf16_linear_parts_run(int N, int IC, std::span<const int> widths) {
  if (widths.empty() || widths.size() > static_cast<size_t>(AmxC::kMaxParts)) return false;
  int OC = 0;
  for (int w : widths) {
    if (w <= 0 || w % 32 != 0) return false;
    OC += w;
  }
  return amx_linear_forward_runs(N, OC, IC) && amx_linear_backward_runs(N, IC, OC);
}

namespace {
int parts_width(std::span<const int> widths, size_t count, const char* what) {
  FORGE_CHECK(count == widths.size(), "{}: {} parts, {} widths", what, count, widths.size());
  int OC = 0;
  for (int w : widths) OC += w;
  return OC;
}
}  // namespace

void bf16_linear_forward_parts(std::span<float* const> outs, std::span<const int> widths,
                               float* saved, const float* inp, const float* weight, int N, int IC,
                               float* scratch, float* weight_operand) {
  const int OC = parts_width(widths, outs.size(), "bf16_linear_forward_parts");
  FORGE_CHECK(bf16_linear_parts_run(N, IC, widths),
              "bf16_linear_forward_parts: {} x {} x {} not on the AMX kernel", N, IC, OC);
  AmxC c;
  c.count = static_cast<int>(outs.size());
  for (int i = 0; i < c.count; ++i) c.out[i] = outs[i], c.width[i] = c.ld[i] = widths[i];
  forward_on<NativeBf16>(c, saved, inp, weight, nullptr, N, IC, OC, scratch,
                         /*inp_in_saved=*/false, weight_operand);
}

void bf16_linear_backward_parts(float* dinp, float* dweight, std::span<const float* const> douts,
                                std::span<const int> widths, const float* inp, const float* weight,
                                const float* saved, int N, int IC, float* scratch,
                                const float* weight_operand) {
  const int OC = parts_width(widths, douts.size(), "bf16_linear_backward_parts");
  FORGE_CHECK(bf16_linear_parts_run(N, IC, widths),
              "bf16_linear_backward_parts: {} x {} x {} not on the AMX kernel", N, IC, OC);
  backward_on<NativeBf16>(dinp, dweight, nullptr, GradientParts{douts, widths}, inp, weight, saved,
                          N, IC, OC, scratch, weight_operand);
}

void bf16_gelu_linear_backward(float* dinp, float* dweight, float* dbias, const float* dact,
                               const float* pre, const float* inp, const float* weight,
                               const float* saved, int N, int IC, int OC, float* scratch,
                               const float* weight_operand) {
  FORGE_CHECK(amx_linear_backward_runs(N, IC, OC),
              "bf16_gelu_linear_backward: {} x {} x {} not on the AMX kernel", N, IC, OC);
  backward_on<NativeBf16>(dinp, dweight, dbias, GeluGradient{dact, pre}, inp, weight, saved, N, IC,
                          OC, scratch, weight_operand);
}

namespace {

// out = residual + out on the block of rows and columns the product has just written into out.
struct ResidualAfterProduct {
  float* out;
  const float* residual;
  size_t ld;
  static void apply(const void* context, int m0, int m1, int n0, int n1) {
    const auto& e = *static_cast<const ResidualAfterProduct*>(context);
    for (int m = m0; m < m1; ++m) {
      const size_t at = static_cast<size_t>(m) * e.ld;
      float* o = e.out + at;
      const float* r = e.residual + at;
      for (int n = n0; n < n1; ++n) o[n] = r[n] + o[n];
    }
  }
};

// out = inp W^T + bias, and with a residual (not null) out = residual + that: in the AMX
// product's epilogue where it runs, else added after bf16_linear_forward's product.
void linear_forward_adding(float* out, float* saved, const float* inp, const float* residual,
                           const float* weight, const float* bias, int N, int IC, int OC,
                           float* scratch, bool inp_in_saved, float* weight_operand) {
  if (residual && native_bf16_available() && amx_linear_forward_runs(N, OC, IC)) {
    const ResidualAfterProduct add{out, residual, static_cast<size_t>(OC)};
    forward_on<NativeBf16>(out, saved, inp, weight, bias, N, IC, OC, scratch, inp_in_saved,
                           weight_operand, {&ResidualAfterProduct::apply, &add, residual, add.ld});
    return;
  }
  bf16_linear_forward(out, saved, inp, weight, bias, N, IC, OC, scratch, inp_in_saved,
                      weight_operand);
  if (residual) add(out, residual, out, static_cast<size_t>(N) * OC);
}

}  // namespace

void bf16_linear_residual_forward(float* out, float* saved, const float* inp, const float* residual,
                                  const float* weight, const float* bias, int N, int IC, int OC,
                                  float* scratch, float* weight_operand) {
  FORGE_CHECK(residual && residual != out,
              "bf16_linear_residual_forward: the residual must be given and not be the output");
  linear_forward_adding(out, saved, inp, residual, weight, bias, N, IC, OC, scratch,
                        /*inp_in_saved=*/false, weight_operand);
}

void bf16_swiglu_linear_forward(float* out, float* saved, const float* gate, const float* up,
                                const float* weight, int N, int F, int OC, float* scratch,
                                float* weight_operand, const float* residual) {
  FORGE_CHECK(native_bf16_available() && saved,
              "bf16_swiglu_linear_forward: needs bf16 dot products and saved state");
  // SwiGLU a block at a time into a buffer in L1, rounded from there into the product's
  // input operand, which forward keeps in saved. Blocks start at multiples of 16 values, so
  // every value but the array's last n % 16 takes the vector path, as in swiglu_forward.
  constexpr size_t kBlock = 4096;
  auto* x = reinterpret_cast<uint16_t*>(saved);
  const size_t n = static_cast<size_t>(N) * F;
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (long blk = 0; blk < blocks; ++blk) {
    alignas(64) float act[kBlock];
    const size_t i0 = static_cast<size_t>(blk) * kBlock, len = std::min(n - i0, kBlock);
    swiglu_forward_serial(act, gate + i0, up + i0, len);
    to_bf16_serial(x + i0, act, len);
  }
  FORGE_CHECK(residual != out, "bf16_swiglu_linear_forward: the residual is the output");
  linear_forward_adding(out, saved, /*inp=*/nullptr, residual, weight, nullptr, N, F, OC, scratch,
                        /*inp_in_saved=*/true, weight_operand);
}

namespace {

// SwiGLU of gate and up [N, F] on the block of rows and columns the product has just written
// into both, rounded into act (bf16, N x F row-major: the down projection's input operand).
// Runs of 256 values through a buffer in L1; they start at multiples of 32 of rows of a
// multiple of 32 values, so every value takes swiglu_forward's vector path, as there.
struct SwigluAfterProduct {
  const float *gate, *up;
  uint16_t* act;
  int F;
  static void apply(const void* context, int m0, int m1, int c0, int c1) {
    const auto& e = *static_cast<const SwigluAfterProduct*>(context);
    constexpr int kRun = 256;
    alignas(64) float buf[kRun];
    for (int m = m0; m < m1; ++m)
      for (int c = c0; c < c1; c += kRun) {
        const size_t at = static_cast<size_t>(m) * e.F + c;
        const size_t len = static_cast<size_t>(std::min(kRun, c1 - c));
        swiglu_forward_serial(buf, e.gate + at, e.up + at, len);
        to_bf16_serial(e.act + at, buf, len);
      }
  }
};

}  // namespace

bool bf16_swiglu_mlp_forward_runs(int N, int C, int F) {
  const int widths[] = {F, F};
  return bf16_linear_parts_run(N, C, widths) && amx_linear_forward_runs(N, C, F);
}

void bf16_swiglu_mlp_forward(float* out, float* gate, float* up, float* gate_up_saved,
                             float* down_saved, const float* inp, const float* gate_up_w,
                             const float* down_w, const float* residual, int N, int C, int F,
                             float* scratch, float* gate_up_operand, float* down_operand) {
  FORGE_CHECK(bf16_swiglu_mlp_forward_runs(N, C, F) && down_saved,
              "bf16_swiglu_mlp_forward: {} x {} x 2 x {} not on the AMX kernel, or no saved state",
              N, C, F);
  FORGE_CHECK(residual != out, "bf16_swiglu_mlp_forward: the residual is the output");
  AmxC parts;
  parts.count = 2, parts.paired = true;
  parts.out[0] = gate, parts.out[1] = up;
  parts.width[0] = parts.width[1] = parts.ld[0] = parts.ld[1] = F;
  const SwigluAfterProduct swiglu{gate, up, reinterpret_cast<uint16_t*>(down_saved), F};
  forward_on<NativeBf16>(parts, gate_up_saved, inp, gate_up_w, nullptr, N, C, 2 * F, scratch,
                         /*inp_in_saved=*/false, gate_up_operand,
                         {&SwigluAfterProduct::apply, &swiglu});
  linear_forward_adding(out, down_saved, /*inp=*/nullptr, residual, down_w, nullptr, N, F, C,
                        scratch, /*inp_in_saved=*/true, down_operand);
}

void bf16_swiglu_linear_backward(float* dinp, float* dweight, const float* dact, const float* gate,
                                 const float* up, int F, const float* inp, const float* weight,
                                 const float* saved, int N, int IC, float* scratch,
                                 const float* weight_operand) {
  const int widths[] = {F, F};
  FORGE_CHECK(bf16_linear_parts_run(N, IC, widths),
              "bf16_swiglu_linear_backward: {} x {} x 2 x {} not on the AMX kernel", N, IC, F);
  backward_on<NativeBf16>(dinp, dweight, nullptr, SwigluGradient{dact, gate, up, F}, inp, weight,
                          saved, N, IC, 2 * F, scratch, weight_operand);
}

}  // namespace cpu
}  // namespace forge::kernels
