// A Numerics that times another: every op is forwarded and its wall time added to a
// per-op total. `forge bench --breakdown` wraps the profile in it to show where a step's
// time goes, without touching the model code.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "forge/numerics/numerics.h"

namespace forge {

class TimedNumerics final : public Numerics {
 public:
  explicit TimedNumerics(std::unique_ptr<Numerics> inner) : inner_(std::move(inner)) {}
  // Puts a timer around `numerics` (which then owns it) and returns the timer.
  static TimedNumerics* wrap(std::unique_ptr<Numerics>& numerics) {
    auto timer = std::make_unique<TimedNumerics>(std::move(numerics));
    TimedNumerics* t = timer.get();
    numerics = std::move(timer);
    return t;
  }
  std::string name() const override { return inner_->name(); }
  std::string arithmetic() const override { return inner_->arithmetic(); }
  const char* matmul_dtype() const override { return inner_->matmul_dtype(); }
  bool flushes_subnormals() const override { return inner_->flushes_subnormals(); }
  void plan(const StepShape& s) override { inner_->plan(s); }
  // op name -> seconds, accumulated since the last reset(). An op's entry is made on its first
  // call; reset() zeroes the totals and keeps the entries, so that timed steps allocate nothing.
  const std::map<std::string, double, std::less<>>& seconds() const { return seconds_; }
  // op name -> the floating-point operations of its matrix products (2 per multiply-add), for
  // the ops that hold linear layers' GEMMs, accumulated likewise: with seconds(), the rate the
  // GEMMs reach inside the step, cold caches and fused epilogues included.
  const std::map<std::string, double, std::less<>>& gemm_flops() const { return gemm_flops_; }
  void reset() {
    for (auto& [op, secs] : seconds_) secs = 0.0;
    for (auto& [op, flops] : gemm_flops_) flops = 0.0;
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C, float eps) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override;
  void layernorm_backward_residual(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, const float* dresidual, int N,
                                   int C) override;
  size_t linear_saved_floats(int N, int IC, int OC) const override {
    return inner_->linear_saved_floats(N, IC, OC);
  }
  bool linear_backward_reads_input() const override {
    return inner_->linear_backward_reads_input();
  }
  void linear_forward(float* out, float* saved, const float* inp, const float* weight,
                      const float* bias, int N, int IC, int OC) override;
  void linear_forward_same_input(float* out, float* saved, const float* inp, const float* weight,
                                 const float* bias, int N, int IC, int OC) override;
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* saved, int N, int IC,
                       int OC) override;
  void linear_residual_forward(float* out, float* branch, float* saved, const float* inp,
                               const float* weight, const float* bias, const float* residual, int N,
                               int IC, int OC) override;
  bool fuses_linear_residual_forward(int N, int IC, int OC) const override {
    return inner_->fuses_linear_residual_forward(N, IC, OC);
  }
  void linear_gelu_forward(float* out, float* act, float* saved, const float* inp,
                           const float* weight, const float* bias, int N, int IC, int OC) override;
  bool fuses_linear_gelu_forward(int N, int IC, int OC) const override {
    return inner_->fuses_linear_gelu_forward(N, IC, OC);
  }
  void gelu_linear_backward(float* dinp, float* dweight, float* dbias, float* dout,
                            const float* dact, const float* out, const float* inp,
                            const float* weight, const float* saved, int N, int IC,
                            int OC) override;
  bool fuses_gelu_linear_backward(int N, int IC, int OC) const override {
    return inner_->fuses_gelu_linear_backward(N, IC, OC);
  }
  void swiglu_linear_forward(float* out, float* saved, float* act, const float* gate,
                             const float* up, const float* weight, const float* residual, int N,
                             int F, int OC) override;
  bool fuses_swiglu_linear_forward(int N, int F, int OC) const override {
    return inner_->fuses_swiglu_linear_forward(N, F, OC);
  }
  void swiglu_mlp_forward(float* out, float* gate, float* up, float* act, float* gate_up_saved,
                          float* down_saved, const float* inp, const float* gate_w,
                          const float* up_w, const float* down_w, const float* residual, int N,
                          int C, int F) override;
  bool fuses_swiglu_mlp_forward(const float* gate_w, const float* up_w, int N, int C,
                                int F) const override {
    return inner_->fuses_swiglu_mlp_forward(gate_w, up_w, N, C, F);
  }
  void swiglu_linear_backward(float* dinp, float* scratch, float* dgate, float* dup, float* dgate_w,
                              float* dup_w, const float* dact, const float* gate, const float* up,
                              const float* inp, const float* gate_w, const float* up_w,
                              const float* saved, int F, int N, int IC) override;
  bool fuses_swiglu_linear_backward(const float* gate_w, const float* up_w, const float* dgate_w,
                                    const float* dup_w, int F, int N, int IC) const override {
    return inner_->fuses_swiglu_linear_backward(gate_w, up_w, dgate_w, dup_w, F, N, IC);
  }
  void linear_forward_siblings(std::initializer_list<float*> outs, float* saved, const float* inp,
                               std::initializer_list<const float*> weights,
                               std::initializer_list<int> widths, int N, int IC) override;
  void linear_backward_siblings(float* dinp, float* scratch, std::initializer_list<float*> dweights,
                                std::initializer_list<const float*> douts, const float* inp,
                                std::initializer_list<const float*> weights, const float* saved,
                                std::initializer_list<int> widths, int N, int IC) override;
  size_t attention_saved_floats(int B, int T, int C, int NH) const override {
    return inner_->attention_saved_floats(B, T, C, NH);
  }
  void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C,
                         int NH) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* saved, int B, int T, int C, int NH) override;
  void gelu_forward(float* out, const float* inp, size_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void add(float* out, const float* a, const float* b, size_t n) override;
  void add_inplace(float* acc, const float* x, size_t n) override;
  size_t classifier_saved_floats(int N, int V, int Vp) const override {
    return inner_->classifier_saved_floats(N, V, Vp);
  }
  float cross_entropy_forward(float* saved, const float* logits, const int32_t* targets, int N,
                              int V, int Vp) override;
  void cross_entropy_backward(float* dlogits, const float* logits, const float* saved,
                              const int32_t* targets, int N, int V, int Vp, float dloss) override;
  double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) override;

  // llama ops
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override;
  void rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, const float* dresidual,
                                 int N, int C) override;
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int N, int C) override;
  size_t rope_table_floats(int T, int hd) const override {
    return inner_->rope_table_floats(T, hd);
  }
  void rope_tables(float* cos, float* sin, int T, int hd, double theta) override {
    inner_->rope_tables(cos, sin, T, hd, theta);
  }
  void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T,
                    int n_heads, int hd) override;
  void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B,
                     int T, int n_heads, int hd) override;
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override;
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, size_t n) override;
  size_t gqa_attention_saved_floats(int B, int T, int NH, int KVH, int hd) const override {
    return inner_->gqa_attention_saved_floats(B, T, NH, KVH, hd);
  }
  void gqa_attention_forward(float* out, float* saved, const float* q, const float* k,
                             const float* v, int B, int T, int NH, int KVH, int hd) override;
  void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* saved,
                              int B, int T, int NH, int KVH, int hd) override;

 private:
  template <typename F>
  auto timed(const char* op, F&& f);
  // timed, for an op whose matrix products do `flops` floating-point operations.
  template <typename F>
  auto timed_gemm(const char* op, double flops, F&& f);
  // The total of op in totals, made (zero) on op's first call.
  static double& entry(std::map<std::string, double, std::less<>>& totals, std::string_view op);
  std::unique_ptr<Numerics> inner_;
  // std::less<> finds an op by its name without building a std::string for every call.
  std::map<std::string, double, std::less<>> seconds_;
  std::map<std::string, double, std::less<>> gemm_flops_;
};

}  // namespace forge
