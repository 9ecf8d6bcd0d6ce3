#include "forge/kernels/cpu/amx_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "forge/core/error.h"
#include "forge/kernels/cpu/amx.h"
#include "forge/kernels/cpu/thread_share.h"

namespace forge::kernels::cpu {

bool amx_operand_fits(int rows, int K) {
  return rows > 0 && K > 0 && rows % 32 == 0 && K % 32 == 0;
}

bool amx_gemm_fits(int M, int N, int K) { return amx_operand_fits(M, K) && amx_operand_fits(N, K); }

size_t amx_packed_floats(int rows, int K) {
  return static_cast<size_t>(rows) * static_cast<size_t>(K) / 2;
}

AmxC amx_c(float* c, int ldc, int N) {
  AmxC parts;
  parts.count = 1, parts.out[0] = c, parts.width[0] = N, parts.ld[0] = ldc;
  return parts;
}

namespace {

constexpr int kTileWords = 16 * 16;  // one tile: 16 rows of 64 bytes
constexpr int kPairWords = 2 * kTileWords;

// The two tiles of 32 rows (of A) or 32 columns (of B) and K step kb, side by side.
inline size_t pair_at(int block, int kb, int k_tiles) {
  return (static_cast<size_t>(block) * k_tiles + kb) * kPairWords;
}

// The packed B of one pass over A (cols x K bf16), and of one chunk of K (N x chunk).
constexpr size_t kPassBytes = size_t{1} << 20;

// Output columns per pass over A: their packed B stays in a core's L2 while every row block
// of A goes by, so that a wide B (the classifier's) is not read from memory once per row
// block.
int columns_per_pass(int N, int K) {
  const size_t cols = kPassBytes / (static_cast<size_t>(K) * 2) / 32 * 32;
  return static_cast<int>(std::clamp<size_t>(cols, 32, static_cast<size_t>(N)));
}

}  // namespace

int amx_k_chunk(int M, int N, int K, int threads) {
  const int pass = columns_per_pass(N, K);
  const int chunk = static_cast<int>(kPassBytes / (static_cast<size_t>(N) * 2) / 32 * 32);
  if (pass >= N || chunk < 256 || chunk >= K) return K;
  const double rows = static_cast<double>(M) / std::max(1, threads);
  const double a_share = rows * K * 2, b = static_cast<double>(N) * K * 2, c_share = rows * N * 4;
  const int passes = (N + pass - 1) / pass, chunks = (K + chunk - 1) / chunk;
  const double whole = a_share * passes + b, split = a_share + b + 2 * c_share * (chunks - 1);
  return split < 0.75 * whole ? chunk : K;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")

namespace {

// A's 32 rows from 32 * mb, packed: per K step, tile rows of 32 consecutive k.
void pack_a_rows(uint16_t* out, const uint16_t* a, int ld, int mb, int k_tiles) {
  for (int kb = 0; kb < k_tiles; ++kb) {
    uint16_t* pair = out + pair_at(mb, kb, k_tiles) * 2;
    const uint16_t* src = a + static_cast<size_t>(32 * mb) * ld + 32 * kb;
    for (int r = 0; r < 32; ++r)
      _mm512_storeu_si512(pair + 32 * r, _mm512_loadu_si512(src + static_cast<size_t>(r) * ld));
  }
}

// The word indices of _mm512_permutex2var_epi16 for step s of transpose_32x32 (index 0-31 a
// word of its first operand, 32-63 of its second): lo for row i, hi for row i + s.
struct TransposeStep {
  alignas(64) uint16_t lo[32], hi[32];
};
constexpr std::array<TransposeStep, 5> transpose_steps() {
  std::array<TransposeStep, 5> steps{};
  for (int k = 0; k < 5; ++k) {
    const int s = 16 >> k;
    for (int c = 0; c < 32; ++c) {
      steps[k].lo[c] = static_cast<uint16_t>((c & s) ? 32 + c - s : c);
      steps[k].hi[c] = static_cast<uint16_t>((c & s) ? 32 + c : c + s);
    }
  }
  return steps;
}
constexpr std::array<TransposeStep, 5> kTransposeSteps = transpose_steps();

// Transposes 32 x 32 16-bit elements in registers: after it, rows[i] word j is the input's
// rows[j] word i. At each step s (16, 8, 4, 2, 1) rows i and i + s (i's bit s clear) swap
// row i's words with bit s set for row i + s's words with bit s clear.
void transpose_32x32(__m512i rows[32]) {
  for (int k = 0; k < 5; ++k) {
    const int s = 16 >> k;
    const __m512i lo = _mm512_load_si512(kTransposeSteps[k].lo);
    const __m512i hi = _mm512_load_si512(kTransposeSteps[k].hi);
    for (int i = 0; i < 32; ++i) {
      if (i & s) continue;
      const __m512i a = rows[i], b = rows[i + s];
      rows[i] = _mm512_permutex2var_epi16(a, lo, b);
      rows[i + s] = _mm512_permutex2var_epi16(a, hi, b);
    }
  }
}

// A's tiles for its 32 rows from 32 * mb, each 32 x 32 block transposed from A^T's: row k of
// the block of A^T for K step kb at block(kb) + k * ld.
template <typename Block>
void pack_a_transposing(uint16_t* out, int mb, int k_tiles, size_t ld, Block block) {
  __m512i rows[32];
  for (int kb = 0; kb < k_tiles; ++kb) {
    const uint16_t* src = block(kb);
    for (int k = 0; k < 32; ++k) rows[k] = _mm512_loadu_si512(src + k * ld);
    transpose_32x32(rows);
    uint16_t* pair = out + pair_at(mb, kb, k_tiles) * 2;
    for (int r = 0; r < 32; ++r) _mm512_storeu_si512(pair + 32 * r, rows[r]);
  }
}

}  // namespace

void amx_pack_b_transposed_slab(float* packed, const uint16_t* bt, int ld, int K, int slab) {
  const int k_tiles = K / 32, ld_words = ld / 2;
  const auto* w = reinterpret_cast<const uint32_t*>(bt);  // a row's K pairs as words
  auto* out = reinterpret_cast<uint32_t*>(packed);
  // Word (p, n) of a B tile is pair 16 kb + p of bt's row 16 nb + n: the tile is the transpose
  // of a 16 x 16 block of bt's words, gathered a tile row at a time.
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(ld_words));
  for (int nb = 2 * slab; nb < 2 * slab + 2; ++nb)
    for (int kb = 0; kb < k_tiles; ++kb) {
      const uint32_t* block = w + static_cast<size_t>(16 * nb) * ld_words + 16 * kb;
      uint32_t* tile = out + pair_at(nb / 2, kb, k_tiles) + (nb % 2) * kTileWords;
      for (int p = 0; p < 16; ++p)
        _mm512_storeu_si512(tile + 16 * p, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                                                                       0xFFFF, rows, block + p, 4));
    }
}

