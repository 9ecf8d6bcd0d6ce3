// One place that sets how many threads the step uses: OpenMP (our kernels) and the BLAS
// (OpenBLAS keeps its own pool). Both must agree with the reference's torch.set_num_threads.
#pragma once

namespace forge {

// n <= 0 means all cores. Returns the count in effect.
int set_thread_count(int n);
int thread_count();

}  // namespace forge
