#include "forge/kernels/cpu/amx_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "forge/core/error.h"
#include "forge/kernels/cpu/amx.h"

namespace forge::kernels::cpu {

bool amx_linear_fits(int M, int N, int K) {
  return M > 0 && N > 0 && K > 0 && M % 32 == 0 && N % 32 == 0 && K % 32 == 0;
}

size_t amx_packed_weight_floats(int N, int K) {
  return static_cast<size_t>(N) * static_cast<size_t>(K) / 2;
}

namespace {

constexpr int kTileWords = 16 * 16;  // one B tile: 16 rows of K pairs by 16 columns

// The B tile of columns [16 nb, 16 nb + 16) and K pairs [16 kb, 16 kb + 16).
inline size_t tile_at(int nb, int kb, int k_tiles) {
  return (static_cast<size_t>(nb) * k_tiles + kb) * kTileWords;
}

// Output columns per pass over x: their packed weight (cols x K bf16) stays in a core's L2
// while every row block of x goes by, so that a wide W (the classifier's) is not read from
// memory once per row block.
int columns_per_pass(int N, int K) {
  constexpr size_t kBytes = size_t{1} << 20;
  const size_t cols = kBytes / (static_cast<size_t>(K) * 2) / 32 * 32;
  return static_cast<int>(std::clamp<size_t>(cols, 32, static_cast<size_t>(N)));
}

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")

void amx_pack_weight(float* packed, const uint16_t* weight, int N, int K) {
  FORGE_CHECK(amx_linear_fits(32, N, K), "amx_pack_weight: {} x {} is not whole tiles", N, K);
  const int k_tiles = K / 32, pairs = K / 2;
  const auto* w = reinterpret_cast<const uint32_t*>(weight);  // a row's K pairs as words
  auto* out = reinterpret_cast<uint32_t*>(packed);
  // Word (p, n) of tile (nb, kb) is pair 16 kb + p of row 16 nb + n: the tile is the transpose
  // of a 16 x 16 block of W's words, gathered a tile row at a time.
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(pairs));
#pragma omp parallel for schedule(static)
  for (int nb = 0; nb < N / 16; ++nb)
    for (int kb = 0; kb < k_tiles; ++kb) {
      const uint32_t* block = w + static_cast<size_t>(16 * nb) * pairs + 16 * kb;
      uint32_t* tile = out + tile_at(nb, kb, k_tiles);
      for (int p = 0; p < 16; ++p)
        _mm512_storeu_si512(tile + 16 * p, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                                                                       0xFFFF, rows, block + p, 4));
    }
}

void amx_linear_forward(float* out, const uint16_t* x, const float* packed, const float* bias,
                        int M, int N, int K) {
  FORGE_CHECK(amx_linear_fits(M, N, K), "amx_linear_forward: {} x {} x {} is not whole tiles", M, N,
              K);
  const int k_tiles = K / 32, pass = columns_per_pass(N, K);
  const auto* b = reinterpret_cast<const uint32_t*>(packed);
  const size_t a_bytes = static_cast<size_t>(K) * 2, c_bytes = static_cast<size_t>(N) * 4;
#pragma omp parallel
  {
    configure_tiles();
    // Each thread its own run of 32-row blocks, so that a row block's x stays in its L1/L2
    // across the columns of a pass.
    const int blocks = M / 32, t = omp_get_thread_num(), team = omp_get_num_threads();
    const int first = blocks * t / team, last = blocks * (t + 1) / team;
    for (int n_lo = 0; n_lo < N; n_lo += pass) {
      const int n_hi = std::min(N, n_lo + pass);
      for (int mb = first; mb < last; ++mb) {
        const uint16_t* a0 = x + static_cast<size_t>(32 * mb) * K;
        const uint16_t* a1 = a0 + static_cast<size_t>(16) * K;
        for (int n0 = n_lo; n0 < n_hi; n0 += 32) {
          // Bias rows as the accumulators' start (a row stride of 0 repeats one row).
          if (bias) {
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
          const uint32_t* b0 = b + tile_at(n0 / 16, 0, k_tiles);
          const uint32_t* b1 = b + tile_at(n0 / 16 + 1, 0, k_tiles);
          for (int kb = 0; kb < k_tiles; ++kb) {
            _tile_loadd(4, a0 + 32 * kb, a_bytes);
            _tile_loadd(5, a1 + 32 * kb, a_bytes);
            _tile_loadd(6, b0 + kb * kTileWords, 64);
            _tile_loadd(7, b1 + kb * kTileWords, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          float* c = out + static_cast<size_t>(32 * mb) * N + n0;
          _tile_stored(0, c, c_bytes);
          _tile_stored(1, c + 16, c_bytes);
          _tile_stored(2, c + 16 * static_cast<size_t>(N), c_bytes);
          _tile_stored(3, c + 16 * static_cast<size_t>(N) + 16, c_bytes);
        }
      }
    }
    release_tiles();
  }
}

#pragma GCC pop_options

}  // namespace forge::kernels::cpu
