// torch-cpu linear layers and plain matrix products: the exact system-BLAS sgemm calls that
// PyTorch 1.13.1 makes for F.linear / mm / bmm on contiguous fp32 CPU tensors, and the sum
// over rows that autograd uses for a broadcast bias.
#pragma once

#include <cstdint>

namespace forge::tcpu {

// OpenBLAS splits a GEMM's M and N among its threads, and its results depend on that split:
// the engine's OpenBLAS must run as many threads as the reference's (which reads
// OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, at load; torch.set_num_threads leaves it
// alone). Calls openblas_set_num_threads when the system BLAS is OpenBLAS.
void set_blas_threads(int n);

// F.linear(x, W, b) with x [N, IC] contiguous: at::addmm(b, x, W.t()) (bias != null) or
// x.mm(W.t()) through matmul's fold (bias == null). out [N, OC].
void linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N,
                    int64_t IC, int64_t OC);
// AddmmBackward / MmBackward: dinp = dout.mm(W), dW = (dout.t().mm(x)) (transposed back),
// dbias = dout.sum(0). Any of the outputs may be null.
void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* x,
                     const float* w, int64_t N, int64_t IC, int64_t OC);

// Batched products as at::bmm on contiguous [batch, ...] operands (LinearAlgebra.cpp
// bmm_out_or_baddbmm_): a naive loop when m*n*k < 400, else one addmm_impl_cpu_ per batch.
// The op names say which operands are transposed: nn = A[b] (m x k) @ B[b] (k x n),
// nt = A[b] (m x k) @ B[b]^T with B stored (n x k), tn = A[b]^T with A stored (k x m) @ B[b].
void bmm_nn(float* c, const float* a, const float* b, int64_t batch, int64_t m, int64_t k,
            int64_t n);
void bmm_nt(float* c, const float* a, const float* b, int64_t batch, int64_t m, int64_t k,
            int64_t n);
void bmm_tn(float* c, const float* a, const float* b, int64_t batch, int64_t m, int64_t k,
            int64_t n);

}  // namespace forge::tcpu
