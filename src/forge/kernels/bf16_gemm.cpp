#include "forge/kernels/bf16_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>

#ifdef FORGE_HAVE_DNNL
#include <dnnl.h>

#include "forge/kernels/cpu/onednn_matmul.h"
#endif

#include "forge/core/error.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/gemm.h"
#include "forge/kernels/linear.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void bf16_linear_forward(Real* out, const float* inp, const float* weight, const float* bias,
                         int N, int IC, int OC) {
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
      float acc = 0.0f;
      for (int n = 0; n < N; ++n) acc += dout[static_cast<size_t>(n) * OC + o];
      dbias[o] = acc;
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
  const __m256i rounded =
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
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
    _mm256_storeu_ps(out + i,
                     _mm256_castsi256_ps(round_lanes_avx2(_mm256_loadu_ps(in + i))));
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
// out[0, 16) = bf16_bits of x, the 16 values at in (x loaded from there).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline void to_bf16_16(
    uint16_t* out, const float* in, __m512 x) {
  const __m512 mag = _mm512_abs_ps(x);
  const __mmask16 denormal = _mm512_cmp_ps_mask(mag, _mm512_set1_ps(1.17549435e-38f),
                                                _CMP_LT_OQ) &
                             _mm512_cmp_ps_mask(mag, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  if (denormal) {
    for (int k = 0; k < 16; ++k) out[k] = scalar::bf16_bits(in[k]);
    return;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void to_bf16_avx512bf16(
    uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) to_bf16_16(out + i, in + i, _mm512_loadu_ps(in + i));
  for (; i < n; ++i) out[i] = scalar::bf16_bits(in[i]);
}

// One 16 x 16 block in registers: col[c] holds src[r * lds + c] for r = 0..15. Four rounds of
// unpacks interleave ever wider units (16, 32, 64 bits, then 128-bit lanes), as in any
// register transpose.
__attribute__((target("avx2"))) inline void transpose16_to_registers(__m256i col[16],
                                                                     const uint16_t* src,
                                                                     size_t lds) {
  __m256i r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * lds));
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

// One 16 x 16 block: dst[c * ldd + r] = src[r * lds + c].
__attribute__((target("avx2"))) void transpose_block16_avx2(uint16_t* dst, size_t ldd,
                                                            const uint16_t* src, size_t lds) {
  __m256i col[16];
  transpose16_to_registers(col, src, lds);
  for (int c = 0; c < 16; ++c)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * ldd), col[c]);
}

// 32 rows by 16 columns: each of dst's 16 rows gets its 64 bytes (a whole cache line when
// aligned) in two adjacent stores. Written as two 16 x 16 blocks, the first block's half lines
// could be evicted before the second completed them when dst's rows are a multiple of 4 KiB
// apart (16 rows in one L1 set of 12 ways), and each line was fetched twice.
__attribute__((target("avx2"))) void transpose_block32x16_avx2(uint16_t* dst, size_t ldd,
                                                               const uint16_t* src, size_t lds) {
  __m256i top[16], bottom[16];
  transpose16_to_registers(top, src, lds);
  transpose16_to_registers(bottom, src + 16 * lds, lds);
  for (int c = 0; c < 16; ++c) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * ldd), top[c]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * ldd + 16), bottom[c]);
  }
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

// One block of transpose_u16 (rows, cols <= 16): in registers when it is whole and the CPU
// has AVX2, else one value at a time.
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
    const size_t parts = static_cast<size_t>(omp_get_num_threads());
    const size_t id = static_cast<size_t>(omp_get_thread_num());
    const size_t per = ((n + parts - 1) / parts + 15) / 16 * 16;
    const size_t lo = std::min(n, id * per), hi = std::min(n, lo + per);
    if (lo < hi) f(lo, hi);
  }
}

}  // namespace

void round_bf16(float* out, const float* in, size_t n) {
  parallel_chunks(n,
                  [&](size_t lo, size_t hi) { round_bf16_serial(out + lo, in + lo, hi - lo); });
}

void to_bf16(uint16_t* out, const float* in, size_t n) {
  parallel_chunks(n, [&](size_t lo, size_t hi) { to_bf16_serial(out + lo, in + lo, hi - lo); });
}

