#include "forge/model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "forge/core/error.h"
#include "forge/core/rng.h"

namespace forge {

namespace {
// Per-layer tensors in the order LlamaDecoderLayer registers them (self_attn, mlp, then the
// two norms). It is the order of named_parameters(), hence of the reference's init draws
// and of clip_grad_norm_'s per-tensor norms.
enum LayerTensor { Q_W, K_W, V_W, O_W, GATE_W, UP_W, DOWN_W, LN1_W, LN2_W, TENSORS_PER_LAYER };
}  // namespace

Llama::Llama(const ModelConfig& config, int B, int T, Numerics& numerics)
    : config_(config), maxB_(B), maxT_(T), nx_(numerics) {
  if (config.family != "llama")
    fail("model.family: the Llama model cannot run family '{}'", config.family);
  // The checks a config file gets (a SwiGLU width, kv heads dividing the heads, an even head
  // dimension for RoPE), for a config made in code too.
  validate_model_config(config, "the Llama model's config");
  FORGE_CHECK(T <= config.block_size, "T={} exceeds block_size={}", T, config.block_size);
  const int64_t C = config.n_embd, Vp = config.vocab_rows(), L = config.n_layer;
  NH_ = config.n_head;
  KVH_ = config.kv_heads();
  hd_ = config.head_dim();
  Dq_ = NH_ * hd_;
  Dkv_ = KVH_ * hd_;
  F_ = config.ffn_width();  // the width the step's plan was made for (ModelConfig::ffn_width)

  // Parameters: Hugging Face's LlamaForCausalLM names, nn.Linear layout [out, in] (no
  // transposes in files either).
  embed_w_ = layout_.add("model.embed_tokens.weight", {Vp, C}, false, true);
  for (int l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    layer_first_.push_back(layout_.tensors().size());
    layout_.add_linear_weight(p + "self_attn.q_proj.weight", {Dq_, C}, false);
    layout_.add_linear_weight(p + "self_attn.k_proj.weight", {Dkv_, C}, false);
    layout_.add_linear_weight(p + "self_attn.v_proj.weight", {Dkv_, C}, false);
    layout_.add_linear_weight(p + "self_attn.o_proj.weight", {C, Dq_}, false);
    layout_.add_linear_weight(p + "mlp.gate_proj.weight", {F_, C}, false);
    layout_.add_linear_weight(p + "mlp.up_proj.weight", {F_, C}, false);
    layout_.add_linear_weight(p + "mlp.down_proj.weight", {C, F_}, false);
    layout_.add(p + "input_layernorm.weight", {C}, false, false);
    layout_.add(p + "post_attention_layernorm.weight", {C}, false, false);
  }
  norm_w_ = layout_.add("model.norm.weight", {C}, false, false);
  head_w_ = layout_.add_linear_weight("lm_head.weight", {Vp, C}, false);
  params_.resize(layout_.total_floats());

  // Activations: planned once for the largest micro-batch. Per layer, what backward reads;
  // when the profile's linear layers keep their own copy of their input for backward, the
  // norms' and SwiGLU's outputs, which only feed linear layers, share one buffer each across
  // the layers.
  const size_t N = static_cast<size_t>(B) * T;
  const size_t att_saved = nx_.gqa_attention_saved_floats(B, T, NH_, KVH_, hd_);
  const size_t xent_saved = nx_.classifier_saved_floats(N, config.vocab_size, Vp);
  auto lin_saved = [&](int64_t ic, int64_t oc) {
    return nx_.linear_saved_floats(static_cast<int>(N), static_cast<int>(ic), static_cast<int>(oc));
  };
  const bool inputs_per_layer = nx_.linear_backward_reads_input();
  // The rotary tables cover the whole block, as the reference's do (their values do not
  // depend on it, but a profile's vector grouping may).
  const size_t rope_floats = nx_.rope_table_floats(config.block_size, hd_);
  layers_.resize(L);
  plan_arena(acts_arena_, [&](auto&& take) {
    rope_cos_ = take(rope_floats);
    rope_sin_ = take(rope_floats);
    no_positions_ = take(static_cast<size_t>(T) * C);  // zeros: see forward()
    embed_ = take(N * C);
    float* ln1 = inputs_per_layer ? nullptr : take(N * C);
    float* ln2 = inputs_per_layer ? nullptr : take(N * C);
    float* act = inputs_per_layer ? nullptr : take(N * F_);
    for (auto& a : layers_) {
      a.ln1 = inputs_per_layer ? take(N * C) : ln1;
      a.ln1_rstd = take(N);
      a.q = take(N * Dq_);
      a.k = take(N * Dkv_);
      a.v = take(N * Dkv_);
      a.att_saved = take(att_saved);
      a.sdpa = take(N * Dq_);
      a.res1 = take(N * C);
      a.ln2 = inputs_per_layer ? take(N * C) : ln2;
      a.ln2_rstd = take(N);
      a.gate = take(N * F_);
      a.up = take(N * F_);
      a.act = inputs_per_layer ? take(N * F_) : act;
      a.res2 = take(N * C);
      a.ln1_saved = take(std::max(lin_saved(C, Dq_), lin_saved(C, Dkv_)));
      a.o_saved = take(lin_saved(Dq_, C));
      a.ln2_saved = take(lin_saved(C, F_));
      a.down_saved = take(lin_saved(F_, C));
    }
    norm_ = take(N * C);
    norm_rstd_ = take(N);
    logits_ = take(N * Vp);
    xent_saved_ = take(xent_saved);
    head_saved_ = take(lin_saved(C, Vp));
  });
  // Step scratch: values that live within one op's forward or one layer's backward.
  plan_arena(scratch_arena_, [&](auto&& take) {
    q_pre_ = take(N * Dq_);
    k_pre_ = take(N * Dkv_);
    branch_ = take(N * C);
    d_res_ = take(N * C);
    d_tmp_ = take(N * C);
    d_ln_ = take(N * C);
    d_sdpa_ = take(N * Dq_);
    d_qrot_ = take(N * Dq_);
    d_q_ = take(N * Dq_);
    d_krot_ = take(N * Dkv_);
    d_k_ = take(N * Dkv_);
    d_v_ = take(N * Dkv_);
    d_gate_ = take(N * F_);
    d_up_ = take(N * F_);
    d_act_ = take(N * F_);
  });
  d_logits_ = logits_;  // overwritten in place by the classifier's backward
  tokens_.resize(N);
  targets_.resize(N);

  StepShape shape = step_shape(config, B, T, layout_);
  // The sibling layers: q | k | v of ln1, gate | up of ln2 (their weights lie back to back).
  shape.stacked_linear_shapes = {{Dq_ + 2 * Dkv_, shape.C}, {2 * F_, shape.C}};
  nx_.plan(shape);
  // Every sequence starts at position 0: one table for positions [0, block_size).
  nx_.rope_tables(rope_cos_, rope_sin_, config.block_size, hd_, config.rope_theta);
}

double Llama::train_flops_per_token(int T) const {
  // BENCHMARKS.md: L (2 d (d_q + 2 d_kv) + 2 d_q d + 6 d f + 2 T d_q) + 2 d V, times 3.
  const double d = config_.n_embd, L = config_.n_layer, V = config_.vocab_size;
  const double dq = Dq_, dkv = Dkv_, f = F_;
  return 3.0 * (L * (2 * d * (dq + 2 * dkv) + 2 * dq * d + 6 * d * f + 2.0 * T * dq) + 2 * d * V);
}

Llama::LayerParams Llama::layer_params(float* base, int l) const {
  const auto& t = layout_.tensors();
  auto at = [&](int k) { return base + t[layer_first_[l] + k].offset; };
  return {at(Q_W),  at(K_W),    at(V_W),   at(O_W),  at(GATE_W),
          at(UP_W), at(DOWN_W), at(LN1_W), at(LN2_W)};
}

void Llama::init_weights(uint64_t seed) {
  Rng rng(seed);
  const double std = 0.02;
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.n_layer);
  for (const auto& p : layout_.tensors()) {
    float* w = params_.data() + p.offset;
    if (p.shape.size() == 1) {  // the RMSNorm weights
      for (size_t i = 0; i < p.numel; ++i) w[i] = 1.0f;
      continue;
    }
    const bool residual = p.name.ends_with("o_proj.weight") || p.name.ends_with("down_proj.weight");
    const double s = residual ? residual_std : std;
    for (size_t i = 0; i < p.numel; ++i) w[i] = static_cast<float>(s * rng.normal());
  }
}

