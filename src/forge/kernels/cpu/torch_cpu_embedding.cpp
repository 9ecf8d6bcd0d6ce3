// torch-cpu embeddings, ported from PyTorch 1.13.1:
//  - forward: index_select rows (copies), then tok_emb + pos_emb broadcast (one add each);
//  - backward: Embedding.cpp embedding_dense_backward_cpu starts a zero [V, C] gradient and
//    add_stub()s each position's gradient row into its token's row in position order; the
//    tied weight's AccumulateGrad input buffer then adds that to the LM head's gradient (one
//    add, so either order gives the same bits). The position embedding's gradient is the
//    broadcast's sum_to over the batch (SumKernel.cpp), passed through an embedding backward
//    over arange(T), which adds it to zeros.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_embedding.h"

#include "forge/kernels/cpu/torch_cpu_reduce.h"

namespace forge::tcpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* e = wte + static_cast<int64_t>(tokens[b * T + t]) * C;
      const float* p = wpe + t * C;
      float* o = out + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
}

int64_t embedding_backward_scratch_ints(int64_t B, int64_t T, int64_t V) { return B * T + V + 1; }

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, int64_t V, int32_t* scratch_ints,
                        float* row) {
  const int64_t N = B * T;
  if (dwpe != nullptr) {
    sum_dim0(dwpe, dout, B, T * C);
    for (int64_t i = 0; i < T * C; ++i) dwpe[i] = 0.0f + dwpe[i];
  }
  if (dwte == nullptr) return;
  // A stable bucket sort of the positions by token keeps each row's additions in position
  // order without a [V, C] temporary.
  int32_t* start = scratch_ints;          // [V + 1]
  int32_t* order = scratch_ints + V + 1;  // [N]
  for (int64_t v = 0; v <= V; ++v) start[v] = 0;
  for (int64_t i = 0; i < N; ++i) ++start[tokens[i] + 1];
  for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
  for (int64_t i = 0; i < N; ++i) order[start[tokens[i]]++] = static_cast<int32_t>(i);
  // start[v] is now the end of bucket v; bucket v begins at start[v - 1] (0 for v == 0).
  for (int64_t v = 0; v < V; ++v) {
    const int64_t begin = v == 0 ? 0 : start[v - 1], end = start[v];
    float* w = dwte + v * C;
    if (begin == end) {
      for (int64_t c = 0; c < C; ++c) w[c] = w[c] + 0.0f;
      continue;
    }
    for (int64_t c = 0; c < C; ++c) row[c] = 0.0f;
    for (int64_t k = begin; k < end; ++k) {
      const float* g = dout + static_cast<int64_t>(order[k]) * C;
      for (int64_t c = 0; c < C; ++c) row[c] += g[c];
    }
    for (int64_t c = 0; c < C; ++c) w[c] = w[c] + row[c];
  }
}

}  // namespace forge::tcpu