void transpose_u16(uint16_t* dst, size_t ldd, const uint16_t* src, size_t lds, int rows,
                   int cols) {
  const bool avx2 = use_avx2();
  const int row_blocks = (rows + 15) / 16, col_blocks = (cols + 15) / 16;
  const long blocks = static_cast<long>(row_blocks) * col_blocks;
  // Threads take runs of row blocks: each writes its own 32-byte pieces of dst's rows.
#pragma omp parallel for schedule(static) if (blocks > 64)
  for (long b = 0; b < blocks; ++b) {
    const int r0 = static_cast<int>(b % row_blocks) * 16;
    const int c0 = static_cast<int>(b / row_blocks) * 16;
    const uint16_t* s = src + static_cast<size_t>(r0) * lds + c0;
    uint16_t* d = dst + static_cast<size_t>(c0) * ldd + r0;
    transpose_block(d, ldd, s, lds, std::min(16, rows - r0), std::min(16, cols - c0), avx2);
  }
}

namespace {

// Columns a thread takes at a time: their dbias accumulators (2 KiB) and a band's rounded
// rows (kGradientRows x 512 bf16, 32 KiB) stay in L1/L2 between the two passes over the band.
constexpr int kGradientColumns = 512;
// Rows per band: gt's rows then take whole 64-byte lines (32 bf16) from one band.
constexpr int kGradientRows = 32;
// How far ahead round_band prefetches dout. A thread reads a short run of each row (its
// columns), a whole row apart, which the hardware prefetchers do not follow: the loads
// stalled (perf). With the prefetch and the 32 x 16 transposes the pass ran 1.2-2x faster on
// the shapes of small and gpt2-124m (bench_kernels bf16_operands/*/gradient, min of 3
// alternated runs); in a small bf16 step, where dout arrives from the previous op, it took
// about as long as before (perf samples).
constexpr int kPrefetchRows = 4;

// Rows [r0, r1) by columns [c0, c1) of dout, row by row: rounded into g and added into acc
// (acc[c - c0], null: no bias), so each column keeps scalar::bf16_gradient_operands's order.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_band(
    uint16_t* g, float* acc, const float* dout, int OC, int r0, int r1, int c0, int c1) {
  const int c16 = c0 + (c1 - c0) / 16 * 16;
  for (int r = r0; r < r1; ++r) {
    const size_t row = static_cast<size_t>(r) * OC;
    const float* ahead = dout + static_cast<size_t>(std::min(r + kPrefetchRows, r1 - 1)) * OC;
    for (int c = c0; c < c16; c += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + c), _MM_HINT_T0);
      const __m512 x = _mm512_loadu_ps(dout + row + c);
      if (acc) _mm512_storeu_ps(acc + (c - c0), _mm512_add_ps(_mm512_loadu_ps(acc + (c - c0)), x));
      to_bf16_16(g + row + c, dout + row + c, x);
    }
    for (int c = c16; c < c1; ++c) {
      if (acc) acc[c - c0] += dout[row + c];
      g[row + c] = scalar::bf16_bits(dout[row + c]);
    }
  }
}

// The band's rounded values, g rows [r0, r1) by columns [c0, c1), transposed into gt (rows N
// apart) in registers: 32 x 16 blocks where the band is whole, 16 x 16 at its edges.
void transpose_band(uint16_t* gt, const uint16_t* g, int N, int OC, int r0, int r1, int c0,
                    int c1) {
  const size_t ldgt = static_cast<size_t>(N);
  for (int c = c0; c < c1; c += 16) {
    if (r1 - r0 == 32 && c + 16 <= c1) {
      transpose_block32x16_avx2(gt + static_cast<size_t>(c) * ldgt + r0, ldgt,
                                g + static_cast<size_t>(r0) * OC + c, static_cast<size_t>(OC));
      continue;
    }
    for (int r = r0; r < r1; r += 16)
      transpose_block(gt + static_cast<size_t>(c) * ldgt + r, ldgt,
                      g + static_cast<size_t>(r) * OC + c, static_cast<size_t>(OC),
                      std::min(16, r1 - r), std::min(16, c1 - c), true);
  }
}

