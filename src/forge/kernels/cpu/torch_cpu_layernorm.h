// torch-cpu LayerNorm over the last dimension (PyTorch 1.13.1 CPU fp32).
#pragma once

#include <cstdint>

namespace forge::tcpu {

// aten/src/ATen/native/cpu/layer_norm_kernel.cpp LayerNormKernelImplInternal: Welford
// moments with a cascade (moments_utils.h RowwiseMoments), rstd = 1/sqrt(var + eps).
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int64_t N, int64_t C, float eps);

// floats of scratch layernorm_backward needs: torch's {2, threads, C} partial buffer.
int64_t layernorm_backward_scratch(int64_t C, int threads);
// LayerNormBackwardKernelImplInternal: per-thread partial dgamma/dbeta rows, then a sum over
// the threads' rows; dX with torch's a/b/c coefficients. dinp may be null.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                        float* scratch);

}  // namespace forge::tcpu
