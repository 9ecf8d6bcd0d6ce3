// torch-cpu Llama ops. Each is the sequence of ATen ops reference/forge_ref/llama.py runs,
// with each op's arithmetic as PyTorch 1.13.1 does it on the CPU:
//  - RMSNorm: pow(2) (x*x), mean(-1) = cascade_sum's vectorized_inner_sum then div_ by C,
//    + eps (the float of the Python double), rsqrt (1/sqrt in both of its loops), two
//    broadcast products; backward = MulBackward0 x2, RsqrtBackward0
//    (-0.5 * grad * result.pow(3)), MeanBackward1 (grad.expand / C), PowBackward0
//    (grad * (2 * x)), the weight's grad reduced by sum_to over the rows, the row sum of
//    grad * x reduced by sum_to over the last dim;
//  - rope: the tables as rope_tables builds them (Sleef powf on pairs of vectors and glibc
//    powf on the rest, reciprocal, products, Sleef cos/sin on every element through
//    vml's map); x*cos + rotate_half(x)*sin as three rounded ops, and the backward's three
//    gradients into x summed in the order autograd's input buffer receives them;
//  - SwiGLU: Activation.cpp silu_kernel / silu_backward_kernel through cpu_kernel_vec (Sleef
//    expf on pairs of vectors, glibc expf on each chunk's tail), and the product's
//    MulBackward0;
//  - attention: as torch_cpu_attention.cpp, with repeat_kv's expand + reshape copies, the
//    operand layouts matmul then hands bmm, and ExpandBackward0's sum over the repeats.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_llama.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "forge/kernels/cpu/torch_cpu_attention.h"
#include "forge/kernels/cpu/torch_cpu_linear.h"
#include "forge/kernels/cpu/torch_cpu_reduce.h"
#include "forge/kernels/cpu/torch_cpu_vec.h"

namespace forge::tcpu {
namespace {

inline V vneg(V a) { return _mm256_xor_ps(_mm256_set1_ps(-0.0f), a); }

}  // namespace

// ---- RMSNorm -----------------------------------------------------------------------------

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps) {
  const int64_t n = N * C;
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * x[i];
  sum_lastdim(rstd, out, N, C);
  const float fc = static_cast<float>(C);
  for (int64_t r = 0; r < N; ++r) {
    const float variance = rstd[r] / fc;
    rstd[r] = 1.0f / std::sqrt(variance + eps);
  }
  for (int64_t r = 0; r < N; ++r) {
    const float rs = rstd[r];
    const float* xr = x + r * C;
    float* o = out + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float y = xr[c] * rs;
      o[c] = w[c] * y;
    }
  }
}

size_t rmsnorm_backward_scratch(int64_t N, int64_t C) { return static_cast<size_t>(N * C + N); }

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, const float* dres, int64_t N, int64_t C, float* scratch) {
  float* prod = scratch;
  float* drstd = scratch + N * C;
  // out = weight * y: weight's grad is (grad * y) summed over every row; y's is grad * weight.
  for (int64_t r = 0; r < N; ++r) {
    const float rs = rstd[r];
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      const float y = x[i] * rs;
      prod[i] = dout[i] * y;
      dinp[i] = dout[i] * w[c];  // dy, kept in dinp until the end
    }
  }
  sum_dim0(dw, prod, N, C);
  // y = x * rstd: rstd's grad is (dy * x) summed over the row.
  for (int64_t i = 0; i < N * C; ++i) prod[i] = dinp[i] * x[i];
  sum_lastdim(drstd, prod, N, C);
  const float fc = static_cast<float>(C);
  for (int64_t r = 0; r < N; ++r) {
    const float rs = rstd[r];
    const float cube = rs * rs * rs;
    // RsqrtBackward0, then the add of eps passes it on, then MeanBackward1 divides by C.
    const float dvar = (-0.5f * drstd[r]) * cube;
    const float dmean_elem = dvar / fc;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      const float direct = dinp[i] * rs;
      const float twice = 2.0f * x[i];
      const float via_var = dmean_elem * twice;  // PowBackward0
      // The mul's gradient reaches x's buffer before the pow's, after any residual's.
      dinp[i] = dres != nullptr ? (dres[i] + direct) + via_var : direct + via_var;
    }
  }
}

// ---- rotary embeddings -------------------------------------------------------------------

