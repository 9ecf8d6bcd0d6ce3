// Sums over the rows of a matrix, column by column, in double, rounded to fp32 once: the rule
// every parameter gradient that sums over the batch's rows follows (linear biases, LayerNorm's
// weight and bias, RMSNorm's weight; the token embedding's rows follow it in a loop of their
// own, kernels/embedding.h, over the positions sorted by token). Summed in fp32 over N rows,
// small's bias gradients were ten times as far from float64 as PyTorch's (whose reductions sum in
// cascades), enough on its first step to move a query bias with a gradient under AdamW's eps past
// the alignment gate's bound; LayerNorm's weight gradients twice as far.
//
// The team splits the columns, so nothing is shared and each column sums its rows in row order
// whatever the thread count: the bits do not depend on the team.
#pragma once

#include <algorithm>

#include "forge/kernels/cpu/prefetch.h"

namespace forge::kernels::cpu {

inline constexpr int kColumnChunk = 64;  // columns a thread sums at a time

// The loop itself, as an `omp for` inside the caller's parallel region, for S sums at once:
// for each chunk of columns [c0, c1), add_row(n, c0, c1, acc) is called for every row n in
// order, in the thread that owns the chunk, and adds row n's terms of column c to
// acc[s][c - c0] (double acc[S][kColumnChunk], zero at the start); then sums[s][c] = acc's
// value rounded to fp32.
template <int S, typename AddRow>
void team_column_sums(float* const (&sums)[S], int N, int C, AddRow&& add_row) {
  const int chunks = (C + kColumnChunk - 1) / kColumnChunk;
#pragma omp for schedule(static)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int c0 = chunk * kColumnChunk, c1 = std::min(C, c0 + kColumnChunk);
    double acc[S][kColumnChunk] = {};
    for (int n = 0; n < N; ++n) add_row(n, c0, c1, acc);
    for (int s = 0; s < S; ++s)
      for (int c = c0; c < c1; ++c) sums[s][c] = static_cast<float>(acc[s][c - c0]);
  }
}

// One sum, in a parallel region of its own, over values a kernel makes row by row rather than
// reads: row_values(n, o0, o1, buf) returns columns [o0, o1) of row n (it may make them in
// buf, room for kColumnChunk floats, and return buf).
template <typename RowValues>
void column_sums_of(float* sums, int N, int OC, RowValues&& row_values) {
#pragma omp parallel
  {
    alignas(64) float buf[kColumnChunk];
    float* const out[1] = {sums};
    team_column_sums(out, N, OC, [&](int n, int o0, int o1, double(&acc)[1][kColumnChunk]) {
      const float* r = row_values(n, o0, o1, buf);
      for (int o = 0; o < o1 - o0; ++o) acc[0][o] += r[o];
    });
  }
}

// The sum of the rows of x[N, OC] (linear's bias gradient), for kernels that read those rows
// for more than the sum: row_chunk(n, o0, o1) runs on columns [o0, o1) of row n just before
// they are added, in the same thread.
template <typename RowChunk>
void column_sums(float* sums, const float* x, int N, int OC, RowChunk&& row_chunk) {
  column_sums_of(sums, N, OC, [&](int n, int o0, int o1, float*) {
    // (bf16's linear backward, which rounds dout into the AMX tiles in this loop, was faster
    // with the prefetch in 6 of 7 interleaved pairs on small, medians 61.1 vs 62.3 ms a step.)
    prefetch_rows_ahead(n, N, OC, o0, o1, x);
    row_chunk(n, o0, o1);
    return x + static_cast<size_t>(n) * OC + o0;
  });
}

}  // namespace forge::kernels::cpu
