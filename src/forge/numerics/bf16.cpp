// The `bf16` profile: the linear layers' matmuls take bf16 operands (inputs, weights and
// output gradients rounded to nearest even) and accumulate in fp32; so do GPT-2 attention's
// matmuls (GPT-2's and Llama's grouped-query) where the CPU has bf16 dot products
// (kernels/attention_bf16.h; softmax and its statistics stay fp32). Everything else -- norms,
// softmax, GELU, the loss, the fp32 master weights and AdamW state -- is the `fast` profile's,
// to which this class forwards. See kernels/bf16_gemm.h for why an fp32 GEMM over rounded
// operands is exactly a bf16 dot product with fp32 accumulation.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "forge/core/env.h"
#include "forge/core/error.h"
#include "forge/core/float_buffer.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/attention_bf16.h"
#include "forge/kernels/bf16_gemm.h"
#include "forge/numerics/profiles.h"
#include "forge/numerics/stacked_linear.h"

namespace forge {

namespace {

namespace k = kernels::cpu;

class Bf16Numerics final : public Numerics {
 public:
  // Attention in bf16 where the CPU multiplies bf16 natively; without bf16 instructions it
  // would be no faster than fp32, so it stays fp32 there (and with FORGE_BF16_NATIVE=0).
  Bf16Numerics()
      : fast_(make_fast_numerics()),
        bf16_attention_(k::native_bf16_available() && k::attention_bf16_available()) {}

  std::string name() const override { return "bf16"; }
  const char* matmul_dtype() const override { return "bf16"; }
  std::string arithmetic() const override {
    if (!k::native_bf16_available())
      return fmt::format(
          "{}; bf16-rounded operands in fp32 GEMMs, fp32 attention ({})", fast_->arithmetic(),
          !bf16_native_requested() ? "FORGE_BF16_NATIVE=0"
                                   : "oneDNN finds no bf16 dot products on this CPU");
    return fmt::format(
        "{}; bf16 dot products in oneDNN's bf16 GEMMs{}, {} attention", fast_->arithmetic(),
        k::amx_linear_available()
            ? " (the linear layers' products of whole tiles on forge's AMX kernel)"
            : "",
        !bf16_attention_                                             ? "fp32"
        : k::attention_bf16_products() == k::Bf16Products::kAmxTiles ? "bf16 (AMX tiles)"
                                                                     : "bf16 (VDPBF16PS)");
  }

  bool flushes_subnormals() const override { return fast_->flushes_subnormals(); }

