// Software prefetch for passes that walk a few columns of many rows: a run of a few cache
// lines a row, the rows a whole row apart, is too little of a stream for the hardware
// prefetchers (the column passes of the bias, LayerNorm and RMSNorm parameter gradients).
#pragma once

#include <cstddef>
#include <type_traits>

namespace forge::kernels::cpu {

// Rows ahead of the one in hand whose columns are asked for.
inline constexpr int kPrefetchRowsAhead = 8;

// Asks for columns [c0, c1) of row n + kPrefetchRowsAhead of each [N, C] float matrix given,
// when there is such a row: one request per 16 floats, a 64-byte line.
template <typename... Rows>
requires(std::is_same_v<Rows, float>&&...) inline void prefetch_rows_ahead(
    int n, int N, int C, int c0, int c1, const Rows*... matrices) {
  if (n + kPrefetchRowsAhead >= N) return;
  const size_t row = static_cast<size_t>(n + kPrefetchRowsAhead) * C;
  for (int c = c0; c < c1; c += 16) (__builtin_prefetch(matrices + row + c), ...);
}

}  // namespace forge::kernels::cpu
