// torch-cpu attention: the op sequence reference/forge_ref/gpt2.py runs, with each op as
// PyTorch 1.13.1 computes it on the CPU:
//  - q @ k.transpose(-2, -1) and att @ v go through matmul's expand + reshape to
//    [B*NH, ...], then at::bmm (LinearAlgebra.cpp bmm_out_or_baddbmm_, see
//    torch_cpu_linear.cpp); the reshape copies the strided q, k^T and v views into
//    contiguous tensors unless the heads fold into the batch as a view (B == 1 or NH == 1),
//    and then bmm reads qkv in place;
//  - * (1/sqrt(hd)): mul by a wrapped Python double, i.e. by that double rounded to float;
//  - masked_fill(-inf), then cpu/SoftMaxKernel.cpp _vec_softmax_lastdim;
//  - backward: BmmBackward0 (grad.bmm(mat2^T), mat1^T.bmm(grad)),
//    _vec_host_softmax_backward_lastdim, masked_fill's zeros, the scale multiply.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_attention.h"

#include <cmath>
#include <limits>

#include "forge/kernels/cpu/torch_cpu_linear.h"
#include "forge/kernels/cpu/torch_cpu_vec.h"

namespace forge::tcpu {
namespace {

float attention_scale(int64_t hd) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
}

struct QkvOperands {
  BatchView q, kt, v;
};

// q, k^T and v as matmul hands them to bmm: views into qkv where the heads fold into the
// batch, else copies into the buffers q, kt, v.
QkvOperands qkv_operands(float* q, float* kt, float* v, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) {
  const int64_t hd = C / NH;
  // q's view [B, NH, T, hd] has strides (T * 3C, hd, 3C, 1); k's and v's the same.
  if (const auto bs = folded_batch_stride(B, T * 3 * C, NH, hd))
    return {{qkv, *bs, 3 * C, 1}, {qkv + C, *bs, 1, 3 * C}, {qkv + 2 * C, *bs, 3 * C, 1}};
  const HeadStrides st = head_strides(T, 3 * C, NH, hd);
  copy_strided(q, st.heads, qkv, st.rows, {B, NH, T, hd});
  copy_strided(kt, st.transposed_heads, qkv + C, st.rows, {B, NH, T, hd});
  copy_strided(v, st.heads, qkv + 2 * C, st.rows, {B, NH, T, hd});
  return {contiguous_batches(q, T, hd), contiguous_batches(kt, hd, T),
          contiguous_batches(v, T, hd)};
}

}  // namespace

BatchView attention_output_gradient(float* dy, const float* dout, int64_t B, int64_t T, int64_t NH,
                                    int64_t hd) {
  const int64_t C = NH * hd;
  if (const auto bs = folded_batch_stride(B, T * C, NH, hd)) return {dout, *bs, C, 1};
  const HeadStrides st = head_strides(T, C, NH, hd);
  copy_strided(dy, st.heads, dout, st.rows, {B, NH, T, hd});
  return contiguous_batches(dy, T, hd);
}

void attention_output_rows(float* out, const float* y, int64_t B, int64_t T, int64_t NH,
                           int64_t hd) {
  const int64_t C = NH * hd;
  const HeadStrides st = head_strides(T, C, NH, hd);
  copy_strided(out, st.rows, y, st.heads, {B, NH, T, hd});
}

size_t attention_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH) {
  // q, k^T, v, and one more [B*NH, T, hd] (y or dy); two [B*NH, T, T] (scores/dA, dS);
  // backward adds dq, dk^T, dv.
  return static_cast<size_t>(7 * B * T * C + 2 * B * NH * T * T);
}

void softmax_lastdim(float* out, const float* in, int64_t rows, int64_t dim) {
  const int64_t grain = std::max<int64_t>(kGrainSize / (16 * dim), 1);
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const float* x = in + i * dim;
      float* y = out + i * dim;
      const float max_input = reduce_all(MaxOp{}, x, dim);
      const V mv = vset1(max_input);
      map([&](V a) { return vexp(vsub(a, mv)); }, y, x, dim);
      float tmp_sum = reduce_all(AddOp{}, y, dim);
      tmp_sum = 1 / tmp_sum;
      const V sv = vset1(tmp_sum);
      map([&](V a) { return vmul(a, sv); }, y, y, dim);
    }
  });
}