void amx_pack_b_transposed(float* packed, const uint16_t* bt, int ld, int K, int N) {
  FORGE_CHECK(amx_operand_fits(N, K), "amx_pack_b_transposed: {} x {} is not whole tiles", K, N);
  FORGE_CHECK(ld % 2 == 0, "amx_pack_b_transposed: odd row stride {}", ld);
#pragma omp parallel for schedule(static)
  for (int slab = 0; slab < N / 32; ++slab) amx_pack_b_transposed_slab(packed, bt, ld, K, slab);
}

void amx_pack_b_slab(float* packed, const uint16_t* b, int ld, int K, int N, int slab) {
  const int k_tiles = K / 32, kb = slab;
  auto* out = reinterpret_cast<uint16_t*>(packed);
  // Tile row p holds, per column n, the pair (B[2p, n], B[2p + 1, n]): rows 2p and 2p + 1
  // interleaved word by word.
  const __m512i index = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                         8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  for (int nb = 0; nb < N / 16; ++nb) {
    const uint16_t* src = b + static_cast<size_t>(32 * kb) * ld + 16 * nb;
    uint16_t* tile = out + (pair_at(nb / 2, kb, k_tiles) + (nb % 2) * kTileWords) * 2;
    for (int p = 0; p < 16; ++p) {
      const __m512i even = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * p * ld)));
      const __m512i odd = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (2 * p + 1) * ld)));
      _mm512_storeu_si512(tile + 32 * p, _mm512_permutex2var_epi16(even, index, odd));
    }
  }
}

