// torch-cpu matrix products. The order of operations of a GEMM is the BLAS's, so the only
// way to get torch's bits is to make torch's BLAS call: same routine (sgemm_ of the system
// libblas.so.3), same transposes, same m/n/k, same leading dimensions, same beta. The call is
// derived, not hard-coded, by a port of the stride logic of
// aten/src/ATen/native/LinearAlgebra.cpp addmm_impl_cpu_ and CPUBlas.cpp gemm /
// normalize_last_dims, fed with the strides torch's tensors have at each call site.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_linear.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "forge/kernels/cpu/torch_cpu_reduce.h"
#include "forge/kernels/cpu/torch_cpu_vec.h"

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace forge::tcpu {
namespace {

// A strided 2-D view, as torch sees an operand of mm.
struct Mat {
  const float* data;
  int64_t size[2];
  int64_t stride[2];
};

Mat row_major(const float* p, int64_t rows, int64_t cols) { return {p, {rows, cols}, {cols, 1}}; }
// The transpose view of a row-major [rows, cols] buffer: sizes [cols, rows].
Mat transposed(const float* p, int64_t rows, int64_t cols) { return {p, {cols, rows}, {1, cols}}; }

// at::native::cpublas::gemm for float: normalize_last_dims, then sgemm_.
void blas_gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  if (n == 1) ldc = m;
  if (transa) {
    if (m == 1) lda = k;
  } else if (k == 1) {
    lda = m;
  }
  if (transb) {
    if (k == 1) ldb = n;
  } else if (n == 1) {
    ldb = k;
  }
  const char ta = transa ? 't' : 'n', tb = transb ? 't' : 'n';
  const int m_ = static_cast<int>(m), n_ = static_cast<int>(n), k_ = static_cast<int>(k);
  const int lda_ = static_cast<int>(lda), ldb_ = static_cast<int>(ldb),
            ldc_ = static_cast<int>(ldc);
  sgemm_(&ta, &tb, &m_, &n_, &k_, &alpha, a, &lda_, b, &ldb_, &beta, c, &ldc_);
}

// addmm_impl_cpu_(result, self, m1, m2, beta, alpha=1) for a contiguous row-major result
// [M, N] that already holds `self` when beta != 0.
void addmm_impl(float* result, int64_t M, int64_t N, Mat m1, Mat m2, float beta) {
  if (m1.size[1] == 0) throw std::logic_error("tcpu addmm: empty contraction");
  const int64_t rs[2] = {N, 1};
  const int64_t rsz[2] = {M, N};
  bool transpose_c;
  if (rs[0] == 1 && (rsz[1] == 1 || rs[1] >= std::max<int64_t>(1, rsz[0]))) {
    transpose_c = false;
  } else if (rs[1] == 1 && (rsz[0] == 1 || rs[0] >= std::max<int64_t>(1, rsz[1]))) {
    std::swap(m1, m2);
    transpose_c = true;
  } else {
    throw std::logic_error("tcpu addmm: result layout needs a copy");
  }
  const int64_t m = rsz[transpose_c ? 1 : 0];
  const int64_t n = rsz[transpose_c ? 0 : 1];
  const int64_t k = m1.size[transpose_c ? 0 : 1];
  const int i0 = transpose_c ? 1 : 0, i1 = transpose_c ? 0 : 1;

  bool transpose_a;
  if (m1.stride[i0] == 1 && m1.stride[i1] >= std::max<int64_t>(1, m)) {
    transpose_a = false;
  } else if (m1.stride[i1] == 1 && m1.stride[i0] >= std::max<int64_t>(1, k)) {
    transpose_a = true;
  } else {
    throw std::logic_error("tcpu addmm: operand a needs a copy");
  }
  bool transpose_b;
  if (m2.stride[i0] == 1 && m2.stride[i1] >= std::max<int64_t>(1, k)) {
    transpose_b = false;
  } else if (m2.stride[i1] == 1 && m2.stride[i0] >= std::max<int64_t>(1, n)) {
    transpose_b = true;
  } else {
    throw std::logic_error("tcpu addmm: operand b needs a copy");
  }
  const int64_t lda = m1.stride[(transpose_a == transpose_c) ? 1 : 0];
  const int64_t ldb = m2.stride[(transpose_b == transpose_c) ? 1 : 0];
  const int64_t ldc = rs[transpose_c ? 0 : 1];
  blas_gemm(transpose_a, transpose_b, m, n, k, 1.0f, m1.data, lda, m2.data, ldb, beta, result, ldc);
}

// baddbmm_cpu_kernel<float, is_bmm=true>: r = 0; r += s[i][k] * m[k][j] in k order. This
// file of ATen is built without -mfma, so the product is rounded before the add.
void bmm_naive(float* c, Mat a, Mat b, int64_t m, int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float r = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const float p =
            a.data[i * a.stride[0] + kk * a.stride[1]] * b.data[kk * b.stride[0] + j * b.stride[1]];
        r += p;
      }
      c[i * n + j] = r;
    }
}

}  // namespace