  void plan(const StepShape& s) override {
    // The attention kernels stop at the head width fast's do: refused here, in this profile's
    // name (fast_->plan below would name `fast`).
    const int head = s.head_dim > 0 ? s.head_dim : (s.NH > 0 ? s.C / s.NH : 0);
    if (head > kernels::cpu::kMaxHeadDim)
      fail(
          "numerics 'bf16': model head dimension {} is larger than the {} its attention kernel "
          "supports",
          head, kernels::cpu::kMaxHeadDim);
    StepShape fast_shape = s;
    fast_shape.linear_shapes.clear();  // the linear layers are this profile's own
    fast_shape.stacked_linear_shapes.clear();
    stacked_.resize(stacked_siblings_floats(s));
    fast_->plan(fast_shape);
    // The scratch holds the rounded operands of the largest linear layer the models build
    // (gpt2.cpp, llama.cpp); sized per (in, out) pair, not max(in) x max(out), since the
    // classifier's Vp x C would otherwise be multiplied by the MLP width.
    const int hd = s.head_dim > 0 ? s.head_dim : (s.NH > 0 ? s.C / s.NH : 0);
    const int kvh = s.n_kv_head > 0 ? s.n_kv_head : s.NH;
    const int ffn = std::max(s.ffn, 4 * s.C);
    const int dq = s.NH * hd, dkv = kvh * hd;
    const int rows = s.B * s.T;
    // With the model's weights planned, each has its operand slot and the scratch needs no
    // room for one (on gpt2-124m that room would be the classifier's 77 MB). Not without bf16
    // dot products: an operand is then a rounded fp32 copy, as large as the weight itself, and
    // keeping one per weight would cost the weights' size again (86 MiB on llama-small, which
    // put `bf16` above torch.compile's peak RSS) to save one rounding pass per backward; the
    // kernels round each weight into the scratch instead, to the same bits.
    planned_weights_ = k::native_bf16_available() ? static_cast<size_t>(s.linear_weights) : 0;
    size_t need = 0;
    for (int oc : {s.C, 3 * s.C, ffn, 2 * ffn, s.Vp, dq, dkv, dq + 2 * dkv})
      need = std::max(need, k::bf16_linear_scratch_floats(rows, s.C, oc, slots_planned()));
    for (int ic : {ffn, dq})
      need = std::max(need, k::bf16_linear_scratch_floats(rows, ic, s.C, slots_planned()));
    scratch_.resize(need);
    // Each slot is rounded up to a cache line: at most 16 floats more per weight.
    weight_operands_.resize(slots_planned() ? k::bf16_operand_floats(s.linear_weight_floats) +
                                                  16 * static_cast<size_t>(s.linear_weights)
                                            : 0);
    weight_slots_.clear();
    weight_slots_.reserve(planned_weights_);
    last_slot_ = 0;
    if (bf16_attention_) {
      attention_threads_ = omp_get_max_threads();
      attention_workspace_.resize(k::attention_bf16_workspace_floats(s.T, hd, attention_threads_));
    }
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
    fast_->embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C) override {
    fast_->embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C, float eps) override {
    fast_->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    fast_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void layernorm_backward_residual(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, const float* dresidual, int N,
                                   int C) override {
    fast_->layernorm_backward_residual(dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                       dresidual, N, C);
  }

  size_t linear_saved_floats(int N, int IC, int OC) const override {
    return k::bf16_linear_saved_floats(N, IC, OC);
  }
  // saved holds inp's converted copy (packed bf16, or bf16-rounded fp32 without native bf16).
  bool linear_backward_reads_input() const override { return false; }
  void linear_forward(float* out, float* saved, const float* inp, const float* weight,
                      const float* bias, int N, int IC, int OC) override {
    k::bf16_linear_forward(out, saved, inp, weight, bias, N, IC, OC, scratch_for(N, IC, OC),
                           /*inp_in_saved=*/false, weight_slot(weight, IC, OC, true));
  }
  void linear_forward_same_input(float* out, float* saved, const float* inp, const float* weight,
                                 const float* bias, int N, int IC, int OC) override {
    k::bf16_linear_forward(out, saved, inp, weight, bias, N, IC, OC, scratch_for(N, IC, OC),
                           /*inp_in_saved=*/saved != nullptr, weight_slot(weight, IC, OC, true));
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* saved, int N, int IC,
                       int OC) override {
    k::bf16_linear_backward(dinp, dweight, dbias, dout, inp, weight, saved, N, IC, OC,
                            scratch_for(N, IC, OC), weight_slot(weight, IC, OC, false));
  }

  // On forge's AMX kernel the residual's add runs in the product's epilogue
  // (kernels/bf16_gemm.h).
  bool fuses_linear_residual_forward(int N, int IC, int OC) const override {
    return k::amx_linear_forward_runs(N, OC, IC);  // native bf16 implied
  }
  void linear_residual_forward(float* out, float* branch, float* saved, const float* inp,
                               const float* weight, const float* bias, const float* residual, int N,
                               int IC, int OC) override {
    if (branch || !fuses_linear_residual_forward(N, IC, OC))
      return Numerics::linear_residual_forward(out, branch, saved, inp, weight, bias, residual, N,
                                               IC, OC);
    k::bf16_linear_residual_forward(out, saved, inp, residual, weight, bias, N, IC, OC,
                                    scratch_for(N, IC, OC), weight_slot(weight, IC, OC, true));
  }

  // On forge's AMX kernel c_fc's GELU runs in the product's epilogue (kernels/bf16_gemm.h).
  bool fuses_linear_gelu_forward(int N, int IC, int OC) const override {
    return k::amx_linear_forward_runs(N, OC, IC);  // native bf16 implied
  }
  void linear_gelu_forward(float* out, float* act, float* saved, const float* inp,
                           const float* weight, const float* bias, int N, int IC, int OC) override {
    if (!fuses_linear_gelu_forward(N, IC, OC))
      return Numerics::linear_gelu_forward(out, act, saved, inp, weight, bias, N, IC, OC);
    k::bf16_linear_gelu_forward(out, act, saved, inp, weight, bias, N, IC, OC,
                                scratch_for(N, IC, OC), weight_slot(weight, IC, OC, true));
  }

  // On forge's AMX kernel the stacked layer writes (and reads the gradients of) each sibling
  // in place, as the bf16 linear kernels' parts functions do.
  bool linear_forward_into_parts(std::span<float* const> outs, std::span<const int> widths,
                                 float* saved, const float* inp, const float* weight, int N,
                                 int IC) override {
    if (!k::bf16_linear_parts_run(N, IC, widths)) return false;
    const int OC = std::accumulate(widths.begin(), widths.end(), 0);
    k::bf16_linear_forward_parts(outs, widths, saved, inp, weight, N, IC, scratch_for(N, IC, OC),
                                 weight_slot(weight, IC, OC, true));
    return true;
  }
  bool linear_backward_from_parts(float* dinp, float* dweight, std::span<const float* const> douts,
                                  std::span<const int> widths, const float* inp,
                                  const float* weight, const float* saved, int N, int IC) override {
    if (!k::bf16_linear_parts_run(N, IC, widths)) return false;
    const int OC = std::accumulate(widths.begin(), widths.end(), 0);
    k::bf16_linear_backward_parts(dinp, dweight, douts, widths, inp, weight, saved, N, IC,
                                  scratch_for(N, IC, OC), weight_slot(weight, IC, OC, false));
    return true;
  }

  // On forge's AMX kernel GELU's backward runs inside the rounding of c_fc's output gradient
  // into the tiles and its bias gradient's sums (kernels/bf16_gemm.h).
  bool fuses_gelu_linear_backward(int N, int IC, int OC) const override {
    return k::amx_linear_backward_runs(N, IC, OC);
  }
  void gelu_linear_backward(float* dinp, float* dweight, float* dbias, float* dout,
                            const float* dact, const float* out, const float* inp,
                            const float* weight, const float* saved, int N, int IC,
                            int OC) override {
    if (!fuses_gelu_linear_backward(N, IC, OC))
      return Numerics::gelu_linear_backward(dinp, dweight, dbias, dout, dact, out, inp, weight,
                                            saved, N, IC, OC);
    k::bf16_gelu_linear_backward(dinp, dweight, dbias, dact, out, inp, weight, saved, N, IC, OC,
                                 scratch_for(N, IC, OC), weight_slot(weight, IC, OC, false));
  }

  // With bf16 dot products SwiGLU's output goes straight into the down projection's bf16
  // input operand, which forward keeps for backward anyway, and on forge's AMX kernel the
  // residual's add runs in the product's epilogue (kernels/bf16_gemm.h).
  bool fuses_swiglu_linear_forward(int, int, int) const override {
    return k::native_bf16_available();
  }
  void swiglu_linear_forward(float* out, float* saved, float* act, const float* gate,
                             const float* up, const float* weight, const float* residual, int N,
                             int F, int OC) override {
    if (!fuses_swiglu_linear_forward(N, F, OC) || !saved)
      return Numerics::swiglu_linear_forward(out, saved, act, gate, up, weight, residual, N, F, OC);
    k::bf16_swiglu_linear_forward(out, saved, gate, up, weight, N, F, OC, scratch_for(N, F, OC),
                                  weight_slot(weight, F, OC, true), residual);
  }

  // On forge's AMX kernel, with gate's and up's weights back to back as one stacked layer,
  // SwiGLU runs on each block of their product as it is written, into the down projection's
  // input operand (kernels/bf16_gemm.h).
  bool fuses_swiglu_mlp_forward(const float* gate_w, const float* up_w, int N, int C,
                                int F) const override {
    return up_w == gate_w + static_cast<size_t>(F) * C && k::bf16_swiglu_mlp_forward_runs(N, C, F);
  }
  void swiglu_mlp_forward(float* out, float* gate, float* up, float* act, float* gate_up_saved,
                          float* down_saved, const float* inp, const float* gate_w,
                          const float* up_w, const float* down_w, const float* residual, int N,
                          int C, int F) override {
    if (!fuses_swiglu_mlp_forward(gate_w, up_w, N, C, F) || !gate_up_saved || !down_saved)
      return Numerics::swiglu_mlp_forward(out, gate, up, act, gate_up_saved, down_saved, inp,
                                          gate_w, up_w, down_w, residual, N, C, F);
    // One scratch serves both layers, one after the other; scratch_for checks that the plan
    // covers each.
    scratch_for(N, F, C);
    float* scratch = scratch_for(N, C, 2 * F);
    k::bf16_swiglu_mlp_forward(out, gate, up, gate_up_saved, down_saved, inp, gate_w, down_w,
                               residual, N, C, F, scratch, weight_slot(gate_w, C, 2 * F, true),
                               weight_slot(down_w, F, C, true));
  }

  // On forge's AMX kernel, with gate's and up's weights (and gradients) back to back as one
  // stacked layer, SwiGLU's backward runs inside the rounding of the output gradients into the
  // tiles (kernels/bf16_gemm.h).
  bool fuses_swiglu_linear_backward(const float* gate_w, const float* up_w, const float* dgate_w,
                                    const float* dup_w, int F, int N, int IC) const override {
    const int widths[] = {F, F};
    const size_t part = static_cast<size_t>(F) * IC;
    return up_w == gate_w + part && dup_w == dgate_w + part &&
           k::bf16_linear_parts_run(N, IC, widths);
  }
  void swiglu_linear_backward(float* dinp, float* scratch, float* dgate, float* dup, float* dgate_w,
                              float* dup_w, const float* dact, const float* gate, const float* up,
                              const float* inp, const float* gate_w, const float* up_w,
                              const float* saved, int F, int N, int IC) override {
    if (!fuses_swiglu_linear_backward(gate_w, up_w, dgate_w, dup_w, F, N, IC))
      return Numerics::swiglu_linear_backward(dinp, scratch, dgate, dup, dgate_w, dup_w, dact, gate,
                                              up, inp, gate_w, up_w, saved, F, N, IC);
    k::bf16_swiglu_linear_backward(dinp, dgate_w, dact, gate, up, F, inp, gate_w, saved, N, IC,
                                   scratch_for(N, IC, 2 * F),
                                   weight_slot(gate_w, IC, 2 * F, false));
  }

  // As `fast` does (numerics/stacked_linear.h): one GEMM by the stacked weight, whose bf16
  // operand then has one slot, converted once per forward like any other weight's.
  std::span<float> stacked_product_room() override { return {stacked_.data(), stacked_.size()}; }

  size_t attention_saved_floats(int B, int T, int C, int NH) const override {
    return bf16_attention_ ? k::attention_bf16_saved_floats(B, T, NH)
                           : fast_->attention_saved_floats(B, T, C, NH);
  }
  void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C,
                         int NH) override {
    if (!bf16_attention_) return fast_->attention_forward(out, saved, qkv, B, T, C, NH);
    k::attention_forward_bf16(out, saved, qkv, B, T, C, NH, attention_workspace(T, C / NH),
                              attention_threads_);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* saved, int B, int T, int C, int NH) override {
    if (!bf16_attention_)
      return fast_->attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH);
    k::attention_backward_bf16(dqkv, dout, qkv, out, saved, B, T, C, NH,
                               attention_workspace(T, C / NH), attention_threads_);
  }