void softmax_backward_lastdim(float* gin, const float* grad, const float* out, int64_t rows,
                              int64_t dim) {
  int64_t grain = kGrainSize / (16 * dim);
  if (grain < 1) grain = 1;
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const float* g = grad + i * dim;
      const float* o = out + i * dim;
      const float sum =
          map2_reduce_all([](V a, V b) { return vmul(a, b); },
                          [](V acc, V a, V b) { return vfma(a, b, acc); }, AddOp{}, g, o, dim);
      const V sv = vset1(sum);
      map2([&](V a, V b) { return vmul(vsub(a, sv), b); }, gin + i * dim, g, o, dim);
    }
  });
}

void attention_forward(float* out, float* probs, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* scratch) {
  const int64_t hd = C / NH, BH = B * NH;
  float* q = scratch;
  float* kt = q + B * T * C;
  float* v = kt + B * T * C;
  float* y = v + B * T * C;
  float* scores = y + B * T * C;
  const QkvOperands x = qkv_operands(q, kt, v, qkv, B, T, C, NH);
  bmm(scores, x.q, x.kt, BH, T, hd, T);
  // * scale, then masked_fill(mask == 0, -inf): each a separate elementwise pass in torch;
  // a product is correctly rounded whichever loop computes it.
  const float scale = attention_scale(hd);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      float* row = scores + (bh * T + i) * T;
      for (int64_t j = 0; j < T; ++j) row[j] = j > i ? ninf : row[j] * scale;
    }
  softmax_lastdim(probs, scores, BH * T, T);
  bmm(y, contiguous_batches(probs, T, T), x.v, BH, T, T, hd);
  attention_output_rows(out, y, B, T, NH, hd);  // .view(B, T, C)
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        int64_t B, int64_t T, int64_t C, int64_t NH, float* scratch) {
  const int64_t hd = C / NH, BH = B * NH;
  float* q = scratch;
  float* kt = q + B * T * C;
  float* v = kt + B * T * C;
  float* dy = v + B * T * C;
  float* dA = dy + B * T * C;
  float* dS = dA + BH * T * T;
  float* dq = dS + BH * T * T;
  float* dkt = dq + B * T * C;
  float* dv = dkt + B * T * C;
  const QkvOperands x = qkv_operands(q, kt, v, qkv, B, T, C, NH);
  const BatchView dyv = attention_output_gradient(dy, dout, B, T, NH, hd);
  const BatchView att = contiguous_batches(probs, T, T);
  // y = att @ v: dA = dy.bmm(v^T), dv = att^T.bmm(dy)
  bmm(dA, dyv, transposed(x.v), BH, T, hd, T);
  bmm(dv, transposed(att), dyv, BH, T, T, hd);
  softmax_backward_lastdim(dS, dA, probs, BH * T, T);
  // masked_fill backward writes +0 where the mask hid the score; then grad * scale.
  const float scale = attention_scale(hd);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      float* row = dS + (bh * T + i) * T;
      for (int64_t j = 0; j < T; ++j) row[j] = j > i ? 0.0f : row[j] * scale;
    }
  // scores = q @ k^T: dq = dS.bmm(kt^T), dkt = q^T.bmm(dS)
  bmm(dq, contiguous_batches(dS, T, T), transposed(x.kt), BH, T, T, hd);
  bmm(dkt, transposed(x.q), contiguous_batches(dS, T, T), BH, hd, T, T);
  // split backward: the three grads concatenated back into [B, T, 3C]
  const HeadStrides st = head_strides(T, 3 * C, NH, hd);
  copy_strided(dqkv, st.rows, dq, st.heads, {B, NH, T, hd});
  copy_strided(dqkv + C, st.rows, dkt, st.transposed_heads, {B, NH, T, hd});
  copy_strided(dqkv + 2 * C, st.rows, dv, st.heads, {B, NH, T, hd});
}

}  // namespace forge::tcpu
