// The `torch-cpu` numerics profile: PyTorch 1.13.1's CPU fp32 arithmetic, bit for bit, as
// Debian's python3-torch computes it with ATEN_CPU_CAPABILITY=avx2 and the system OpenBLAS.
// Each op lives in src/forge/kernels/cpu/torch_cpu_*.cpp with the name of the ATen function
// it reproduces. Requirements on the caller for the bits to match:
//  - OpenMP's thread count equals torch.set_num_threads() on the reference side (several
//    kernels split work per thread: LayerNorm's dgamma/dbeta partial rows, the column ranges
//    of sum over dim 0, the chunks of GELU whose scalar tails use glibc's tanhf);
//  - the model calls the ops in autograd's order and does autograd's sums with add() /
//    add_inplace(): every sum autograd performs in this model has two terms, which IEEE
//    addition gives the same bits in either order.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include <omp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "forge/kernels/cpu/torch_cpu_attention.h"
#include "forge/kernels/cpu/torch_cpu_embedding.h"
#include "forge/kernels/cpu/torch_cpu_gelu.h"
#include "forge/kernels/cpu/torch_cpu_layernorm.h"
#include "forge/kernels/cpu/torch_cpu_linear.h"
#include "forge/kernels/cpu/torch_cpu_llama.h"
#include "forge/kernels/cpu/torch_cpu_optim.h"
#include "forge/kernels/cpu/torch_cpu_xent.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/profiles.h"

namespace forge {
namespace {

class TorchCpuNumerics final : public Numerics {
 public:
  std::string name() const override { return "torch-cpu"; }
  std::string arithmetic() const override {
    return "PyTorch 1.13.1's op order, its AVX2 vector layer, OpenBLAS sgemm";
  }

  void plan(const StepShape& s) override {
    const int threads = std::max(omp_get_max_threads(), omp_get_num_procs());
    tcpu::set_blas_threads(omp_get_max_threads());
    if (s.llama) {
      const int64_t N = int64_t{s.B} * s.T;
      rms_scratch_.assign(tcpu::rmsnorm_backward_scratch(N, s.C), 0.f);
      gqa_scratch_.assign(tcpu::gqa_attention_scratch_floats(s.B, s.T, s.NH, s.head_dim), 0.f);
    } else {
      attn_scratch_.assign(tcpu::attention_scratch_floats(s.B, s.T, s.C, std::max(1, s.NH)), 0.f);
    }
    ln_scratch_.assign(static_cast<size_t>(tcpu::layernorm_backward_scratch(s.C, threads)), 0.f);
    const int64_t vrows = std::max(s.V, s.Vp);
    emb_ints_.assign(static_cast<size_t>(tcpu::embedding_backward_scratch_ints(s.B, s.T, vrows)),
                     0);
    emb_row_.assign(static_cast<size_t>(s.C), 0.f);
    norms_.assign(static_cast<size_t>(12 * std::max(1, s.L) + 8), 0.f);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
    tcpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C) override {
    // Rows past the largest token id receive nothing; the bucket sort needs only that range.
    int32_t vmax = 0;
    for (int64_t i = 0; i < int64_t{B} * T; ++i) vmax = std::max(vmax, tokens[i]);
    const int64_t V = int64_t{vmax} + 1;
    ensure(emb_ints_, static_cast<size_t>(tcpu::embedding_backward_scratch_ints(B, T, V)));
    ensure(emb_row_, static_cast<size_t>(C));
    tcpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, V, emb_ints_.data(),
                             emb_row_.data());
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C, float eps) override {
    tcpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    ensure(ln_scratch_,
           static_cast<size_t>(tcpu::layernorm_backward_scratch(C, omp_get_max_threads())));
    tcpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                             ln_scratch_.data());
  }

  bool linear_backward_reads_input() const override { return true; }  // it multiplies inp
  void linear_forward(float* out, float* /*saved*/, const float* inp, const float* weight,
                      const float* bias, int N, int IC, int OC) override {
    tcpu::linear_forward(out, inp, weight, bias, N, IC, OC);
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* /*saved*/, int N, int IC,
                       int OC) override {
    tcpu::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }

