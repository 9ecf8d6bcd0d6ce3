#include "forge/numerics/timed.h"

#include <chrono>
#include <utility>

namespace forge {

double& TimedNumerics::entry(std::map<std::string, double, std::less<>>& totals,
                             std::string_view op) {
  const auto it = totals.find(op);
  return it != totals.end() ? it->second : totals.emplace(op, 0.0).first->second;
}

template <typename F>
auto TimedNumerics::timed(const char* op, F&& f) {
  struct Stop {
    double& total;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Stop() {
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } stop{entry(seconds_, op)};
  return f();
}

template <typename F>
auto TimedNumerics::timed_gemm(const char* op, double flops, F&& f) {
  entry(gemm_flops_, op) += flops;
  return timed(op, std::forward<F>(f));
}

namespace {
// x W^T of N rows by a weight [OC, IC]: 2 N IC OC operations; a backward is two such products
// (dinp = dout W, dweight = dout^T x), or one without dinp.
double product_flops(int N, int IC, int OC) { return 2.0 * N * IC * OC; }
double backward_flops(const float* dinp, int N, int IC, int OC) {
  return (dinp ? 2 : 1) * product_flops(N, IC, OC);
}
int total_width(std::initializer_list<int> widths) {
  int total = 0;
  for (int w : widths) total += w;
  return total;
}
}  // namespace

void TimedNumerics::embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                      const float* wpe, int B, int T, int C) {
  timed("embedding fwd", [&] { inner_->embedding_forward(out, tokens, wte, wpe, B, T, C); });
}
void TimedNumerics::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                       const int32_t* tokens, int B, int T, int C) {
  timed("embedding bwd", [&] { inner_->embedding_backward(dwte, dwpe, dout, tokens, B, T, C); });
}
void TimedNumerics::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                      const float* w, const float* b, int N, int C, float eps) {
  timed("layernorm fwd", [&] { inner_->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps); });
}
void TimedNumerics::layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                       const float* inp, const float* w, const float* mean,
                                       const float* rstd, int N, int C) {
  timed("layernorm bwd",
        [&] { inner_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
}
void TimedNumerics::layernorm_backward_residual(float* dinp, float* dw, float* db,
                                                const float* dout, const float* inp, const float* w,
                                                const float* mean, const float* rstd,
                                                const float* dres, int N, int C) {
  timed("layernorm bwd", [&] {
    inner_->layernorm_backward_residual(dinp, dw, db, dout, inp, w, mean, rstd, dres, N, C);
  });
}
void TimedNumerics::linear_forward(float* out, float* saved, const float* inp, const float* w,
                                   const float* b, int N, int IC, int OC) {
  timed_gemm(OC > 4 * IC ? "lm head fwd" : "linear fwd", product_flops(N, IC, OC),
             [&] { inner_->linear_forward(out, saved, inp, w, b, N, IC, OC); });
}
void TimedNumerics::linear_forward_same_input(float* out, float* saved, const float* inp,
                                              const float* w, const float* b, int N, int IC,
                                              int OC) {
  timed_gemm(OC > 4 * IC ? "lm head fwd" : "linear fwd", product_flops(N, IC, OC),
             [&] { inner_->linear_forward_same_input(out, saved, inp, w, b, N, IC, OC); });
}
void TimedNumerics::linear_backward(float* dinp, float* dw, float* db, const float* dout,
                                    const float* inp, const float* w, const float* saved, int N,
                                    int IC, int OC) {
  timed_gemm(OC > 4 * IC ? "lm head bwd" : "linear bwd", backward_flops(dinp, N, IC, OC),
             [&] { inner_->linear_backward(dinp, dw, db, dout, inp, w, saved, N, IC, OC); });
}
// Fused, one op of its own; else the default's linear and add, each timed as itself.
void TimedNumerics::linear_residual_forward(float* out, float* branch, float* saved,
                                            const float* inp, const float* w, const float* b,
                                            const float* residual, int N, int IC, int OC) {
  if (branch || !inner_->fuses_linear_residual_forward(N, IC, OC))
    return Numerics::linear_residual_forward(out, branch, saved, inp, w, b, residual, N, IC, OC);
  timed_gemm("linear + residual add fwd", product_flops(N, IC, OC), [&] {
    inner_->linear_residual_forward(out, nullptr, saved, inp, w, b, residual, N, IC, OC);
  });
}
// Likewise for the linear layer and its GELU.
void TimedNumerics::linear_gelu_forward(float* out, float* act, float* saved, const float* inp,
                                        const float* w, const float* b, int N, int IC, int OC) {
  if (!inner_->fuses_linear_gelu_forward(N, IC, OC))
    return Numerics::linear_gelu_forward(out, act, saved, inp, w, b, N, IC, OC);
  timed_gemm("linear + gelu fwd", product_flops(N, IC, OC),
             [&] { inner_->linear_gelu_forward(out, act, saved, inp, w, b, N, IC, OC); });
}
// Likewise for GELU's backward and c_fc's.
void TimedNumerics::gelu_linear_backward(float* dinp, float* dw, float* db, float* dout,
                                         const float* dact, const float* out, const float* inp,
                                         const float* w, const float* saved, int N, int IC,
                                         int OC) {
  if (!inner_->fuses_gelu_linear_backward(N, IC, OC))
    return Numerics::gelu_linear_backward(dinp, dw, db, dout, dact, out, inp, w, saved, N, IC, OC);
  timed_gemm("gelu + linear bwd", backward_flops(dinp, N, IC, OC), [&] {
    inner_->gelu_linear_backward(dinp, dw, db, dout, dact, out, inp, w, saved, N, IC, OC);
  });
}
// Likewise for SwiGLU and the linear layer after it (forward) or before it (backward).
void TimedNumerics::swiglu_linear_forward(float* out, float* saved, float* act, const float* gate,
                                          const float* up, const float* w, const float* residual,
                                          int N, int F, int OC) {
  if (!inner_->fuses_swiglu_linear_forward(N, F, OC))
    return Numerics::swiglu_linear_forward(out, saved, act, gate, up, w, residual, N, F, OC);
  timed_gemm(residual ? "swiglu + linear + residual add fwd" : "swiglu + linear fwd",
             product_flops(N, F, OC), [&] {
               inner_->swiglu_linear_forward(out, saved, act, gate, up, w, residual, N, F, OC);
             });
}
void TimedNumerics::swiglu_mlp_forward(float* out, float* gate, float* up, float* act,
                                       float* gate_up_saved, float* down_saved, const float* inp,
                                       const float* gate_w, const float* up_w, const float* down_w,
                                       const float* residual, int N, int C, int F) {
  if (!inner_->fuses_swiglu_mlp_forward(gate_w, up_w, N, C, F))
    return Numerics::swiglu_mlp_forward(out, gate, up, act, gate_up_saved, down_saved, inp, gate_w,
                                        up_w, down_w, residual, N, C, F);
  timed_gemm("gate & up + swiglu + down + residual add fwd",
             product_flops(N, C, 2 * F) + product_flops(N, F, C), [&] {
               inner_->swiglu_mlp_forward(out, gate, up, act, gate_up_saved, down_saved, inp,
                                          gate_w, up_w, down_w, residual, N, C, F);
             });
}
void TimedNumerics::swiglu_linear_backward(float* dinp, float* scratch, float* dgate, float* dup,
                                           float* dgate_w, float* dup_w, const float* dact,
                                           const float* gate, const float* up, const float* inp,
                                           const float* gate_w, const float* up_w,
                                           const float* saved, int F, int N, int IC) {
  if (!inner_->fuses_swiglu_linear_backward(gate_w, up_w, dgate_w, dup_w, F, N, IC))
    return Numerics::swiglu_linear_backward(dinp, scratch, dgate, dup, dgate_w, dup_w, dact, gate,
                                            up, inp, gate_w, up_w, saved, F, N, IC);
  timed_gemm("swiglu + linear bwd", backward_flops(dinp, N, IC, 2 * F), [&] {
    inner_->swiglu_linear_backward(dinp, scratch, dgate, dup, dgate_w, dup_w, dact, gate, up, inp,
                                   gate_w, up_w, saved, F, N, IC);
  });
}
void TimedNumerics::linear_forward_siblings(std::initializer_list<float*> outs, float* saved,
                                            const float* inp,
                                            std::initializer_list<const float*> weights,
                                            std::initializer_list<int> widths, int N, int IC) {
  timed_gemm("linear fwd", product_flops(N, IC, total_width(widths)),
             [&] { inner_->linear_forward_siblings(outs, saved, inp, weights, widths, N, IC); });
}
void TimedNumerics::linear_backward_siblings(float* dinp, float* scratch,
                                             std::initializer_list<float*> dweights,
                                             std::initializer_list<const float*> douts,
                                             const float* inp,
                                             std::initializer_list<const float*> weights,
                                             const float* saved, std::initializer_list<int> widths,
                                             int N, int IC) {
  timed_gemm("linear bwd", backward_flops(dinp, N, IC, total_width(widths)), [&] {
    inner_->linear_backward_siblings(dinp, scratch, dweights, douts, inp, weights, saved, widths, N,
                                     IC);
  });
}
void TimedNumerics::attention_forward(float* out, float* saved, const float* qkv, int B, int T,
                                      int C, int NH) {
  timed("attention fwd", [&] { inner_->attention_forward(out, saved, qkv, B, T, C, NH); });
}
void TimedNumerics::attention_backward(float* dqkv, const float* dout, const float* qkv,
                                       const float* out, const float* saved, int B, int T, int C,
                                       int NH) {
  timed("attention bwd",
        [&] { inner_->attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH); });
}
void TimedNumerics::gelu_forward(float* out, const float* inp, size_t n) {
  timed("gelu fwd", [&] { inner_->gelu_forward(out, inp, n); });
}
void TimedNumerics::gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  timed("gelu bwd", [&] { inner_->gelu_backward(dinp, inp, dout, n); });
}
void TimedNumerics::add(float* out, const float* a, const float* b, size_t n) {
  timed("residual add", [&] { inner_->add(out, a, b, n); });
}
void TimedNumerics::add_inplace(float* acc, const float* x, size_t n) {
  timed("residual add", [&] { inner_->add_inplace(acc, x, n); });
}
float TimedNumerics::cross_entropy_forward(float* saved, const float* logits,
                                           const int32_t* targets, int N, int V, int Vp) {
  return timed("cross-entropy fwd",
               [&] { return inner_->cross_entropy_forward(saved, logits, targets, N, V, Vp); });
}
void TimedNumerics::cross_entropy_backward(float* dlogits, const float* logits, const float* saved,
                                           const int32_t* targets, int N, int V, int Vp,
                                           float dloss) {
  timed("cross-entropy bwd",
        [&] { inner_->cross_entropy_backward(dlogits, logits, saved, targets, N, V, Vp, dloss); });
}
double TimedNumerics::optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) {
  return timed("clip + AdamW", [&] { return inner_->optimizer_step(params, count, hp); });
}