void rope_tables(float* cos, float* sin, int64_t T, int64_t hd, double theta) {
  const int64_t half = hd / 2;
  const float base = static_cast<float>(theta);  // torch.tensor(theta, dtype=float32)
  const float fhd = static_cast<float>(hd);
  // inv_freq = 1.0 / (theta ** (arange(0, hd, 2).float() / hd)); __rtruediv__ is
  // reciprocal() * 1.0. pow runs cpu_kernel_vec with the base broadcast: pairs of vectors
  // through Sleef, the rest through std::pow.
  std::vector<float> inv_freq(static_cast<size_t>(half));  // start-up only
  int64_t i = 0;
  for (; i + 2 * kVec <= half; i += 2 * kVec) {
    for (int64_t v = i; v < i + 2 * kVec; v += kVec) {
      alignas(32) float e[kVec];
      for (int64_t l = 0; l < kVec; ++l) e[l] = static_cast<float>(2 * (v + l)) / fhd;
      vstore(inv_freq.data() + v, Sleef_powf8_u10(vset1(base), _mm256_load_ps(e)));
    }
  }
  for (; i < half; ++i) inv_freq[i] = std::pow(base, static_cast<float>(2 * i) / fhd);
  for (i = 0; i < half; ++i) inv_freq[i] = (1.0f / inv_freq[i]) * 1.0f;
  // emb = cat((freqs, freqs), -1) with freqs = pos * inv_freq, then emb.cos() and emb.sin():
  // vml's map over the flattened [T, hd] table in at::parallel_for chunks (grain 2048), Sleef
  // on each vector counted from its chunk's start. Sleef switches every lane of a vector to
  // its wide-range reduction when one lane's angle is large (over 125), which can move the
  // last bit of the others: the grouping, hence T and the layout, is part of the value.
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(t);
    for (int64_t j = 0; j < hd; ++j) cos[t * hd + j] = pos * inv_freq[j % half];
  }
  parallel_for(0, T * hd, 2048, [&](int64_t b, int64_t e, int) {
    map([](V a) { return Sleef_sinf8_u10(a); }, sin + b, cos + b, e - b);
    map([](V a) { return Sleef_cosf8_u10(a); }, cos + b, cos + b, e - b);
  });
}

void rope_forward(float* out, const float* x, const float* cos, const float* sin, int64_t B,
                  int64_t T, int64_t H, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* c = cos + t * hd;
      const float* s = sin + t * hd;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = ((b * T + t) * H + h) * hd;
        const float* xi = x + off;
        float* o = out + off;
        // x * cos, rotate_half(x) * sin, then their sum: three rounded tensor ops.
        for (int64_t j = 0; j < half; ++j) {
          const float a = xi[j] * c[j];
          const float r = -xi[j + half] * s[j];
          o[j] = a + r;
        }
        for (int64_t j = half; j < hd; ++j) {
          const float a = xi[j] * c[j];
          const float r = xi[j - half] * s[j];
          o[j] = a + r;
        }
      }
    }
}

void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int64_t B,
                   int64_t T, int64_t H, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* c = cos + t * hd;
      const float* s = sin + t * hd;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = ((b * T + t) * H + h) * hd;
        const float* g = dout + off;
        float* d = dinp + off;
        // x's buffer receives, in this order: the slice x[..., :half] (its grad padded with
        // zeros), the slice x[..., half:] (negated, zero-padded), then x * cos. Adding the
        // padding zero turns a -0 into +0, which the last sum can see.
        for (int64_t j = 0; j < half; ++j) {
          const float rot = g[j + half] * s[j + half] + 0.0f;
          d[j] = rot + g[j] * c[j];
        }
        for (int64_t j = half; j < hd; ++j) {
          const float rot = 0.0f + -(g[j - half] * s[j - half]);
          d[j] = rot + g[j] * c[j];
        }
      }
    }
}