void amx_pack_b(float* packed, const uint16_t* b, int ld, int K, int N) {
  FORGE_CHECK(amx_operand_fits(N, K), "amx_pack_b: {} x {} is not whole tiles", K, N);
  // A slab of 32 rows at a time, all its column blocks, so that each row's lines are read once.
#pragma omp parallel for schedule(static)
  for (int slab = 0; slab < K / 32; ++slab) amx_pack_b_slab(packed, b, ld, K, N, slab);
}

void amx_gemm(const AmxC& c, const AmxA& a, const float* b_packed, const float* bias, int M, int N,
              int K, const AmxEpilogue& after, int k_chunk) {
  FORGE_CHECK(amx_gemm_fits(M, N, K), "amx_gemm: {} x {} x {} is not whole tiles", M, N, K);
  FORGE_CHECK(c.count >= 1 && c.count <= AmxC::kMaxParts, "amx_gemm: {} output parts", c.count);
  int columns = 0;
  for (int i = 0; i < c.count; ++i) {
    FORGE_CHECK(c.width[i] > 0 && c.width[i] % 32 == 0 && c.ld[i] >= c.width[i],
                "amx_gemm: output part {} of width {} and row stride {}", i, c.width[i], c.ld[i]);
    columns += c.width[i];
  }
  FORGE_CHECK(columns == N, "amx_gemm: output parts of {} columns for {}", columns, N);
  FORGE_CHECK(!c.paired || (c.count == 2 && c.width[0] == c.width[1]),
              "amx_gemm: paired output parts must be two of one width");
  const int k_tiles = K / 32, pass = columns_per_pass(N, K);
  FORGE_CHECK(k_chunk >= 0 && k_chunk % 32 == 0, "amx_gemm: K chunk {}", k_chunk);
  const int chunk =
      c.paired ? K
               : (k_chunk > 0 ? std::min(k_chunk, K) : amx_k_chunk(M, N, K, omp_get_max_threads()));
  const int rows_per_step = (32 + chunk / 32 - 1) / (chunk / 32);
  const auto* b = reinterpret_cast<const uint16_t*>(b_packed);
  const uint16_t* a_packed =
      a.layout == AmxLayout::kTiles ? a.data : reinterpret_cast<const uint16_t*>(a.room);
#pragma omp parallel
  {
    // Each thread its own run of 32-row blocks, packed by itself (into its caches) and kept
    // there across the columns of a pass.
    const Range rows = thread_share(M, 32, omp_get_thread_num(), omp_get_num_threads());
    const int first = static_cast<int>(rows.begin / 32), last = static_cast<int>(rows.end / 32);
    auto* room = reinterpret_cast<uint16_t*>(a.room);
    for (int mb = first; mb < last; ++mb) switch (a.layout) {
        case AmxLayout::kRows:
          pack_a_rows(room, a.data, a.ld, mb, k_tiles);
          break;
        case AmxLayout::kColumns:  // A's rows are data's columns 32 mb ... 32 mb + 31
          pack_a_transposing(room, mb, k_tiles, a.ld, [&](int kb) {
            return a.data + static_cast<size_t>(32 * kb) * a.ld + 32 * mb;
          });
          break;
        case AmxLayout::kTilesOfTranspose:  // rows of 32 in A^T's tiles
          pack_a_transposing(room, mb, k_tiles, 32,
                             [&](int kb) { return a.data + pair_at(kb, mb, M / 32) * 2; });
          break;
        case AmxLayout::kTiles:
          break;
      }
    configure_tiles();
    // C's 32 x 32 block at rows 32 mb and C's column n0, in part `part` (first column
    // part_start), over K steps [kb0, kb1): from the bias (or zero) at K's start, else from
    // what the previous chunk of K stored (fp32 stored and loaded exactly: each element's sum
    // runs through the same instructions in the same order either way).
    const auto block = [&](int mb, int n0, int part, int part_start, int kb0, int kb1) {
      const size_t ld = static_cast<size_t>(c.ld[part]);
      float* out = c.out[part] + 32 * mb * ld + (n0 - part_start);
      if (kb0 > 0) {
        _tile_loadd(0, out, ld * 4);
        _tile_loadd(1, out + 16, ld * 4);
        _tile_loadd(2, out + 16 * ld, ld * 4);
        _tile_loadd(3, out + 16 * ld + 16, ld * 4);
      } else if (bias) {  // bias rows (a row stride of 0 repeats one row)
        _tile_loadd(0, bias + n0, 0);
        _tile_loadd(1, bias + n0 + 16, 0);
        _tile_loadd(2, bias + n0, 0);
        _tile_loadd(3, bias + n0 + 16, 0);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      const uint16_t* a_tiles = a_packed + pair_at(mb, 0, k_tiles) * 2;
      const uint16_t* b_tiles = b + pair_at(n0 / 32, 0, k_tiles) * 2;
      const size_t at = static_cast<size_t>(32 * mb) * after.ld + n0;  // in after.reads
      const bool final = kb1 == k_tiles;
      for (int kb = kb0; kb < kb1; ++kb) {
        // The block's 32 rows of C (two lines each) asked for, for writing, a few rows a
        // step: a layer's output is cold, and the stores below would wait for its lines.
        // Likewise what the epilogue reads.
        const int step = kb - kb0;
        for (int r = step * rows_per_step; r < std::min(32, (step + 1) * rows_per_step); ++r) {
          __builtin_prefetch(out + r * ld, 1, 3);
          __builtin_prefetch(out + r * ld + 16, 1, 3);
          if (after.reads && final) {
            __builtin_prefetch(after.reads + at + r * after.ld, 0, 3);
            __builtin_prefetch(after.reads + at + r * after.ld + 16, 0, 3);
          }
        }
        const uint16_t* ak = a_tiles + kb * kPairWords * 2;
        const uint16_t* bk = b_tiles + kb * kPairWords * 2;
        _tile_loadd(4, ak, 64);
        _tile_loadd(5, ak + kTileWords * 2, 64);
        _tile_loadd(6, bk, 64);
        _tile_loadd(7, bk + kTileWords * 2, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, out, ld * 4);
      _tile_stored(1, out + 16, ld * 4);
      _tile_stored(2, out + 16 * ld, ld * 4);
      _tile_stored(3, out + 16 * ld + 16, ld * 4);
    };
    if (c.paired) {
      // Part 0's block j, then part 1's block j: a pass covers the same columns of both.
      const int width = c.width[0], pass_blocks = std::max(1, pass / 64);
      for (int j_lo = 0; j_lo < width / 32; j_lo += pass_blocks) {
        const int j_hi = std::min(width / 32, j_lo + pass_blocks);
        for (int mb = first; mb < last; ++mb) {
          for (int j = j_lo; j < j_hi; ++j) {
            block(mb, 32 * j, 0, 0, 0, k_tiles);
            block(mb, width + 32 * j, 1, width, 0, k_tiles);
          }
          if (after.apply) after.apply(after.context, 32 * mb, 32 * mb + 32, 32 * j_lo, 32 * j_hi);
        }
      }
    } else {
      for (int kb0 = 0; kb0 < k_tiles; kb0 += chunk / 32) {
        const int kb1 = std::min(k_tiles, kb0 + chunk / 32);
        const int chunk_pass = columns_per_pass(N, 32 * (kb1 - kb0));
        for (int n_lo = 0; n_lo < N; n_lo += chunk_pass) {
          const int n_hi = std::min(N, n_lo + chunk_pass);
          for (int mb = first; mb < last; ++mb) {
            int part = 0, part_start = 0;  // the part holding column n0
            for (int n0 = n_lo; n0 < n_hi; n0 += 32) {
              while (n0 >= part_start + c.width[part]) part_start += c.width[part++];
              block(mb, n0, part, part_start, kb0, kb1);
            }
            // The block's rows across the pass: 32 x up to 1 MiB / (2 K) values, in L2.
            if (after.apply && kb1 == k_tiles)
              after.apply(after.context, 32 * mb, 32 * mb + 32, n_lo, n_hi);
          }
        }
      }
    }
    release_tiles();
  }
}

#pragma GCC pop_options

}  // namespace forge::kernels::cpu
