// Default implementations of the Llama-family ops of Numerics: the fp32 kernels of
// kernels/{rmsnorm,rope,swiglu,gqa_attention}.h, and the sibling linear layers (stacked where
// the profile gives room, else one by one). Every profile inherits them until it overrides an
// op with its own arithmetic (torch-cpu's bit-for-bit replica, bf16, CUDA). Also the fused
// ops' defaults, each the profile's own ops one after the other (linear then GELU; GELU's or
// SwiGLU's backward then the linear layers'; SwiGLU then the linear layer; gate | up, then
// that; a norm's backward then the residual's add; a linear layer then the residual's add).
#include "forge/core/error.h"
#include "forge/kernels/gqa_attention.h"
#include "forge/kernels/rmsnorm.h"
#include "forge/kernels/rope.h"
#include "forge/kernels/swiglu.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/stacked_linear.h"

namespace forge {

namespace k = kernels::cpu;

void Numerics::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                               int N, int C, float eps) {
  k::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}

void Numerics::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, int N, int C) {
  k::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}

void Numerics::linear_forward_siblings(std::initializer_list<float*> outs, float* saved,
                                       const float* inp,
                                       std::initializer_list<const float*> weights,
                                       std::initializer_list<int> widths, int N, int IC) {
  FORGE_CHECK(outs.size() == weights.size() && widths.size() == weights.size(),
              "linear_forward_siblings: {} outputs, {} weights, {} widths", outs.size(),
              weights.size(), widths.size());
  if (stacked_siblings_forward(*this, stacked_product_room(), outs, saved, inp, weights, widths, N,
                               IC))
    return;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (i == 0)
      linear_forward(outs.begin()[i], saved, inp, weights.begin()[i], nullptr, N, IC,
                     widths.begin()[i]);
    else
      linear_forward_same_input(outs.begin()[i], saved, inp, weights.begin()[i], nullptr, N, IC,
                                widths.begin()[i]);
  }
}

void Numerics::linear_backward_siblings(float* dinp, float* scratch,
                                        std::initializer_list<float*> dweights,
                                        std::initializer_list<const float*> douts, const float* inp,
                                        std::initializer_list<const float*> weights,
                                        const float* saved, std::initializer_list<int> widths,
                                        int N, int IC) {
  const size_t count = weights.size();
  FORGE_CHECK(
      dweights.size() == count && douts.size() == count && widths.size() == count && count > 0,
      "linear_backward_siblings: {} weight gradients, {} output gradients, {} weights, "
      "{} widths",
      dweights.size(), douts.size(), count, widths.size());
  if (stacked_siblings_backward(*this, stacked_product_room(), dinp, dweights, douts, inp, weights,
                                saved, widths, N, IC))
    return;
  for (size_t j = 0; j < count; ++j) {
    const size_t i = count - 1 - j;  // autograd reaches the last sibling first
    linear_backward(j == 0 ? dinp : scratch, dweights.begin()[i], nullptr, douts.begin()[i], inp,
                    weights.begin()[i], saved, N, IC, widths.begin()[i]);
    if (j > 0) add_inplace(dinp, scratch, static_cast<size_t>(N) * IC);
  }
}

void Numerics::swiglu_linear_forward(float* out, float* saved, float* act, const float* gate,
                                     const float* up, const float* weight, const float* residual,
                                     int N, int F, int OC) {
  swiglu_forward(act, gate, up, static_cast<size_t>(N) * F);
  linear_residual_forward(out, nullptr, saved, act, weight, nullptr, residual, N, F, OC);
}

void Numerics::swiglu_mlp_forward(float* out, float* gate, float* up, float* act,
                                  float* gate_up_saved, float* down_saved, const float* inp,
                                  const float* gate_w, const float* up_w, const float* down_w,
                                  const float* residual, int N, int C, int F) {
  linear_forward_siblings({gate, up}, gate_up_saved, inp, {gate_w, up_w}, {F, F}, N, C);
  swiglu_linear_forward(out, down_saved, act, gate, up, down_w, residual, N, F, C);
}

