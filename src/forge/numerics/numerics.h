// A numerics profile: the set of kernels the model code calls. The model is written once;
// a profile decides how each op is computed (bit-for-bit PyTorch, fastest fp32, bf16).
//
// Conventions for every op below:
//  - activations are row-major [N, C] with N = B*T rows;
//  - linear weights are stored as torch.nn.Linear does, [out, in]; y = x W^T + b;
//  - backward outputs are OVERWRITTEN (=), never accumulated, except where a comment says
//    "accumulates"; the model code performs the sums autograd would perform, in its order;
//  - a profile may keep per-op saved state (attention, classifier) in buffers whose size it
//    reports up front, and may use the scratch it asked for in plan(); nothing allocates
//    inside a step.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace forge {

struct ModelConfig;

// Shapes a profile must plan for (all known at start-up).
struct StepShape {
  int B = 0, T = 0, C = 0, NH = 0, V = 0 /*real vocab*/, Vp = 0 /*padded rows*/, L = 0;
  int n_kv_head = 0, head_dim = 0, ffn = 0;
  bool llama = false;  // the Llama-family ops (RMSNorm, RoPE, SwiGLU, GQA) run, not GPT-2's
  // The model's linear layers (their distinct weights) and those weights' floats in all, for
  // a profile that keeps something per weight through a step (bf16: each weight's operand).
  // Zero when the caller plans none.
  int linear_weights = 0;
  size_t linear_weight_floats = 0;
  // Their shapes, [out, in] each, in declaration order (empty when the caller plans none).
  std::vector<std::array<int, 2>> linear_shapes;
  // Each group of sibling linear layers the model runs (linear_forward_siblings), as one
  // stacked layer's [sum of outs, in], for a profile that multiplies a group at once.
  std::vector<std::array<int, 2>> stacked_linear_shapes;
};

// One parameter tensor as the optimizer sees it.
struct ParamRef {
  float* param;
  float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  size_t numel;
  bool decay;  // weight decay applies (2-D weights)
};

struct OptimizerStep {
  double lr, beta1, beta2, eps, weight_decay;
  double max_grad_norm;  // <= 0: no clipping
  int64_t step;          // 1-based count of optimizer steps taken including this one
};

class Numerics {
 public:
  virtual ~Numerics() = default;
  virtual std::string name() const = 0;
  // What the profile runs on this CPU, in words for logs and reports (the kernel set, the
  // GEMM library, whether bf16 is multiplied natively): the same profile computes with
  // different instructions, and so at a different speed, on different machines.
  virtual std::string arithmetic() const = 0;
  // The type the matrix products multiply, "fp32" or "bf16": the arithmetic a PyTorch peer
  // must run to be compared (bf16: under CPU autocast), and whether the products may pass the
  // fp32 FMA peak (bf16's run on other units; an fp32 rate above that peak is a misreading).
  virtual const char* matmul_dtype() const { return "fp32"; }
  // Whether the run flushes subnormal floats to zero (set_subnormals_flushed, core/threads.h):
  // only where the profile promises no bit-for-bit equality with PyTorch, which keeps them.
  virtual bool flushes_subnormals() const { return false; }
  // Called once at start-up with the largest shapes the run will use.
  virtual void plan(const StepShape& shape) { (void)shape; }