float Llama::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  FORGE_CHECK(B <= maxB_ && T <= maxT_, "micro-batch {}x{} exceeds the planned {}x{}", B, T, maxB_,
              maxT_);
  const int C = config_.n_embd, V = config_.vocab_size, Vp = config_.vocab_rows();
  const int L = config_.n_layer, NH = NH_, KVH = KVH_, hd = hd_, Dq = Dq_, Dkv = Dkv_, F = F_;
  const int N = B * T;
  const size_t NF = static_cast<size_t>(N) * F;
  const float eps = static_cast<float>(config_.norm_eps);
  float* P = params_.data();
  B_ = B;
  T_ = T;
  std::memcpy(tokens_.data(), tokens, sizeof(int32_t) * N);
  has_targets_ = targets != nullptr;
  if (has_targets_) std::memcpy(targets_.data(), targets, sizeof(int32_t) * N);

  // x = embed_tokens[tokens]   (no position embedding: positions enter through RoPE; the
  // shared lookup kernel adds a position row, so it is given rows of zeros)
  nx_.embedding_forward(embed_, tokens, P + embed_w_, no_positions_, B, T, C);
  record("act.embed", embed_, {B, T, C});
  const float* x = embed_;
  for (int l = 0; l < L; ++l) {
    const LayerParams w = layer_params(P, l);
    LayerActs& a = layers_[l];
    const LayerDumpName pfx{"act", l};
    // h = RMSNorm(x)
    nx_.rmsnorm_forward(a.ln1, a.ln1_rstd, x, w.ln1_w, N, C, eps);
    // q = RoPE(h Wq^T),  k = RoPE(h Wk^T),  v = h Wv^T
    nx_.linear_forward_siblings({q_pre_, k_pre_, a.v}, a.ln1_saved, a.ln1, {w.q_w, w.k_w, w.v_w},
                                {Dq, Dkv, Dkv}, N, C);
    nx_.rope_forward(a.q, q_pre_, rope_cos_, rope_sin_, B, T, NH, hd);
    nx_.rope_forward(a.k, k_pre_, rope_cos_, rope_sin_, B, T, KVH, hd);
    // y = softmax(q k^T / sqrt(hd) + causal mask) v, each kv head shared by NH/KVH q heads
    nx_.gqa_attention_forward(a.sdpa, a.att_saved, a.q, a.k, a.v, B, T, NH, KVH, hd);
    // x = x + y Wo^T   (y Wo^T on its own only for a recorder: a profile may add x to each
    // block of the product as it is written)
    nx_.linear_residual_forward(a.res1, recording() ? branch_ : nullptr, a.o_saved, a.sdpa, w.o_w,
                                nullptr, x, N, Dq, C);
    record(pfx, "input_layernorm", a.ln1, {B, T, C});
    record(pfx, "self_attn.q_proj", q_pre_, {B, T, Dq});
    record(pfx, "self_attn.k_proj", k_pre_, {B, T, Dkv});
    record(pfx, "self_attn.v_proj", a.v, {B, T, Dkv});
    record(pfx, "self_attn.q_rope", a.q, {B, T, Dq});
    record(pfx, "self_attn.k_rope", a.k, {B, T, Dkv});
    record(pfx, "self_attn.sdpa", a.sdpa, {B, T, Dq});
    record(pfx, "self_attn.o_proj", branch_, {B, T, C});
    // h = RMSNorm(x);  x = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T
    nx_.rmsnorm_forward(a.ln2, a.ln2_rstd, a.res1, w.ln2_w, N, C, eps);
    // A profile may run SwiGLU on gate | up's product as it is written, straight into the down
    // projection's input, and add the residual to the down projection's product likewise,
    // skipping act and the projection's own output, which a recorder then would not get: with
    // one, they run apart.
    if (recording()) {
      nx_.linear_forward_siblings({a.gate, a.up}, a.ln2_saved, a.ln2, {w.gate_w, w.up_w}, {F, F}, N,
                                  C);
      nx_.swiglu_forward(a.act, a.gate, a.up, NF);
      nx_.linear_residual_forward(a.res2, branch_, a.down_saved, a.act, w.down_w, nullptr, a.res1,
                                  N, F, C);
    } else {
      nx_.swiglu_mlp_forward(a.res2, a.gate, a.up, a.act, a.ln2_saved, a.down_saved, a.ln2,
                             w.gate_w, w.up_w, w.down_w, a.res1, N, C, F);
    }
    record(pfx, "res_1", a.res1, {B, T, C});
    record(pfx, "post_attention_layernorm", a.ln2, {B, T, C});
    record(pfx, "mlp.gate_proj", a.gate, {B, T, F});
    record(pfx, "mlp.up_proj", a.up, {B, T, F});
    record(pfx, "mlp.swiglu", a.act, {B, T, F});
    record(pfx, "mlp.down_proj", branch_, {B, T, C});
    record(pfx, "res_2", a.res2, {B, T, C});
    x = a.res2;
  }
  // logits = RMSNorm(x) Whead^T   (the head is its own matrix, not the embedding)
  nx_.rmsnorm_forward(norm_, norm_rstd_, x, P + norm_w_, N, C, eps);
  nx_.linear_forward(logits_, head_saved_, norm_, P + head_w_, nullptr, N, C, Vp);
  record("act.norm", norm_, {B, T, C});
  record("act.logits", logits_, {B, T, Vp});
  if (!targets) return 0.0f;
  // loss = mean over positions of -log softmax(logits)[target]
  return nx_.cross_entropy_forward(xent_saved_, logits_, targets, N, V, Vp);
}

