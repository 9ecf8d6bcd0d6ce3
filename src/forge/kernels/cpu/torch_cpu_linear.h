// torch-cpu linear layers and plain matrix products: the exact system-BLAS sgemm calls that
// PyTorch 1.13.1 makes for F.linear / mm / bmm on fp32 CPU tensors, and the sum
// over rows that autograd uses for a broadcast bias.
#pragma once

#include <cstdint>
#include <optional>

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

// A [batch, rows, cols] operand as at::bmm receives it: element (i, r, c) at
// data[i * batch_stride + r * row_stride + c * col_stride]. matmul hands bmm a view where its
// reshape can fold the heads into the batch without a copy, and the layout is part of the
// bits: it sets sgemm's transpose flags, and OpenBLAS's AVX-512 sgemm (measured on Zen 4)
// gives the same product other bits under other flags.
struct BatchView {
  const float* data;
  int64_t batch_stride, row_stride, col_stride;
};

inline BatchView contiguous_batches(const float* p, int64_t rows, int64_t cols) {
  return {p, rows * cols, cols, 1};
}
// The view of the batches' transposes (torch's transpose(1, 2): strides swapped).
inline BatchView transposed(BatchView v) {
  return {v.data, v.batch_stride, v.col_stride, v.row_stride};
}

// dst[i . dst_strides] = src[i . src_strides] for every index i over sizes (1 to 5
// dimensions): the element copy behind torch's .contiguous(), the copies reshape makes, and
// cat/split into strided slices. Copies are exact, so one routine serves every layout the
// attention ops move between.
void copy_strided(float* dst, const int64_t* dst_strides, const float* src,
                  const int64_t* src_strides, const int64_t* sizes, size_t dims);
template <size_t N>
void copy_strided(float* dst, const int64_t (&dst_strides)[N], const float* src,
                  const int64_t (&src_strides)[N], const int64_t (&sizes)[N]) {
  static_assert(N >= 1 && N <= 5, "copy_strided takes 1 to 5 dimensions");
  copy_strided(dst, dst_strides, src, src_strides, sizes, N);
}

// Strides over (b, h, t, d) of H heads of width hd in the three layouts the attention ops
// copy between: columns [h * hd, (h + 1) * hd) of [B, T, row] rows (a projection's output;
// q, k or v of qkv with row = 3C), contiguous heads [B*H, T, hd], transposed heads
// [B*H, hd, T].
struct HeadStrides {
  int64_t rows[4], heads[4], transposed_heads[4];
};
inline HeadStrides head_strides(int64_t T, int64_t row, int64_t H, int64_t hd) {
  return {{T * row, hd, row, 1}, {H * T * hd, T * hd, hd, 1}, {H * hd * T, hd * T, 1, T}};
}

// matmul's reshape of a [B, H, rows, cols] tensor with strides (sb, sh, ...) into
// [B * H, rows, cols]: the batch stride of the view computeStride finds (TensorUtils.cpp),
// or nullopt where there is none and reshape copies into a contiguous tensor.
std::optional<int64_t> folded_batch_stride(int64_t B, int64_t sb, int64_t H, int64_t sh);

// c (contiguous [batch, m, n]) = a[i] (m x k) @ b[i] (k x n) for each i, as at::bmm
// (LinearAlgebra.cpp bmm_out_or_baddbmm_): a naive loop when m*n*k < 400, else one
// addmm_impl_cpu_ per batch on the operands' own strides.
void bmm(float* c, BatchView a, BatchView b, int64_t batch, int64_t m, int64_t k, int64_t n);

}  // namespace forge::tcpu