void Numerics::swiglu_linear_backward(float* dinp, float* scratch, float* dgate, float* dup,
                                      float* dgate_w, float* dup_w, const float* dact,
                                      const float* gate, const float* up, const float* inp,
                                      const float* gate_w, const float* up_w, const float* saved,
                                      int F, int N, int IC) {
  swiglu_backward(dgate, dup, dact, gate, up, static_cast<size_t>(N) * F);
  linear_backward_siblings(dinp, scratch, {dgate_w, dup_w}, {dgate, dup}, inp, {gate_w, up_w},
                           saved, {F, F}, N, IC);
}

void Numerics::gelu_linear_backward(float* dinp, float* dweight, float* dbias, float* dout,
                                    const float* dact, const float* out, const float* inp,
                                    const float* weight, const float* saved, int N, int IC,
                                    int OC) {
  gelu_backward(dout, out, dact, static_cast<size_t>(N) * OC);
  linear_backward(dinp, dweight, dbias, dout, inp, weight, saved, N, IC, OC);
}

void Numerics::linear_residual_forward(float* out, float* branch, float* saved, const float* inp,
                                       const float* weight, const float* bias,
                                       const float* residual, int N, int IC, int OC) {
  FORGE_CHECK(out != residual, "linear_residual_forward: the output is the residual");
  float* product = branch ? branch : out;
  linear_forward(product, saved, inp, weight, bias, N, IC, OC);
  add(out, residual, product, static_cast<size_t>(N) * OC);
}

void Numerics::linear_gelu_forward(float* out, float* act, float* saved, const float* inp,
                                   const float* weight, const float* bias, int N, int IC, int OC) {
  linear_forward(out, saved, inp, weight, bias, N, IC, OC);
  gelu_forward(act, out, static_cast<size_t>(N) * OC);
}

void Numerics::layernorm_backward_residual(float* dinp, float* dweight, float* dbias,
                                           const float* dout, const float* inp, const float* weight,
                                           const float* mean, const float* rstd,
                                           const float* dresidual, int N, int C) {
  layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  add_inplace(dinp, dresidual, static_cast<size_t>(N) * C);
}

void Numerics::rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout,
                                         const float* inp, const float* weight, const float* rstd,
                                         const float* dresidual, int N, int C) {
  rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  add_inplace(dinp, dresidual, static_cast<size_t>(N) * C);
}

size_t Numerics::rope_table_floats(int T, int hd) const {
  return static_cast<size_t>(T) * static_cast<size_t>(hd / 2);
}

void Numerics::rope_tables(float* cos, float* sin, int T, int hd, double theta) {
  k::rope_tables(cos, sin, T, hd, theta);
}

void Numerics::rope_forward(float* out, const float* inp, const float* cos, const float* sin, int B,
                            int T, int n_heads, int hd) {
  k::rope_forward(out, inp, cos, sin, B, T, n_heads, hd);
}

void Numerics::rope_backward(float* dinp, const float* dout, const float* cos, const float* sin,
                             int B, int T, int n_heads, int hd) {
  k::rope_backward(dinp, dout, cos, sin, B, T, n_heads, hd);
}

void Numerics::swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
  k::swiglu_forward(out, gate, up, n);
}

void Numerics::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                               const float* up, size_t n) {
  k::swiglu_backward(dgate, dup, dout, gate, up, n);
}

size_t Numerics::gqa_attention_saved_floats(int B, int T, int NH, int KVH, int hd) const {
  return k::gqa_attention_saved_floats({B, T, NH, KVH, hd});
}

void Numerics::gqa_attention_forward(float* out, float* saved, const float* q, const float* kk,
                                     const float* v, int B, int T, int NH, int KVH, int hd) {
  k::gqa_attention_forward(out, saved, q, kk, v, {B, T, NH, KVH, hd});
}

void Numerics::gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                      const float* q, const float* kk, const float* v,
                                      const float* out, const float* saved, int B, int T, int NH,
                                      int KVH, int hd) {
  k::gqa_attention_backward(dq, dk, dv, dout, q, kk, v, out, saved, {B, T, NH, KVH, hd});
}

}  // namespace forge