  size_t attention_saved_floats(int B, int T, int C, int NH) const override {
    (void)C;
    return static_cast<size_t>(B) * NH * T * T;
  }
  void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C,
                         int NH) override {
    ensure(attn_scratch_, tcpu::attention_scratch_floats(B, T, C, NH));
    tcpu::attention_forward(out, saved, qkv, B, T, C, NH, attn_scratch_.data());
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* saved, int B, int T, int C, int NH) override {
    (void)out;
    ensure(attn_scratch_, tcpu::attention_scratch_floats(B, T, C, NH));
    tcpu::attention_backward(dqkv, dout, qkv, saved, B, T, C, NH, attn_scratch_.data());
  }

  void gelu_forward(float* out, const float* inp, size_t n) override {
    tcpu::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    tcpu::gelu_backward(dinp, inp, dout, n);
  }

  void add(float* out, const float* a, const float* b, size_t n) override {
    tcpu::add(out, a, b, static_cast<int64_t>(n));
  }
  void add_inplace(float* acc, const float* x, size_t n) override {
    tcpu::add(acc, acc, x, static_cast<int64_t>(n));
  }

  size_t classifier_saved_floats(int N, int V, int Vp) const override {
    (void)Vp;
    return static_cast<size_t>(N) * V;
  }
  float cross_entropy_forward(float* saved, const float* logits, const int32_t* targets, int N,
                              int V, int Vp) override {
    return tcpu::cross_entropy_forward(saved, logits, targets, N, V, Vp);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* saved,
                              const int32_t* targets, int N, int V, int Vp, float dloss) override {
    (void)logits;
    tcpu::cross_entropy_backward(dlogits, saved, targets, N, V, Vp, dloss);
  }

  // --- Llama family: reference/forge_ref/llama.py's ops (torch_cpu_llama.h) ---------------
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override {
    tcpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int N, int C) override {
    ensure(rms_scratch_, tcpu::rmsnorm_backward_scratch(N, C));
    tcpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, nullptr, N, C,
                           rms_scratch_.data());
  }
  void rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, const float* dresidual,
                                 int N, int C) override {
    ensure(rms_scratch_, tcpu::rmsnorm_backward_scratch(N, C));
    tcpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, dresidual, N, C,
                           rms_scratch_.data());
  }
  size_t rope_table_floats(int T, int hd) const override {
    return static_cast<size_t>(T) * static_cast<size_t>(hd);
  }
  void rope_tables(float* cos, float* sin, int T, int hd, double theta) override {
    tcpu::rope_tables(cos, sin, T, hd, theta);
  }
  void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T,
                    int n_heads, int hd) override {
    tcpu::rope_forward(out, inp, cos, sin, B, T, n_heads, hd);
  }
  void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B,
                     int T, int n_heads, int hd) override {
    tcpu::rope_backward(dinp, dout, cos, sin, B, T, n_heads, hd);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    tcpu::swiglu_forward(out, gate, up, static_cast<int64_t>(n));
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, size_t n) override {
    tcpu::swiglu_backward(dgate, dup, dout, gate, up, static_cast<int64_t>(n));
  }
  size_t gqa_attention_saved_floats(int B, int T, int NH, int KVH, int hd) const override {
    (void)KVH;
    (void)hd;
    return static_cast<size_t>(B) * NH * T * T;  // the softmax probabilities
  }
  void gqa_attention_forward(float* out, float* saved, const float* q, const float* k,
                             const float* v, int B, int T, int NH, int KVH, int hd) override {
    ensure(gqa_scratch_, tcpu::gqa_attention_scratch_floats(B, T, NH, hd));
    tcpu::gqa_attention_forward(out, saved, q, k, v, B, T, NH, KVH, hd, gqa_scratch_.data());
  }
  void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* saved,
                              int B, int T, int NH, int KVH, int hd) override {
    (void)out;
    ensure(gqa_scratch_, tcpu::gqa_attention_scratch_floats(B, T, NH, hd));
    tcpu::gqa_attention_backward(dq, dk, dv, dout, q, k, v, saved, B, T, NH, KVH, hd,
                                 gqa_scratch_.data());
  }

  double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) override {
    ensure(norms_, static_cast<size_t>(count));
    ensure(grad_ptrs_, static_cast<size_t>(count));
    ensure(numels_, static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      grad_ptrs_[i] = params[i].grad;
      numels_[i] = static_cast<int64_t>(params[i].numel);
    }
    // clip_grad_norm_(model.parameters()) sees the parameters in the order given here,
    // which must be model.parameters()'s order: the norm of the stacked norms depends on it.
    const float total = tcpu::clip_grad_norm(grad_ptrs_.data(), numels_.data(), count,
                                             hp.max_grad_norm, norms_.data());
    for (int i = 0; i < count; ++i) {
      const ParamRef& p = params[i];
      tcpu::adamw_step(p.param, p.grad, p.exp_avg, p.exp_avg_sq, static_cast<int64_t>(p.numel),
                       hp.lr, hp.beta1, hp.beta2, hp.eps, p.decay ? hp.weight_decay : 0.0, hp.step);
    }
    return static_cast<double>(total);
  }

 private:
  // Grows a buffer when a call is larger than what plan() was told (a first call without
  // plan() in a unit test); a planned run never grows.
  template <typename T>
  static void ensure(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  }

  std::vector<float> attn_scratch_, ln_scratch_, emb_row_, norms_, rms_scratch_, gqa_scratch_;
  std::vector<int32_t> emb_ints_;
  std::vector<float*> grad_ptrs_;
  std::vector<int64_t> numels_;
};

}  // namespace

std::unique_ptr<Numerics> make_torch_cpu_numerics() { return std::make_unique<TorchCpuNumerics>(); }

}  // namespace forge