void gradient_operands_fused(uint16_t* g, uint16_t* gt, float* dbias, const float* dout, int N,
                             int OC) {
  const int blocks = (OC + 15) / 16;
  // Each thread owns a run of whole 16-column blocks and walks every row over it.
#pragma omp parallel if (static_cast<size_t>(N) * OC >= kParallelMin)
  {
    const int parts = omp_get_num_threads(), id = omp_get_thread_num();
    const int per = (blocks + parts - 1) / parts;
    const int lo = std::min(OC, id * per * 16), hi = std::min(OC, (id + 1) * per * 16);
    alignas(64) float acc[kGradientColumns];
    for (int c_lo = lo; c_lo < hi; c_lo += kGradientColumns) {
      const int c_hi = std::min(hi, c_lo + kGradientColumns);
      std::fill(acc, acc + (c_hi - c_lo), 0.0f);
      for (int r_lo = 0; r_lo < N; r_lo += kGradientRows) {
        const int r_hi = std::min(N, r_lo + kGradientRows);
        round_band(g, dbias ? acc : nullptr, dout, OC, r_lo, r_hi, c_lo, c_hi);
        transpose_band(gt, g, N, OC, r_lo, r_hi, c_lo, c_hi);
      }
      if (dbias) std::copy(acc, acc + (c_hi - c_lo), dbias + c_lo);
    }
  }
}

}  // namespace

void bf16_gradient_operands(uint16_t* g, uint16_t* gt, float* dbias, const float* dout, int N,
                            int OC) {
  if (active_isa() == Isa::kAvx512 && cpu_has_avx512bf16()) {
    gradient_operands_fused(g, gt, dbias, dout, N, OC);
    return;
  }
  if (dbias)
    column_sums(dbias, dout, N, OC, [&](int n, int o0, int o1) {
      const size_t at = static_cast<size_t>(n) * OC + o0;
      to_bf16_serial(g + at, dout + at, static_cast<size_t>(o1 - o0));
    });
  else
    to_bf16(g, dout, static_cast<size_t>(N) * OC);
  transpose_u16(gt, static_cast<size_t>(N), g, static_cast<size_t>(OC), N, OC);
}

#ifdef FORGE_HAVE_DNNL

bool native_bf16_available() {
  static const bool yes = [] {
    if (const char* v = std::getenv("FORGE_BF16_NATIVE"); v && std::string(v) == "0") return false;
    return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_bf16;
  }();
  return yes;
}