void set_blas_threads(int n) {
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

void linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N,
                    int64_t IC, int64_t OC) {
  if (bias != nullptr) {
    // addmm: result.copy_(self.expand({N, OC})), then beta = 1 onto it.
    for (int64_t r = 0; r < N; ++r)
      std::memcpy(out + r * OC, bias, static_cast<size_t>(OC) * sizeof(float));
    addmm_impl(out, N, OC, row_major(x, N, IC), transposed(w, OC, IC), 1.0f);
  } else {
    // matmul folds [B, T, IC] to [N, IC] and calls mm: addmm_impl_cpu_ with beta = 0.
    addmm_impl(out, N, OC, row_major(x, N, IC), transposed(w, OC, IC), 0.0f);
  }
}

void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* x,
                     const float* w, int64_t N, int64_t IC, int64_t OC) {
  // FunctionsManual.cpp mm_mat1_backward: mat1 (x) is row-major -> grad.mm(mat2.t()), and
  // mat2.t() of the W.t() view is W itself.
  if (dinp != nullptr) addmm_impl(dinp, N, IC, row_major(dout, N, OC), row_major(w, OC, IC), 0.0f);
  // mm_mat2_backward: mat2 = W.t() is column-major -> grad.t().mm(mat1).t(); the inner mm
  // writes a row-major [OC, IC], which is dW in W's own layout.
  if (dw != nullptr) addmm_impl(dw, OC, IC, transposed(dout, N, OC), row_major(x, N, IC), 0.0f);
  // addmm's self was broadcast from [OC]: the engine's validate_outputs sum_to()s the grad.
  if (dbias != nullptr) sum_dim0(dbias, dout, N, OC);
}

std::optional<int64_t> folded_batch_stride(int64_t B, int64_t sb, int64_t H, int64_t sh) {
  if (H == 1) return sb;  // a dimension of size 1 never breaks a chunk of computeStride
  if (B == 1 || sb == H * sh) return sh;
  return std::nullopt;
}

void bmm(float* c, BatchView a, BatchView b, int64_t batch, int64_t m, int64_t k, int64_t n) {
  for (int64_t i = 0; i < batch; ++i) {
    const Mat am{a.data + i * a.batch_stride, {m, k}, {a.row_stride, a.col_stride}};
    const Mat bm{b.data + i * b.batch_stride, {k, n}, {b.row_stride, b.col_stride}};
    float* ci = c + i * m * n;
    if (k * m * n < 400)
      bmm_naive(ci, am, bm, m, k, n);
    else
      addmm_impl(ci, m, n, am, bm, 0.0f);
  }
}

void copy_strided(float* dst, const int64_t* dst_strides, const float* src,
                  const int64_t* src_strides, const int64_t* sizes, size_t dims) {
  if (std::any_of(sizes, sizes + dims, [](int64_t n) { return n <= 0; })) return;
  int64_t index[5] = {};
  const size_t last = dims - 1;
  int64_t dst_at = 0, src_at = 0;
  while (true) {
    for (int64_t i = 0; i < sizes[last]; ++i)
      dst[dst_at + i * dst_strides[last]] = src[src_at + i * src_strides[last]];
    // The next index over the outer dimensions, as an odometer turns.
    size_t d = last;
    while (d-- > 0) {
      dst_at += dst_strides[d];
      src_at += src_strides[d];
      if (++index[d] < sizes[d]) break;
      dst_at -= dst_strides[d] * sizes[d];
      src_at -= src_strides[d] * sizes[d];
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

}  // namespace forge::tcpu