// ---- SwiGLU ------------------------------------------------------------------------------

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  const V one = vset1(1.0f);
  // silu over the tensor, then the product (exactly rounded whichever loop computes it).
  elementwise(
      n, kGrainSize,
      [&](int64_t i) {
        const V x = vload(gate + i);
        const V silu = vdiv(x, vadd(one, vexp(vneg(x))));
        vstore(out + i, vmul(silu, vload(up + i)));
      },
      [&](int64_t i) {
        const float x = gate[i];
        const float silu = x / (1.0f + std::exp(-x));
        out[i] = silu * up[i];
      });
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  const V one = vset1(1.0f);
  // MulBackward0: dup = grad * silu(gate) (silu recomputed with the forward's chunks),
  // dsilu = grad * up; then silu_backward_kernel, whose 1 + x * (1 - sigmoid) the build
  // contracts into one FMA in both loops.
  elementwise(
      n, kGrainSize,
      [&](int64_t i) {
        const V x = vload(gate + i), dy = vload(dout + i);
        const V e = vexp(vneg(x));
        const V silu = vdiv(x, vadd(one, e));
        vstore(dup + i, vmul(dy, silu));
        const V dsilu = vmul(dy, vload(up + i));
        const V sig = vdiv(one, vadd(one, e));
        vstore(dgate + i, vmul(vmul(dsilu, sig), vfma(x, vsub(one, sig), one)));
      },
      [&](int64_t i) {
        const float x = gate[i], dy = dout[i];
        const float e = std::exp(-x);
        const float silu = x / (1.0f + e);
        dup[i] = dy * silu;
        const float dsilu = dy * up[i];
        const float sig = 1.0f / (1.0f + e);
        dgate[i] = dsilu * sig * std::fma(x, 1.0f - sig, 1.0f);
      });
}

// ---- grouped-query attention -------------------------------------------------------------

namespace {

float attention_scale(int64_t hd) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
}

struct GqaBuffers {
  float *qc, *kb, *vr, *y, *scores, *ds, *dqc, *dkt, *dvr;
};

GqaBuffers gqa_buffers(float* s, int64_t B, int64_t T, int64_t NH, int64_t hd) {
  const int64_t act = B * NH * T * hd, att = B * NH * T * T;
  GqaBuffers g;
  g.qc = s;
  g.kb = g.qc + act;
  g.vr = g.kb + act;
  g.y = g.vr + act;
  g.scores = g.y + act;
  g.ds = g.scores + att;
  g.dqc = g.ds + att;
  g.dkt = g.dqc + act;
  g.dvr = g.dkt + act;
  return g;
}

struct GqaOperands {
  BatchView q, kt, v;
};

// q, k^T and v as matmul hands them to bmm. q ([B, NH, T, hd], strides (T*NH*hd, hd, NH*hd,
// 1)) is a view where the heads fold into the batch (B == 1 or NH == 1), else copied to
// [B*NH, T, hd]. repeat_kv's expand + reshape copies k and v into contiguous [B, NH, T, hd]
// when there are repeats of several kv heads, and then k^T is a view of that copy; with one
// kv head it is a view with head stride 0, and without repeats there is nothing to repeat:
// then k^T and v fold like q (as views, or copied to [B*NH, hd, T] and [B*NH, T, hd]).
GqaOperands gqa_operands(const GqaBuffers& g, const float* q, const float* k, const float* v,
                         int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t hd) {
  const int64_t n_rep = NH / KVH;
  const bool repeat_copies = n_rep > 1 && KVH > 1;
  const std::optional<int64_t> q_bs = folded_batch_stride(B, T * NH * hd, NH, hd);
  std::optional<int64_t> kv_bs;
  GqaOperands x;
  x.q = q_bs ? BatchView{q, *q_bs, NH * hd, 1} : contiguous_batches(g.qc, T, hd);
  if (repeat_copies) {
    x.kt = transposed(contiguous_batches(g.kb, T, hd));
    x.v = contiguous_batches(g.vr, T, hd);
  } else if ((kv_bs = folded_batch_stride(B, T * KVH * hd, NH, n_rep > 1 ? 0 : hd))) {
    x.kt = {k, *kv_bs, 1, KVH * hd};
    x.v = {v, *kv_bs, KVH * hd, 1};
  } else {
    x.kt = contiguous_batches(g.kb, hd, T);
    x.v = contiguous_batches(g.vr, T, hd);
  }
  // Copies over (b, h, t, d) for q; over (b, kv head, repeat, t, d) for k and v, the repeat
  // index stride 0 as in repeat_kv's expand.
  if (!q_bs) {
    const HeadStrides st = head_strides(T, NH * hd, NH, hd);
    copy_strided(g.qc, st.heads, q, st.rows, {B, NH, T, hd});
  }
  if (kv_bs) return x;
  const int64_t heads[] = {NH * T * hd, n_rep * T * hd, T * hd, hd, 1};
  const int64_t transposed_heads[] = {NH * hd * T, n_rep * hd * T, hd * T, 1, T};
  const int64_t kv[] = {T * KVH * hd, hd, 0, KVH * hd, 1};
  const int64_t kv_sizes[] = {B, KVH, n_rep, T, hd};
  copy_strided(g.kb, repeat_copies ? heads : transposed_heads, k, kv, kv_sizes);
  copy_strided(g.vr, heads, v, kv, kv_sizes);
  return x;
}

}  // namespace