void gemm_bf16(bool transA, bool transB, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc, const float* bias) {
  FORGE_CHECK(native_bf16_available(), "gemm_bf16 without bf16 instructions");
  onednn_matmul(OneDnnType::kBf16, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
}

#else

bool native_bf16_available() { return false; }

void gemm_bf16(bool, bool, int, int, int, const uint16_t*, int, const uint16_t*, int, float,
               float*, int, const float*) {
  fail("gemm_bf16: forge was built without oneDNN");
}

#endif

namespace {

// The two ways to multiply bf16 operands, behind one interface so that the linear layer is
// written once: packed bf16 into oneDNN's bf16 matmul where the CPU has bf16 dot products,
// else bf16-rounded values left in fp32 into the fp32 GEMM (the same products, see the header).
struct NativeBf16 {
  using Operand = uint16_t;
  // oneDNN 2.6's bf16 matmul runs dout^T @ inp slower with dout^T read through strides
  // than from a transposed copy (bench_kernels gemm/onednn_bf16/*/dweight vs dweight_nn).
  // Copy included, the layer's backward came out 0-5% faster on the shapes of small and
  // gpt2-124m (both variants alternated in one process), so backward makes the copy.
  static constexpr bool kTransposedGradient = true;
  static void convert(Operand* out, const float* in, size_t n) { to_bf16(out, in, n); }
  static void multiply(bool ta, bool tb, int M, int N, int K, const Operand* A, int lda,
                       const Operand* B, int ldb, float* C, int ldc, const float* bias) {
    gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C, ldc, bias);
  }
};

struct RoundedFp32 {
  using Operand = float;
  static constexpr bool kTransposedGradient = false;
  static void convert(Operand* out, const float* in, size_t n) { round_bf16(out, in, n); }
  static void convert_serial(Operand* out, const float* in, size_t n) {
    round_bf16_serial(out, in, n);
  }
  static void multiply(bool ta, bool tb, int M, int N, int K, const Operand* A, int lda,
                       const Operand* B, int ldb, float* C, int ldc, const float* bias) {
    float beta = 0.0f;
    if (bias) {
      fill_rows_with_bias(C, bias, M, N);
      beta = 1.0f;
    }
    gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
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

// The weight is converted again in backward rather than kept: a bf16 copy of every weight for
// the whole step put gpt2-124m's peak RSS at 3852 MiB, above PyTorch autocast's 3575, for
// the price of one pass over the weights.
template <typename Path>
void forward_on(float* out, float* saved, const float* inp, const float* weight,
                const float* bias, int N, int IC, int OC, float* scratch, bool inp_in_saved) {
  using T = typename Path::Operand;
  T* x = reinterpret_cast<T*>(saved ? saved : scratch);
  T* w = reinterpret_cast<T*>(scratch + saved_floats<Path>(N, IC));
  if (!(saved && inp_in_saved)) Path::convert(x, inp, static_cast<size_t>(N) * IC);
  Path::convert(w, weight, static_cast<size_t>(OC) * IC);
  Path::multiply(false, true, N, OC, IC, x, IC, w, IC, out, OC, bias);
}

// g = bf16(dout) and, when dbias is given, dbias = column sums of the unrounded dout (in
// bias_gradient's order), in one read of dout. (The native path, which also wants dout
// transposed, has bf16_gradient_operands instead.)
template <typename Path>
void convert_gradient(typename Path::Operand* g, float* dbias, const float* dout, int N,
                      int OC) {
  if (!dbias) {
    Path::convert(g, dout, static_cast<size_t>(N) * OC);
    return;
  }
  column_sums(dbias, dout, N, OC, [&](int n, int o0, int o1) {
    const size_t at = static_cast<size_t>(n) * OC + o0;
    Path::convert_serial(g + at, dout + at, static_cast<size_t>(o1 - o0));
  });
}

template <typename Path>
void backward_on(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                 const float* weight, const float* saved, int N, int IC, int OC,
                 float* scratch) {
  using T = typename Path::Operand;
  const size_t g_floats = operand_floats<Path>(static_cast<size_t>(N) * OC);
  T* g = reinterpret_cast<T*>(scratch);
  T* gt = reinterpret_cast<T*>(scratch + g_floats);  // dout^T, where the path wants it
  float* rest = scratch + (Path::kTransposedGradient ? 2 : 1) * g_floats;
  T* x = reinterpret_cast<T*>(saved ? const_cast<float*>(saved) : rest);
  T* w = reinterpret_cast<T*>(rest + saved_floats<Path>(N, IC));
  if (!saved) Path::convert(x, inp, static_cast<size_t>(N) * IC);
  if constexpr (Path::kTransposedGradient)
    bf16_gradient_operands(g, gt, dbias, dout, N, OC);
  else
    convert_gradient<Path>(g, dbias, dout, N, OC);
  if (dinp) {
    Path::convert(w, weight, static_cast<size_t>(OC) * IC);
    Path::multiply(false, false, N, IC, OC, g, OC, w, IC, dinp, IC, nullptr);  // dout @ W
  }
  if constexpr (Path::kTransposedGradient) {
    Path::multiply(false, false, OC, IC, N, gt, N, x, IC, dweight, IC, nullptr);
  } else {
    Path::multiply(true, false, OC, IC, N, g, OC, x, IC, dweight, IC, nullptr);  // dout^T @ inp
  }
}

template <typename Path>
size_t scratch_floats(int N, int IC, int OC) {
  const size_t g = operand_floats<Path>(static_cast<size_t>(N) * OC);
  return (Path::kTransposedGradient ? 2 : 1) * g + saved_floats<Path>(N, IC) +
         operand_floats<Path>(static_cast<size_t>(OC) * IC);
}

}  // namespace

size_t bf16_linear_saved_floats(int N, int IC, int OC) {
  (void)OC;
  return native_bf16_available() ? saved_floats<NativeBf16>(N, IC)
                                 : saved_floats<RoundedFp32>(N, IC);
}

size_t bf16_linear_scratch_floats(int N, int IC, int OC) {
  // Room for dout's (and on the native path its transpose's), inp's and weight's operands.
  return native_bf16_available() ? scratch_floats<NativeBf16>(N, IC, OC)
                                 : scratch_floats<RoundedFp32>(N, IC, OC);
}

void bf16_linear_forward(float* out, float* saved, const float* inp, const float* weight,
                         const float* bias, int N, int IC, int OC, float* scratch,
                         bool inp_in_saved) {
  if (native_bf16_available())
    forward_on<NativeBf16>(out, saved, inp, weight, bias, N, IC, OC, scratch, inp_in_saved);
  else
    forward_on<RoundedFp32>(out, saved, inp, weight, bias, N, IC, OC, scratch, inp_in_saved);
}

void bf16_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* saved, int N,
                          int IC, int OC, float* scratch) {
  if (native_bf16_available())
    backward_on<NativeBf16>(dinp, dweight, dbias, dout, inp, weight, saved, N, IC, OC, scratch);
  else
    backward_on<RoundedFp32>(dinp, dweight, dbias, dout, inp, weight, saved, N, IC, OC,
                             scratch);
}

}  // namespace cpu
}  // namespace forge::kernels
