// bf16 products on AMX tiles: C[M, N] = A[M, K] B[K, N] + bias, A and B as packed bf16
// (uint16_t bit patterns), fp32 accumulation and output. The bf16 linear layer runs its three
// products here where their shapes are whole tiles: the forward x W^T (B = W^T, packed from W's
// rows), dout W (B = W, packed from two of W's rows at a time) and dout^T x (A = dout^T, packed
// from dout's columns).
// Each output element is summed over k = 0, 1, ..., K-1 in pairs (TDPBF16PS) by one thread,
// whatever the thread count: the same bits on any team.
//
// Both operands go into the tiles' order first: per 32 rows of A and 32 of K, the two A tiles
// (16 rows of 64 bytes each) side by side; per 32 columns of B and 32 of K, the two B tiles
// (16 rows of K pairs by 16 columns) side by side. The inner loop then reads two sequential
// streams of whole tiles. Reading A's tiles from its rows where they lie (K * 2 bytes apart), as
// the first version did, ran at 0.58-0.97 of this rate in 19 of 20 side-by-side medians over
// the forward shapes of small, gpt2-124m and llama-small, packs counted (issue 5's note of
// 2026-12-05's session 24).
//
// Whole tiles only: M, N and K multiples of 32 (the model shapes of small, gpt2-124m and
// llama-small are); other shapes stay on oneDNN.
#pragma once

#include <cstddef>
#include <cstdint>

namespace forge::kernels::cpu {

// True when an operand of `rows` x K (A's rows, or B's columns) is whole tiles: both
// multiples of 32, neither zero.
bool amx_operand_fits(int rows, int K);
// True when the product's shape is one these kernels take: A [M, K] and B's N columns fit.
bool amx_gemm_fits(int M, int N, int K);

// A packed operand of `rows` x K bf16 (A's rows, or B's columns), in floats.
size_t amx_packed_floats(int rows, int K);

// B packed from B^T: bt[n * ld + k] = B[k, n], bt N rows of K (the weight W of x W^T).
void amx_pack_b_transposed(float* packed, const uint16_t* bt, int ld, int K, int N);
// B packed from B itself: b[k * ld + n] = B[k, n], b K rows of N.
void amx_pack_b(float* packed, const uint16_t* b, int ld, int K, int N);
// The same two packings, one slab of 32 of bt's rows (N rows) or of b's rows (K rows) at a
// time, on the calling thread: rows [32 slab, 32 slab + 32) of the source, which is all the
// slab reads (a slab of bt's rows is its own 32 columns of B, whatever N). Whole tiles and an
// even ld, as above (unchecked).
void amx_pack_b_transposed_slab(float* packed, const uint16_t* bt, int ld, int K, int slab);
void amx_pack_b_slab(float* packed, const uint16_t* b, int ld, int K, int N, int slab);

// How amx_gemm finds A: kRows, A[m, k] = data[m * ld + k]; kColumns, A[m, k] = data[k * ld + m];
// kTiles, data is A already in the tiles' order (amx_tiles_index; ld unused); kTilesOfTranspose,
// data is A^T [K, M] in the tiles' order (with K and M swapped). room: amx_packed_floats(M, K)
// floats the product packs A into (each thread its own rows), unused for kTiles.
enum class AmxLayout { kRows, kColumns, kTiles, kTilesOfTranspose };
struct AmxA {
  const uint16_t* data;
  int ld;
  AmxLayout layout;
  float* room;
};

// Where A[m, k] lies in A [M, K] packed in the tiles' order, in bf16 values, for k a multiple
// of 32 (the 31 values after it in A's row follow it): per 32 rows and 32 of K, 32 rows of 32.
inline size_t amx_tiles_index(int m, int k, int K) {
  return ((static_cast<size_t>(m / 32) * (K / 32) + k / 32) * 32 + m % 32) * 32;
}

// Where C goes: its columns in parts side by side, part i (columns [start, start + width[i]))
// at out[i] with rows ld[i] apart; widths multiples of 32. One part is a plain matrix; several
// are sibling layers' outputs, each in its own buffer (Llama's q | k | v, gate | up).
// paired: two parts of one width whose columns go together (gate | up, for SwiGLU): the
// kernel computes part 0's columns and then the same columns of part 1 before it moves on,
// and the epilogue's columns (below) are part 0's, the same columns of part 1 being final too.
struct AmxC {
  static constexpr int kMaxParts = 4;
  int count = 0;
  float* out[kMaxParts] = {};
  int width[kMaxParts] = {}, ld[kMaxParts] = {};
  bool paired = false;
};
// C as one [M, N] matrix, rows ldc apart.
AmxC amx_c(float* c, int ldc, int N);

// Work on C's values right after the kernel wrote them, while they are still in the writing
// core's caches (a GELU after the product, say): apply(context, m0, m1, n0, n1) for rows
// [m0, m1) and columns [n0, n1) of C (C's columns, across its parts), called by the thread
// that wrote them, once they are final. Null apply: none.
// reads (may be null): a matrix laid out as C's columns, rows ld floats apart, that apply
// reads (a residual); the kernel asks for its lines of each block of C while it computes the
// block, as it does for C's own. (Asking for an output that apply writes, GELU's, cost more
// than it saved: 10.5-10.9 vs 11.6-11.9 ms a step of small's c_fc.)
struct AmxEpilogue {
  void (*apply)(const void* context, int m0, int m1, int n0, int n1) = nullptr;
  const void* context = nullptr;
  const float* reads = nullptr;
  size_t ld = 0;
};

// The run of K that amx_gemm's passes over B's columns multiply over, for `threads` threads:
// all of K, unless streaming each thread's share of A once per pass (passes of 1 MiB of B)
// would move clearly more than splitting K into chunks short enough that one pass covers every
// column: A's share then streams once and B once, and C's share goes to memory and back
// between chunks. That is the case of a huge K with a narrow C: the tied classifier's dout W
// at gpt2-124m (K = 50304, N = 768), where A's share would stream 24 times.
int amx_k_chunk(int M, int N, int K, int threads);

// C = A B + bias (bias, N values, may be null), B from an amx_pack_b*: C[m, n] = sum_k A[m, k]
// B[k, n] + bias[n], then `after` on each block of C. Requires amx_tiles_available(),
// amx_gemm_fits(M, N, K) and c's widths summing to N.
// k_chunk: the run of K per pass, a multiple of 32 (0: amx_k_chunk's; paired parts always run
// all of K). The bits do not depend on it: each element's sum runs through the same tile
// instructions in the same order, held in fp32 in memory between chunks (exact).
void amx_gemm(const AmxC& c, const AmxA& a, const float* b_packed, const float* bias, int M, int N,
              int K, const AmxEpilogue& after = {}, int k_chunk = 0);

}  // namespace forge::kernels::cpu
