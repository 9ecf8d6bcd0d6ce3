// torch-cpu token + position embeddings (PyTorch 1.13.1 CPU fp32).
#pragma once

#include <cstdint>

namespace forge::tcpu {

// wte(idx) + wpe(arange(T)) broadcast over the batch.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C);
// Scratch: ints for a stable bucket sort of the tokens, floats for one row.
int64_t embedding_backward_scratch_ints(int64_t B, int64_t T, int64_t V);
// dwte[v] += (0 + dout[i1] + dout[i2] + ...) over the positions i with tokens[i] == v, in
// position order (Embedding.cpp embedding_dense_backward_cpu, then AccumulateGrad adding it
// to the tied head's gradient); dwpe = dout summed over the batch (sum_to of the broadcast).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, int64_t V, int32_t* scratch_ints,
                        float* scratch_row);

}  // namespace forge::tcpu
