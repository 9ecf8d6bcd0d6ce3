// One place that sets how many threads the step uses: OpenMP (our kernels) and the BLAS
// (OpenBLAS keeps its own pool). Both must agree with the reference's torch.set_num_threads.
#pragma once

namespace forge {

// n <= 0 means all cores. Returns the count in effect.
int set_thread_count(int n);
int thread_count();

// Subnormal floats (below 2^-126) cost Intel cores a microcode assist per operation, and
// training makes them (most likely softmax probabilities and their gradients, as the
// softmaxes sharpen): on a Xeon (Emerald Rapids) a `small` step from a trained state ran
// markedly slower than one from the initial state until they were flushed to zero (README).
// Sets or clears flush-to-zero and denormals-are-zero (MXCSR's FTZ and DAZ) on this thread
// and on every thread of the OpenMP team; threads started later inherit this thread's
// setting. No-op off x86.
void set_subnormals_flushed(bool flush);
// Whether the profiles that may flush (`fast`, `bf16`) do: FORGE_FLUSH_SUBNORMALS=0 keeps
// subnormals, 1 or unset flushes them; anything else fails.
bool subnormal_flush_requested();

}  // namespace forge
