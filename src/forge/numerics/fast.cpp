// The `fast` profile: fp32 everywhere, the quickest kernel for each op (see kernels/).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "forge/core/error.h"
#include "forge/core/float_buffer.h"
#include "forge/core/threads.h"
#include "forge/kernels/adamw.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cross_entropy.h"
#include "forge/kernels/elementwise.h"
#include "forge/kernels/embedding.h"
#include "forge/kernels/gelu.h"
#include "forge/kernels/gemm.h"
#include "forge/kernels/layernorm.h"
#include "forge/kernels/linear.h"
#include "forge/kernels/rmsnorm.h"
#include "forge/numerics/profiles.h"
#include "forge/numerics/stacked_linear.h"

namespace forge {

namespace {

namespace k = kernels::cpu;

class FastNumerics final : public Numerics {
 public:
  std::string name() const override { return "fast"; }
  std::string arithmetic() const override {
    return fmt::format(
        "{} kernels, {} GEMMs, subnormals {}", k::isa_name(k::active_isa()),
        k::gemm_backend_available(k::GemmBackend::kOneDNN) ? "oneDNN" : "OpenBLAS",
        flushes_subnormals() ? "flushed to zero" : "kept (FORGE_FLUSH_SUBNORMALS=0)");
  }
  bool flushes_subnormals() const override { return subnormal_flush_requested(); }

  void plan(const StepShape& shape) override {
    const int hd = shape.head_dim > 0 ? shape.head_dim : (shape.NH > 0 ? shape.C / shape.NH : 0);
    if (hd > k::kMaxHeadDim)
      fail(
          "numerics 'fast': model head dimension {} is larger than the {} its attention "
          "kernel supports",
          hd, k::kMaxHeadDim);
    // Room for one weight in the forward GEMM's own layout (k::linear_forward): the largest
    // of the blocks' weights. The classifier's takes it only if it fits: on gpt2-124m its
    // copy would be 154 MB.
    size_t room = 0;
    for (const auto& [out, in] : shape.linear_shapes)
      if (out != shape.Vp) room = std::max(room, k::linear_weight_workspace_floats(in, out));
    // A group of sibling layers runs as one stacked layer where its weights lie back to back
    // (linear_forward_siblings): room for the stacked product, and for its weight's layout.
    for (const auto& [out, in] : shape.stacked_linear_shapes)
      room = std::max(room, k::linear_weight_workspace_floats(in, out));
    weight_workspace_.resize(room);
    stacked_.resize(stacked_siblings_floats(shape));
    embedding_order_.resize(k::embedding_backward_scratch(shape.B, shape.T));
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
    k::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C) override {
    // Planned for the step's batch (plan()); a batch it did not foresee is a bug in the caller,
    // reported rather than allocated for inside the step.
    if (const size_t need = k::embedding_backward_scratch(B, T); embedding_order_.size() < need)
      fail(
          "numerics 'fast': embedding gradient of {}x{} positions needs {} scratch ints, plan() "
          "reserved {}",
          B, T, need, embedding_order_.size());
    k::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, embedding_order_.data());
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C, float eps) override {
    k::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    k::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void layernorm_backward_residual(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, const float* dresidual, int N,
                                   int C) override {
    k::layernorm_backward_residual(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dresidual,
                                   N, C);
  }
  // RMSNorm's forward and plain backward are the defaults' (numerics/llama_ops.cpp); the
  // residual's gradient is added in the same pass, not in one of its own.
  void rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, const float* dresidual,
                                 int N, int C) override {
    k::rmsnorm_backward_residual(dinp, dweight, dout, inp, weight, rstd, dresidual, N, C);
  }

  bool linear_backward_reads_input() const override { return true; }  // it multiplies inp
  void linear_forward(float* out, float* /*saved*/, const float* inp, const float* weight,
                      const float* bias, int N, int IC, int OC) override {
    const bool fits = k::linear_weight_workspace_floats(IC, OC) <= weight_workspace_.size();
    k::linear_forward(out, inp, weight, bias, N, IC, OC,
                      fits && weight_workspace_.size() > 0 ? weight_workspace_.data() : nullptr);
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* /*saved*/, int N, int IC,
                       int OC) override {
    k::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }

  // One GEMM by the stacked weight instead of one per layer (numerics/stacked_linear.h): on
  // llama-small (2048 rows; q | k | v = 512 | 128 | 128 and gate | up = 1408 | 1408 by 512)
  // the narrow k and v run far below the GEMM's rate on their own (bench_kernels
  // gemm/*/llama/k/* against gemm/*/llama/qkv/*). The product goes through stacked_ and is
  // then copied into each layer's buffer.
  std::span<float> stacked_product_room() override { return {stacked_.data(), stacked_.size()}; }

  size_t attention_saved_floats(int B, int T, int C, int NH) const override {
    return k::attention_saved_floats(B, T, C, NH);
  }
  void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C,
                         int NH) override {
    k::attention_forward(out, saved, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* saved, int B, int T, int C, int NH) override {
    k::attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH);
  }

  void gelu_forward(float* out, const float* inp, size_t n) override {
    k::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    k::gelu_backward(dinp, inp, dout, n);
  }

  void add(float* out, const float* a, const float* b, size_t n) override { k::add(out, a, b, n); }
  void add_inplace(float* acc, const float* x, size_t n) override { k::add_inplace(acc, x, n); }

  size_t classifier_saved_floats(int N, int V, int Vp) const override {
    return k::cross_entropy_saved_floats(N);
  }
  float cross_entropy_forward(float* saved, const float* logits, const int32_t* targets, int N,
                              int V, int Vp) override {
    return k::cross_entropy_forward(saved, logits, targets, N, V, Vp);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* saved,
                              const int32_t* targets, int N, int V, int Vp, float dloss) override {
    k::cross_entropy_backward(dlogits, logits, saved, targets, N, V, Vp, dloss);
  }

  double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) override {
    return k::optimizer_step(params, count, hp);
  }

 private:
  FloatBuffer weight_workspace_;
  FloatBuffer stacked_;  // a stacked layer's product in forward, its output gradient in backward
  std::vector<int64_t> embedding_order_;  // the batch's positions sorted by token
};

}  // namespace

std::unique_ptr<Numerics> make_fast_numerics() { return std::make_unique<FastNumerics>(); }

}  // namespace forge