  void gelu_forward(float* out, const float* inp, size_t n) override {
    fast_->gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    fast_->gelu_backward(dinp, inp, dout, n);
  }

  void add(float* out, const float* a, const float* b, size_t n) override {
    fast_->add(out, a, b, n);
  }
  void add_inplace(float* acc, const float* x, size_t n) override { fast_->add_inplace(acc, x, n); }

  size_t classifier_saved_floats(int N, int V, int Vp) const override {
    return fast_->classifier_saved_floats(N, V, Vp);
  }
  float cross_entropy_forward(float* saved, const float* logits, const int32_t* targets, int N,
                              int V, int Vp) override {
    return fast_->cross_entropy_forward(saved, logits, targets, N, V, Vp);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* saved,
                              const int32_t* targets, int N, int V, int Vp, float dloss) override {
    fast_->cross_entropy_backward(dlogits, logits, saved, targets, N, V, Vp, dloss);
  }

  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                       float eps) override {
    fast_->rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int N, int C) override {
    fast_->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void rmsnorm_backward_residual(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, const float* dresidual,
                                 int N, int C) override {
    fast_->rmsnorm_backward_residual(dinp, dweight, dout, inp, weight, rstd, dresidual, N, C);
  }
  void rope_tables(float* cos, float* sin, int T, int hd, double theta) override {
    fast_->rope_tables(cos, sin, T, hd, theta);
  }
  void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T,
                    int n_heads, int hd) override {
    fast_->rope_forward(out, inp, cos, sin, B, T, n_heads, hd);
  }
  void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B,
                     int T, int n_heads, int hd) override {
    fast_->rope_backward(dinp, dout, cos, sin, B, T, n_heads, hd);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    fast_->swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, size_t n) override {
    fast_->swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  size_t gqa_attention_saved_floats(int B, int T, int NH, int KVH, int hd) const override {
    return bf16_attention_ ? k::attention_bf16_saved_floats(B, T, NH)
                           : fast_->gqa_attention_saved_floats(B, T, NH, KVH, hd);
  }
  void gqa_attention_forward(float* out, float* saved, const float* q, const float* k,
                             const float* v, int B, int T, int NH, int KVH, int hd) override {
    if (!bf16_attention_)
      return fast_->gqa_attention_forward(out, saved, q, k, v, B, T, NH, KVH, hd);
    k::gqa_attention_forward_bf16(out, saved, q, k, v, {B, T, NH, KVH, hd},
                                  attention_workspace(T, hd), attention_threads_);
  }
  void gqa_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* saved,
                              int B, int T, int NH, int KVH, int hd) override {
    if (!bf16_attention_)
      return fast_->gqa_attention_backward(dq, dk, dv, dout, q, k, v, out, saved, B, T, NH, KVH,
                                           hd);
    k::gqa_attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, saved, {B, T, NH, KVH, hd},
                                   attention_workspace(T, hd), attention_threads_);
  }

  double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) override {
    return fast_->optimizer_step(params, count, hp);
  }

 private:
  // The planned scratch; a shape plan() did not foresee is a bug in the caller, reported
  // rather than silently allocating inside a step.
  float* scratch_for(int N, int IC, int OC) {
    const size_t need = k::bf16_linear_scratch_floats(N, IC, OC, slots_planned());
    if (need > scratch_.size())
      fail("numerics 'bf16': linear layer {}x{}x{} needs {} scratch floats, plan() reserved {}", N,
           IC, OC, need, scratch_.size());
    return scratch_.data();
  }

  // Where the bf16 operand of `weight` (OC x IC) lives from a forward to the backward that
  // follows it: forward converts the weight there, backward reads it instead of converting
  // the weight again. A step changes no weight between its forward and backward (AdamW runs
  // after), and every forward converts afresh, so the copy is never stale. Slots are found by
  // the weight's address, handed out at a weight's first forward. Planned for the model's
  // linear weights (ParamLayout::add_linear_weight), a weight without a slot is an error (its
  // operand has no room in the scratch); a caller that planned none (linear_weights 0) gets
  // null, and the kernels convert every weight into the scratch.
  float* weight_slot(const float* weight, int IC, int OC, bool in_forward) {
    if (!slots_planned()) return nullptr;
    const size_t floats = k::bf16_operand_floats(static_cast<size_t>(OC) * IC);
    // A step visits the weights in one order forward and the reverse backward, so the slot
    // sought is next to the last one found: look there before searching them all.
    const size_t n = weight_slots_.size();
    size_t found = n;
    for (size_t i : {last_slot_ + 1, last_slot_, last_slot_ - 1})  // wraps past 0 to >= n
      if (i < n && weight_slots_[i].weight == weight) found = i;
    for (size_t i = 0; found == n && i < n; ++i)
      if (weight_slots_[i].weight == weight) found = i;
    if (found < n) {
      const WeightSlot& slot = weight_slots_[found];
      if (slot.floats != floats)
        fail("numerics 'bf16': weight at {} used as {}x{}, earlier with {} operand floats",
             static_cast<const void*>(weight), OC, IC, slot.floats);
      last_slot_ = found;
      return weight_operands_.data() + slot.offset;
    }
    const size_t used =
        weight_slots_.empty() ? 0 : weight_slots_.back().offset + weight_slots_.back().floats;
    if (!in_forward)
      fail("numerics 'bf16': backward of a {}x{} linear layer whose weight had no forward", OC, IC);
    if (weight_slots_.size() == planned_weights_ || used + floats > weight_operands_.size())
      fail(
          "numerics 'bf16': a {}x{} linear weight beyond the {} planned ({} operand floats); "
          "is it declared with ParamLayout::add_linear_weight?",
          OC, IC, planned_weights_, weight_operands_.size());
    weight_slots_.push_back({weight, used, floats});
    last_slot_ = weight_slots_.size() - 1;
    return weight_operands_.data() + used;
  }

  // The planned workspace of the bf16 attention, checked like scratch_for.
  float* attention_workspace(int T, int hd) {
    const size_t need = k::attention_bf16_workspace_floats(T, hd, attention_threads_);
    if (attention_threads_ == 0 || need > attention_workspace_.size())
      fail(
          "numerics 'bf16': attention over T={} and head dim {} needs {} workspace floats, "
          "plan() reserved {}",
          T, hd, need, attention_workspace_.size());
    return attention_workspace_.data();
  }

  std::unique_ptr<Numerics> fast_;
  const bool bf16_attention_;
  // FloatBuffers rather than vectors: the scratch reaches 2 x N x Vp bf16 operands (206 MB
  // on gpt2-124m), which then sit on huge pages like the activations.
  FloatBuffer scratch_;
  FloatBuffer stacked_;  // a stacked layer's product in forward, its output gradient in backward
  FloatBuffer attention_workspace_;
  // The linear layers' weight operands (weight_slot), planned for StepShape's linear weights.
  struct WeightSlot {
    const float* weight;
    size_t offset, floats;  // into weight_operands_
  };
  FloatBuffer weight_operands_;
  std::vector<WeightSlot> weight_slots_;
  size_t last_slot_ = 0;        // where weight_slot last found or placed a weight
  size_t planned_weights_ = 0;  // StepShape::linear_weights
  // Whether the caller planned the model's weights (then every weight has a slot).
  bool slots_planned() const { return planned_weights_ > 0; }
  int attention_threads_ = 0;
};

}  // namespace

std::unique_ptr<Numerics> make_bf16_numerics() { return std::make_unique<Bf16Numerics>(); }

}  // namespace forge