void Llama::backward(float dloss, float* grads) {
  FORGE_CHECK(has_targets_, "backward() needs a forward() with targets");
  const int B = B_, T = T_, C = config_.n_embd, V = config_.vocab_size, Vp = config_.vocab_rows();
  const int L = config_.n_layer, NH = NH_, KVH = KVH_, hd = hd_, Dq = Dq_, Dkv = Dkv_, F = F_;
  const int N = B * T;
  const size_t NF = static_cast<size_t>(N) * F;
  float* P = params_.data();

  nx_.cross_entropy_backward(d_logits_, logits_, xent_saved_, targets_.data(), N, V, Vp, dloss);
  record("actgrad.logits", d_logits_, {B, T, Vp});
  nx_.linear_backward(d_ln_, grads + head_w_, nullptr, d_logits_, norm_, P + head_w_, head_saved_,
                      N, C, Vp);
  record("actgrad.norm", d_ln_, {B, T, C});
  const float* x_last = L > 0 ? layers_[L - 1].res2 : embed_;
  // d_res: the gradient flowing down the residual stream. It and d_tmp trade buffers after
  // each norm's backward, which writes residual + norm gradient into the other one.
  float* d_res = d_res_;
  float* d_tmp = d_tmp_;
  nx_.rmsnorm_backward(d_res, grads + norm_w_, d_ln_, x_last, P + norm_w_, norm_rstd_, N, C);
  for (int l = L - 1; l >= 0; --l) {
    const LayerParams w = layer_params(P, l);
    const LayerParams g = layer_params(grads, l);
    const LayerActs& a = layers_[l];
    const float* x_in = l > 0 ? layers_[l - 1].res2 : embed_;
    const LayerDumpName pfx{"actgrad", l};
    record(pfx, "res_2", d_res, {B, T, C});
    record(pfx, "mlp.down_proj", d_res, {B, T, C});
    // MLP branch: res2 = res1 + down(silu(gate(ln2)) * up(ln2)),  ln2 = RMSNorm(res1)
    nx_.linear_backward(d_act_, g.down_w, nullptr, d_res, a.act, w.down_w, a.down_saved, N, F, C);
    record(pfx, "mlp.swiglu", d_act_, {B, T, F});
    // d(gate), d(up) = SwiGLU's backward; ln2 feeds both projections: d(ln2) is the sum of
    // what each sends back, up's first. A profile may fuse the two steps and skip writing
    // d(gate) and d(up), which a recorder then would not get: with one, they run apart.
    if (recording()) {
      nx_.swiglu_backward(d_gate_, d_up_, d_act_, a.gate, a.up, NF);
      record(pfx, "mlp.gate_proj", d_gate_, {B, T, F});
      record(pfx, "mlp.up_proj", d_up_, {B, T, F});
      nx_.linear_backward_siblings(d_ln_, d_tmp, {g.gate_w, g.up_w}, {d_gate_, d_up_}, a.ln2,
                                   {w.gate_w, w.up_w}, a.ln2_saved, {F, F}, N, C);
    } else {
      nx_.swiglu_linear_backward(d_ln_, d_tmp, d_gate_, d_up_, g.gate_w, g.up_w, d_act_, a.gate,
                                 a.up, a.ln2, w.gate_w, w.up_w, a.ln2_saved, F, N, C);
    }
    record(pfx, "post_attention_layernorm", d_ln_, {B, T, C});
    // d(res1) = d(res2) + d(through the MLP): autograd receives the residual's term first,
    // then the norm's two (see rmsnorm_backward_residual).
    nx_.rmsnorm_backward_residual(d_tmp, g.ln2_w, d_ln_, a.res1, w.ln2_w, a.ln2_rstd, d_res, N, C);
    std::swap(d_res, d_tmp);
    record(pfx, "res_1", d_res, {B, T, C});
    record(pfx, "self_attn.o_proj", d_res, {B, T, C});
    // attention branch: res1 = x + o(attn(rope(q(ln1)), rope(k(ln1)), v(ln1))),  ln1 = RMSNorm(x)
    nx_.linear_backward(d_sdpa_, g.o_w, nullptr, d_res, a.sdpa, w.o_w, a.o_saved, N, Dq, C);
    record(pfx, "self_attn.sdpa", d_sdpa_, {B, T, Dq});
    nx_.gqa_attention_backward(d_qrot_, d_krot_, d_v_, d_sdpa_, a.q, a.k, a.v, a.sdpa, a.att_saved,
                               B, T, NH, KVH, hd);
    nx_.rope_backward(d_q_, d_qrot_, rope_cos_, rope_sin_, B, T, NH, hd);
    nx_.rope_backward(d_k_, d_krot_, rope_cos_, rope_sin_, B, T, KVH, hd);
    record(pfx, "self_attn.q_rope", d_qrot_, {B, T, Dq});
    record(pfx, "self_attn.k_rope", d_krot_, {B, T, Dkv});
    record(pfx, "self_attn.q_proj", d_q_, {B, T, Dq});
    record(pfx, "self_attn.k_proj", d_k_, {B, T, Dkv});
    record(pfx, "self_attn.v_proj", d_v_, {B, T, Dkv});
    // ln1 feeds three projections; their contributions are summed v, k, q.
    nx_.linear_backward_siblings(d_ln_, d_tmp, {g.q_w, g.k_w, g.v_w}, {d_q_, d_k_, d_v_}, a.ln1,
                                 {w.q_w, w.k_w, w.v_w}, a.ln1_saved, {Dq, Dkv, Dkv}, N, C);
    record(pfx, "input_layernorm", d_ln_, {B, T, C});
    // d(x) = d(res1) + d(through attention), in the same order.
    nx_.rmsnorm_backward_residual(d_tmp, g.ln1_w, d_ln_, x_in, w.ln1_w, a.ln1_rstd, d_res, N, C);
    std::swap(d_res, d_tmp);
  }
  record("actgrad.embed", d_res, {B, T, C});
  // The embedding is the only user of its rows here (the head is untied): start from zero,
  // since the lookup's backward accumulates.
  std::memset(grads + embed_w_, 0, sizeof(float) * layout_.tensors().front().numel);
  nx_.embedding_backward(grads + embed_w_, nullptr, d_res, tokens_.data(), B, T, C);
}

}  // namespace forge