  // --- embeddings ---------------------------------------------------------------------
  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int B, int T, int C) = 0;
  // dwte ACCUMULATES (the tied LM head wrote its gradient first):
  //   dwte[v,:] += sum over (b,t) with tokens[b,t]==v of dout[b,t,:]
  // dwpe is overwritten: dwpe[t,:] = sum_b dout[b,t,:]   (dwpe may be null: no positions)
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int B, int T, int C) = 0;

  // --- LayerNorm over the last dim (eps given) ------------------------------------------
  // mean, rstd: [N] saved for backward
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C,
                                 float eps) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C) = 0;
  // The same for an input that also feeds a residual add whose gradient dresidual reached it
  // first (GPT-2's blocks): dinp = dresidual + d(inp). dinp must not alias dresidual or dout.
  // The default is layernorm_backward, then add_inplace of dresidual.
  virtual void layernorm_backward_residual(float* dinp, float* dweight, float* dbias,
                                           const float* dout, const float* inp, const float* weight,
                                           const float* mean, const float* rstd,
                                           const float* dresidual, int N, int C);

  // --- linear: out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC] (bias may be null) -----
  // saved: linear_saved_floats(N, IC, OC) floats that forward fills for the backward of the
  // same inp and weight (the bf16 profile keeps its bf16 copy of inp there, so backward does
  // not convert it again). Null in forward when no backward follows (inference); null
  // in backward makes the profile work from inp and weight alone.
  virtual size_t linear_saved_floats(int N, int IC, int OC) const {
    (void)N, (void)IC, (void)OC;
    return 0;
  }
  // False when the saved state holds all that linear_backward reads of inp (given a saved
  // buffer, it then never reads inp): a model may reuse inp's buffer once forward is done.
  // No default, so that a profile, or a wrapper of one, cannot leave it unsaid.
  virtual bool linear_backward_reads_input() const = 0;
  virtual void linear_forward(float* out, float* saved, const float* inp, const float* weight,
                              const float* bias, int N, int IC, int OC) = 0;
  // linear_forward for a layer that reads the input the previous linear_forward call read,
  // through the same saved buffer, with inp unchanged since (Llama's q, k and v of one norm's
  // output; gate and up): that saved state then serves every such layer's backward, and the
  // profile need not convert inp again. The default is linear_forward.
  virtual void linear_forward_same_input(float* out, float* saved, const float* inp,
                                         const float* weight, const float* bias, int N, int IC,
                                         int OC) {
    linear_forward(out, saved, inp, weight, bias, N, IC, OC);
  }
  // dinp[N,IC] = dout @ weight; dweight[OC,IC] = dout^T @ inp; dbias[OC] = sum_n dout.
  // dinp may be null (not needed), dbias null when there is no bias. inp and weight must be
  // what the forward that filled saved read, unchanged since.
  virtual void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* saved, int N,
                               int IC, int OC) = 0;

  // --- a block's last linear layer and the residual stream's update after it as one op ---
  // out = residual + linear_forward(inp) (attention's output projection, GPT-2's MLP c_proj),
  // and when branch is not null the layer's own output goes there too (a dump reads it): the
  // default is linear_forward into branch (or out), then add(out, residual, that). A profile
  // that fuses them (fuses_linear_residual_forward: the add done on each block of the product
  // as it is written) does so without a branch and gives the same out and saved. out must not
  // alias residual.
  virtual void linear_residual_forward(float* out, float* branch, float* saved, const float* inp,
                                       const float* weight, const float* bias,
                                       const float* residual, int N, int IC, int OC);
  virtual bool fuses_linear_residual_forward(int N, int IC, int OC) const {
    (void)N, (void)IC, (void)OC;
    return false;
  }

  // --- GPT-2's c_fc and the GELU after it as one op, where the profile fuses them (the GELU
  // done on each block of the product as it is written) ----------------------------------
  // out = linear_forward(inp), act = gelu(out); both written (backward reads out, the next
  // layer act). The default: linear_forward, then gelu_forward.
  virtual void linear_gelu_forward(float* out, float* act, float* saved, const float* inp,
                                   const float* weight, const float* bias, int N, int IC, int OC);
  // Whether it runs fused for a layer of that shape, so that a wrapper timing ops can say
  // which it timed.
  virtual bool fuses_linear_gelu_forward(int N, int IC, int OC) const {
    (void)N, (void)IC, (void)OC;
    return false;
  }

  // c_fc's backward from the gradient of its GELU's output: dout = gelu_backward(out, dact)
  // [N, OC] (out: c_fc's forward output), then linear_backward with it; the default does
  // exactly that. A profile that fuses the two (fuses_gelu_linear_backward) gives the same
  // dinp, dweight and dbias and may leave dout unwritten: a caller that reads it (a dump)
  // calls the two ops itself.
  virtual void gelu_linear_backward(float* dinp, float* dweight, float* dbias, float* dout,
                                    const float* dact, const float* out, const float* inp,
                                    const float* weight, const float* saved, int N, int IC, int OC);
  virtual bool fuses_gelu_linear_backward(int N, int IC, int OC) const {
    (void)N, (void)IC, (void)OC;
    return false;
  }

  // --- sibling linear layers: bias-free layers reading the same inp (Llama's q, k, v of one
  // norm's output; gate and up of the other), outs[i][N, widths[i]] = inp weights[i]^T ------
  // With stacked_product_room() (below), one layer of the stacked weight where the weights
  // (and their gradients) lie back to back. Otherwise linear_forward, then
  // linear_forward_same_input for the others, through one saved buffer of the largest of their
  // linear_saved_floats.
  virtual void linear_forward_siblings(std::initializer_list<float*> outs, float* saved,
                                       const float* inp,
                                       std::initializer_list<const float*> weights,
                                       std::initializer_list<int> widths, int N, int IC);
  // dweights[i] = douts[i]^T inp, and dinp = the sum over the layers of douts[i] weights[i]
  // in autograd's order, from the last layer to the first: one by one, each term but the first
  // goes into scratch (N*IC floats) and is added to dinp.
  virtual void linear_backward_siblings(float* dinp, float* scratch,
                                        std::initializer_list<float*> dweights,
                                        std::initializer_list<const float*> douts, const float* inp,
                                        std::initializer_list<const float*> weights,
                                        const float* saved, std::initializer_list<int> widths,
                                        int N, int IC);

  // Llama's down projection of SwiGLU's output and the residual stream's update after it:
  // act = swiglu_forward(gate, up) [N, F], then linear_residual_forward(out, no branch, saved,
  // act, weight, no bias, residual, N, F, OC); the default does exactly that. A profile that fuses
  // the two (fuses_swiglu_linear_forward) gives the same out and saved and may leave act
  // unwritten: its linear_backward reads saved, not the input. A caller that reads act or the
  // projection's own output (a dump) calls the ops itself.
  virtual void swiglu_linear_forward(float* out, float* saved, float* act, const float* gate,
                                     const float* up, const float* weight, const float* residual,
                                     int N, int F, int OC);
  // Whether it runs fused for a layer of that shape given saved state (the models always give
  // it).
  virtual bool fuses_swiglu_linear_forward(int N, int F, int OC) const {
    (void)N, (void)F, (void)OC;
    return false;
  }
  // Llama's whole MLP forward and the residual stream's update after it: gate, up =
  // linear_forward_siblings({gate, up}, gate_up_saved, inp, {gate_w, up_w}, {F, F}, N, C),
  // then swiglu_linear_forward(out, down_saved, act, gate, up, down_w, residual, N, F, C); the
  // default does exactly that. A profile that fuses them (fuses_swiglu_mlp_forward: SwiGLU
  // done on each block of gate | up's product as it is written) gives the same out, gate, up
  // and saved states and may leave act unwritten.
  virtual void swiglu_mlp_forward(float* out, float* gate, float* up, float* act,
                                  float* gate_up_saved, float* down_saved, const float* inp,
                                  const float* gate_w, const float* up_w, const float* down_w,
                                  const float* residual, int N, int C, int F);
  // Whether it runs fused for these weights (gate's and up's back to back) and shape.
  virtual bool fuses_swiglu_mlp_forward(const float* gate_w, const float* up_w, int N, int C,
                                        int F) const {
    (void)gate_w, (void)up_w, (void)N, (void)C, (void)F;
    return false;
  }
  // Llama's gate | up backward from the gradient of SwiGLU's output dact [N, F]: dgate, dup =
  // swiglu_backward(dact, gate, up), then linear_backward_siblings of gate and up (widths F,
  // F) with them; the default does exactly that. A profile that fuses the two
  // (fuses_swiglu_linear_backward) gives the same dinp and weight gradients and may leave
  // dgate and dup unwritten: a caller that reads them (a dump) calls the two ops itself.
  virtual void swiglu_linear_backward(float* dinp, float* scratch, float* dgate, float* dup,
                                      float* dgate_w, float* dup_w, const float* dact,
                                      const float* gate, const float* up, const float* inp,
                                      const float* gate_w, const float* up_w, const float* saved,
                                      int F, int N, int IC);
  // Whether it runs fused for these weights (and their gradients) and shape.
  virtual bool fuses_swiglu_linear_backward(const float* gate_w, const float* up_w,
                                            const float* dgate_w, const float* dup_w, int F, int N,
                                            int IC) const {
    (void)gate_w, (void)up_w, (void)dgate_w, (void)dup_w, (void)F, (void)N, (void)IC;
    return false;
  }

  // The stacked layer of such siblings (weights back to back, OC = sum widths, no bias)
  // writing each layer's output into outs[i] in forward and reading each one's output
  // gradient from douts[i] in backward, where the profile's products can (no stacked product
  // and no copy into or out of it); false, having done nothing, where they cannot (the
  // default): numerics/stacked_linear.h then splits and joins through the stacked room.
  virtual bool linear_forward_into_parts(std::span<float* const> outs, std::span<const int> widths,
                                         float* saved, const float* inp, const float* weight, int N,
                                         int IC) {
    (void)outs, (void)widths, (void)saved, (void)inp, (void)weight, (void)N, (void)IC;
    return false;
  }
  virtual bool linear_backward_from_parts(float* dinp, float* dweight,
                                          std::span<const float* const> douts,
                                          std::span<const int> widths, const float* inp,
                                          const float* weight, const float* saved, int N, int IC) {
    (void)dinp, (void)dweight, (void)douts, (void)widths, (void)inp, (void)weight, (void)saved;
    (void)N, (void)IC;
    return false;
  }

  // --- causal multi-head self-attention ---------------------------------------------------
  // qkv[B,T,3C] holds q | k | v, each [B,T,NH,hd]; out[B,T,C] = softmax(q k^T / sqrt(hd) +
  // causal mask) v, heads concatenated. saved: attention_saved_floats() floats kept for
  // backward (probabilities, or log-sum-exp rows for a fused kernel).
  virtual size_t attention_saved_floats(int B, int T, int C, int NH) const = 0;
  virtual void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C,
                                 int NH) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* out, const float* saved, int B, int T, int C,
                                  int NH) = 0;

  // --- tanh-approximated GELU ---------------------------------------------------------
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) = 0;

  // --- elementwise ----------------------------------------------------------------------
  virtual void add(float* out, const float* a, const float* b, size_t n) = 0;  // out may alias
  virtual void add_inplace(float* acc, const float* x, size_t n) = 0;          // acc += x

  // --- classifier: mean cross-entropy over N rows of logits[N, Vp] --------------------
  // Only the first V columns are real; padded columns are excluded from the softmax.
  // Returns the mean loss (over the N rows); saved keeps what backward needs.
  virtual size_t classifier_saved_floats(int N, int V, int Vp) const = 0;
  virtual float cross_entropy_forward(float* saved, const float* logits, const int32_t* targets,
                                      int N, int V, int Vp) = 0;
  // dlogits[N,Vp] = dloss * d(mean loss)/d(logits); padded columns get 0. dlogits may be
  // logits itself (the models overwrite the logits with their gradient: at GPT-2's vocabulary
  // a second N x Vp buffer is the largest single activation).
  virtual void cross_entropy_backward(float* dlogits, const float* logits, const float* saved,
                                      const int32_t* targets, int N, int V, int Vp,
                                      float dloss) = 0;

  // --- Llama family: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention ----------
  // Not pure: the defaults (numerics/llama_ops.cpp) call the fp32 kernels of kernels/
  // {rmsnorm,rope,swiglu,gqa_attention}.h; a profile overrides them to compute its own way.
  // out = weight * (inp * rstd), rstd_n = 1/sqrt(mean_c inp^2 + eps) saved [N]; no bias.
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                               int N, int C, float eps);
  // dinp and dweight are overwritten.
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, int N, int C);
  // The same for an input that also feeds a residual add whose gradient dresidual reached it
  // first (the decoder layers): dinp = dresidual + d(inp), the three-term sum in the order the
  // profile's reference accumulates it (torch's autograd: the residual, the x * rstd path,
  // then the path through the variance). dinp must not alias dresidual or dout. The default
  // is rmsnorm_backward, then add_inplace of dresidual.
  virtual void rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout,
                                         const float* inp, const float* weight, const float* rstd,
                                         const float* dresidual, int N, int C);
  // cos, sin of the angles t * theta^(-2i/hd) for positions [0, T), computed once at start-up
  // in a layout of the profile's own, rope_table_floats(T, hd) floats each, which only its
  // rope_forward/backward read. The default is [T, hd/2]; torch-cpu keeps torch's [T, hd],
  // whose two halves can differ in the last bit (Sleef's cos/sin of a vector take a slower
  // path for every lane when one lane's angle is large).
  virtual size_t rope_table_floats(int T, int hd) const;
  virtual void rope_tables(float* cos, float* sin, int T, int hd, double theta);
  // Rows of n_heads*hd floats, B*T rows (row b*T+t at position t); Hugging Face's
  // rotate_half convention; out/dinp overwritten, never aliasing the input.
  virtual void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int B,
                            int T, int n_heads, int hd);
  virtual void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin,
                             int B, int T, int n_heads, int hd);
  // out = silu(gate) * up over n values; dgate, dup overwritten.
  virtual void swiglu_forward(float* out, const float* gate, const float* up, size_t n);
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                               const float* up, size_t n);
  // Causal attention with NH query heads over KVH kv heads (KVH divides NH; query head h reads
  // kv head h/(NH/KVH)): q [B,T,NH,hd], k, v [B,T,KVH,hd] -> out [B,T,NH*hd]. saved: what
  // backward needs, gqa_attention_saved_floats() floats. dq, dk, dv are overwritten.
  virtual size_t gqa_attention_saved_floats(int B, int T, int NH, int KVH, int hd) const;
  virtual void gqa_attention_forward(float* out, float* saved, const float* q, const float* k,
                                     const float* v, int B, int T, int NH, int KVH, int hd);
  virtual void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                      const float* q, const float* k, const float* v,
                                      const float* out, const float* saved, int B, int T, int NH,
                                      int KVH, int hd);

  // --- optimizer --------------------------------------------------------------------
  // Global L2 norm of all gradients (returned, before clipping), clipping as
  // torch.nn.utils.clip_grad_norm_ does (coef = max/(norm+1e-6), clamped to 1), then
  // torch.optim.AdamW on each tensor. Gradients may be left clipped or untouched.
  virtual double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) = 0;

 protected:
  // Room for a group of sibling layers' stacked product (stacked_siblings_floats(shape)
  // floats, planned in plan()). A profile that gives it runs each group whose weights lie
  // back to back as one layer of the stacked weight, through its own linear_forward and
  // linear_backward (numerics/stacked_linear.h); empty, the default: one by one.
  virtual std::span<float> stacked_product_room() { return {}; }
};

// "fast" | "torch-cpu" | "bf16"; throws forge::Error listing the known profiles.
std::unique_ptr<Numerics> make_numerics(const std::string& profile);
std::vector<std::string> numerics_profiles();

}  // namespace forge