void TimedNumerics::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w,
                                    int N, int C, float eps) {
  timed("rmsnorm fwd", [&] { inner_->rmsnorm_forward(out, rstd, inp, w, N, C, eps); });
}
void TimedNumerics::rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp,
                                     const float* w, const float* rstd, int N, int C) {
  timed("rmsnorm bwd", [&] { inner_->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C); });
}
void TimedNumerics::rmsnorm_backward_residual(float* dinp, float* dw, const float* dout,
                                              const float* inp, const float* w, const float* rstd,
                                              const float* dres, int N, int C) {
  timed("rmsnorm bwd",
        [&] { inner_->rmsnorm_backward_residual(dinp, dw, dout, inp, w, rstd, dres, N, C); });
}
void TimedNumerics::rope_forward(float* out, const float* inp, const float* cos, const float* sin,
                                 int B, int T, int n_heads, int hd) {
  timed("rope fwd", [&] { inner_->rope_forward(out, inp, cos, sin, B, T, n_heads, hd); });
}
void TimedNumerics::rope_backward(float* dinp, const float* dout, const float* cos,
                                  const float* sin, int B, int T, int n_heads, int hd) {
  timed("rope bwd", [&] { inner_->rope_backward(dinp, dout, cos, sin, B, T, n_heads, hd); });
}
void TimedNumerics::swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
  timed("swiglu fwd", [&] { inner_->swiglu_forward(out, gate, up, n); });
}
void TimedNumerics::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                                    const float* up, size_t n) {
  timed("swiglu bwd", [&] { inner_->swiglu_backward(dgate, dup, dout, gate, up, n); });
}
void TimedNumerics::gqa_attention_forward(float* out, float* saved, const float* q, const float* k,
                                          const float* v, int B, int T, int NH, int KVH, int hd) {
  timed("attention fwd",
        [&] { inner_->gqa_attention_forward(out, saved, q, k, v, B, T, NH, KVH, hd); });
}
void TimedNumerics::gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                           const float* q, const float* k, const float* v,
                                           const float* out, const float* saved, int B, int T,
                                           int NH, int KVH, int hd) {
  timed("attention bwd", [&] {
    inner_->gqa_attention_backward(dq, dk, dv, dout, q, k, v, out, saved, B, T, NH, KVH, hd);
  });
}

}  // namespace forge