size_t gqa_attention_scratch_floats(int64_t B, int64_t T, int64_t NH, int64_t hd) {
  return static_cast<size_t>(7 * B * NH * T * hd + 2 * B * NH * T * T);
}

void gqa_attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                           int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t hd,
                           float* scratch) {
  const int64_t BH = B * NH;
  const GqaBuffers g = gqa_buffers(scratch, B, T, NH, hd);
  const GqaOperands x = gqa_operands(g, q, k, v, B, T, NH, KVH, hd);
  bmm(g.scores, x.q, x.kt, BH, T, hd, T);
  // * scale, then masked_fill(mask == 0, -inf), then softmax.
  const float scale = attention_scale(hd);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      float* row = g.scores + (bh * T + i) * T;
      for (int64_t j = 0; j < T; ++j) row[j] = j > i ? ninf : row[j] * scale;
    }
  softmax_lastdim(probs, g.scores, BH * T, T);
  bmm(g.y, contiguous_batches(probs, T, T), x.v, BH, T, T, hd);
  attention_output_rows(out, g.y, B, T, NH, hd);  // .view(B, T, NH * hd)
}

void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* probs, int64_t B,
                            int64_t T, int64_t NH, int64_t KVH, int64_t hd, float* scratch) {
  const int64_t BH = B * NH, n_rep = NH / KVH;
  const GqaBuffers g = gqa_buffers(scratch, B, T, NH, hd);
  const GqaOperands x = gqa_operands(g, q, k, v, B, T, NH, KVH, hd);
  const BatchView dy = attention_output_gradient(g.y, dout, B, T, NH, hd);
  const BatchView att = contiguous_batches(probs, T, T);
  // y = att @ v: datt = dy.bmm(v^T), dv = att^T.bmm(dy)
  bmm(g.scores, dy, transposed(x.v), BH, T, hd, T);
  bmm(g.dvr, transposed(att), dy, BH, T, T, hd);
  softmax_backward_lastdim(g.ds, g.scores, probs, BH * T, T);
  // masked_fill backward writes +0 where the mask hid the score; then grad * scale.
  const float scale = attention_scale(hd);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      float* row = g.ds + (bh * T + i) * T;
      for (int64_t j = 0; j < T; ++j) row[j] = j > i ? 0.0f : row[j] * scale;
    }
  // scores = q @ k^T: dq = dS.bmm((k^T)^T), dk^T = q^T.bmm(dS).
  const BatchView ds = contiguous_batches(g.ds, T, T);
  bmm(g.dqc, ds, transposed(x.kt), BH, T, T, hd);
  bmm(g.dkt, transposed(x.q), ds, BH, hd, T, T);
  const HeadStrides qs = head_strides(T, NH * hd, NH, hd);
  copy_strided(dq, qs.rows, g.dqc, qs.heads, {B, NH, T, hd});
  // Without repeats there is no expand: the grads are only copied back to [B, T, KVH, hd].
  if (n_rep == 1) {
    const HeadStrides ks = head_strides(T, KVH * hd, KVH, hd);
    copy_strided(dk, ks.rows, g.dkt, ks.transposed_heads, {B, KVH, T, hd});
    copy_strided(dv, ks.rows, g.dvr, ks.heads, {B, KVH, T, hd});
    return;
  }
  // repeat_kv's ExpandBackward0: sum over the n_rep copies, from the zero-filled output in
  // repeat order (every branch of cascade_sum adds up to 4 rows that way).
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t gk = 0; gk < KVH; ++gk)
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t bh0 = b * NH + gk * n_rep;
          float sk = 0.0f, sv = 0.0f;
          for (int64_t r = 0; r < n_rep; ++r) {
            sk += g.dkt[((bh0 + r) * hd + d) * T + t];
            sv += g.dvr[((bh0 + r) * T + t) * hd + d];
          }
          dk[((b * T + t) * KVH + gk) * hd + d] = sk;
          dv[((b * T + t) * KVH + gk) * hd + d] = sv;
        }
}

}  // namespace forge::tcpu
