#include "forge/model/gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "forge/core/error.h"
#include "forge/core/rng.h"
#include "forge/core/test_bugs.h"

namespace forge {

namespace {
// Per-layer tensors, in the order nanoGPT and Hugging Face register them. This order is
// also the order of clip_grad_norm_'s per-tensor norms, so it is part of the numerics.
enum LayerTensor {
  LN1_W,
  LN1_B,
  QKV_W,
  QKV_B,
  ATTN_PROJ_W,
  ATTN_PROJ_B,
  LN2_W,
  LN2_B,
  FC_W,
  FC_B,
  MLP_PROJ_W,
  MLP_PROJ_B,
  TENSORS_PER_LAYER
};
}  // namespace

Gpt2::Gpt2(const ModelConfig& config, int B, int T, Numerics& numerics)
    : config_(config), maxB_(B), maxT_(T), nx_(numerics) {
  const int64_t C = config.n_embd, Vp = config.vocab_rows(), L = config.n_layer;
  if (config.family != "gpt2")
    fail("model.family: the GPT-2 model cannot run family '{}'", config.family);
  // The checks a config file gets (heads dividing the width, no llama-only knobs), for a config
  // made in code too.
  validate_model_config(config, "the GPT-2 model's config");
  FORGE_CHECK(T <= config.block_size, "T={} exceeds block_size={}", T, config.block_size);

  // Parameters: one flat buffer, named views in Hugging Face's names.
  // wte is both the token embedding and the LM head's weight (tied).
  wte_ = layout_.add_linear_weight("transformer.wte.weight", {Vp, C}, false);
  wpe_ = layout_.add("transformer.wpe.weight", {config.block_size, C}, false, true);
  for (int l = 0; l < L; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    layer_offsets_.push_back(layout_.add(p + "ln_1.weight", {C}, false, false));
    layout_.add(p + "ln_1.bias", {C}, false, false);
    layout_.add_linear_weight(p + "attn.c_attn.weight", {3 * C, C}, true);
    layout_.add(p + "attn.c_attn.bias", {3 * C}, false, false);
    layout_.add_linear_weight(p + "attn.c_proj.weight", {C, C}, true);
    layout_.add(p + "attn.c_proj.bias", {C}, false, false);
    layout_.add(p + "ln_2.weight", {C}, false, false);
    layout_.add(p + "ln_2.bias", {C}, false, false);
    layout_.add_linear_weight(p + "mlp.c_fc.weight", {4 * C, C}, true);
    layout_.add(p + "mlp.c_fc.bias", {4 * C}, false, false);
    layout_.add_linear_weight(p + "mlp.c_proj.weight", {C, 4 * C}, true);
    layout_.add(p + "mlp.c_proj.bias", {C}, false, false);
  }
  lnf_w_ = layout_.add("transformer.ln_f.weight", {C}, false, false);
  lnf_b_ = layout_.add("transformer.ln_f.bias", {C}, false, false);
  params_.resize(layout_.total_floats());

  // Activations: planned once for the largest micro-batch. Per layer, what backward reads;
  // one buffer shared by all layers for what only a layer's forward uses: the projections'
  // outputs (added into the residual stream) and, when the profile's linear layers keep
  // their own copy of their input for backward, those inputs (ln_1, ln_2, GELU).
  const size_t N = static_cast<size_t>(B) * T;
  const size_t att_saved = nx_.attention_saved_floats(B, T, C, config.n_head);
  const size_t xent_saved = nx_.classifier_saved_floats(N, config.vocab_size, Vp);
  auto lin_saved = [&](int64_t ic, int64_t oc) {
    return nx_.linear_saved_floats(static_cast<int>(N), static_cast<int>(ic), static_cast<int>(oc));
  };
  const bool inputs_per_layer = nx_.linear_backward_reads_input();
  layers_.resize(L);
  plan_arena(acts_arena_, [&](auto&& take) {
    embed_ = take(N * C);
    float* attn_proj = take(N * C);
    float* mlp_proj = take(N * C);
    float* ln1 = inputs_per_layer ? nullptr : take(N * C);
    float* ln2 = inputs_per_layer ? nullptr : take(N * C);
    float* gelu = inputs_per_layer ? nullptr : take(N * 4 * C);
    for (auto& a : layers_) {
      a.ln1 = inputs_per_layer ? take(N * C) : ln1;
      a.ln1_mean = take(N);
      a.ln1_rstd = take(N);
      a.qkv = take(N * 3 * C);
      a.att_saved = take(att_saved);
      a.sdpa = take(N * C);
      a.attn_proj = attn_proj;
      a.res1 = take(N * C);
      a.ln2 = inputs_per_layer ? take(N * C) : ln2;
      a.ln2_mean = take(N);
      a.ln2_rstd = take(N);
      a.fc = take(N * 4 * C);
      a.gelu = inputs_per_layer ? take(N * 4 * C) : gelu;
      a.mlp_proj = mlp_proj;
      a.res2 = take(N * C);
      a.qkv_saved = take(lin_saved(C, 3 * C));
      a.attn_proj_saved = take(lin_saved(C, C));
      a.fc_saved = take(lin_saved(C, 4 * C));
      a.mlp_proj_saved = take(lin_saved(4 * C, C));
    }
    lnf_ = take(N * C);
    lnf_mean_ = take(N);
    lnf_rstd_ = take(N);
    logits_ = take(N * Vp);
    xent_saved_ = take(xent_saved);
    head_saved_ = take(lin_saved(C, Vp));
  });
  // Backward's scratch: gradients that live within one layer's backward.
  plan_arena(scratch_arena_, [&](auto&& take) {
    d_res_ = take(N * C);
    d_tmp_ = take(N * C);
    d_ln_ = take(N * C);
    d_sdpa_ = take(N * C);
    d_qkv_ = take(N * 3 * C);
    d_fc_ = take(N * 4 * C);
    d_gelu_ = take(N * 4 * C);
  });
  d_logits_ = logits_;  // overwritten in place by the classifier's backward
  tokens_.resize(N);
  targets_.resize(N);
  kv_cache_.resize(static_cast<size_t>(L) * 2 * T * C);
  plan_arena(decode_arena_, [&](auto&& take) {
    dec_.x = take(C);
    dec_.ln = take(C);
    dec_.ln_stats = take(2);
    dec_.qkv = take(3 * C);
    dec_.y = take(C);
    dec_.proj = take(C);
    dec_.fc = take(4 * C);
    dec_.gelu = take(4 * C);
    dec_.logits = take(Vp);
    dec_.scores = take(T);
  });

  nx_.plan(step_shape(config, B, T, layout_));
}

double Gpt2::train_flops_per_token(int T) const {
  const double d = config_.n_embd, L = config_.n_layer, V = config_.vocab_size;
  return 3.0 * (L * (24.0 * d * d + 2.0 * T * d) + 2.0 * d * V);
}

Gpt2::LayerParams Gpt2::layer_params(float* base, int l) const {
  const auto& t = layout_.tensors();
  const size_t first = 2 + static_cast<size_t>(l) * TENSORS_PER_LAYER;
  auto at = [&](int k) { return base + t[first + k].offset; };
  return {at(LN1_W), at(LN1_B), at(QKV_W), at(QKV_B), at(ATTN_PROJ_W), at(ATTN_PROJ_B),
          at(LN2_W), at(LN2_B), at(FC_W),  at(FC_B),  at(MLP_PROJ_W),  at(MLP_PROJ_B)};
}

void Gpt2::init_weights(uint64_t seed) {
  Rng rng(seed);
  const double std = 0.02;
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.n_layer);
  for (const auto& p : layout_.tensors()) {
    float* w = params_.data() + p.offset;
    const bool is_norm = p.name.find(".ln_") != std::string::npos;
    const bool is_bias = p.name.ends_with(".bias");
    if (is_norm && !is_bias) {
      for (size_t i = 0; i < p.numel; ++i) w[i] = 1.0f;
    } else if (is_bias) {
      for (size_t i = 0; i < p.numel; ++i) w[i] = 0.0f;
    } else {
      const bool residual = p.name.ends_with("c_proj.weight");
      const double s = residual ? residual_std : std;
      for (size_t i = 0; i < p.numel; ++i) w[i] = static_cast<float>(s * rng.normal());
    }
  }
}

float Gpt2::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  FORGE_CHECK(B <= maxB_ && T <= maxT_, "micro-batch {}x{} exceeds the planned {}x{}", B, T, maxB_,
              maxT_);
  const int C = config_.n_embd, NH = config_.n_head, V = config_.vocab_size;
  const int Vp = config_.vocab_rows(), L = config_.n_layer;
  const int N = B * T;
  const float eps = static_cast<float>(config_.norm_eps);
  float* P = params_.data();
  B_ = B;
  T_ = T;
  std::memcpy(tokens_.data(), tokens, sizeof(int32_t) * N);
  has_targets_ = targets != nullptr;
  if (has_targets_) std::memcpy(targets_.data(), targets, sizeof(int32_t) * N);

  // x = wte[tokens] + wpe[positions]
  nx_.embedding_forward(embed_, tokens, P + wte_, P + wpe_, B, T, C);
  record("act.embed", embed_, {B, T, C});
  const float* x = embed_;
  for (int l = 0; l < L; ++l) {
    const LayerParams w = layer_params(P, l);
    LayerActs& a = layers_[l];
    const LayerDumpName h{"act", l};
    // x = x + c_proj(attention(c_attn(ln_1(x))))
    nx_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C, eps);
    nx_.linear_forward(a.qkv, a.qkv_saved, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C);
    test_bug_scale_queries(a.qkv, N, C, 1.25f);  // no-op unless a test asks for the bug
    nx_.attention_forward(a.sdpa, a.att_saved, a.qkv, B, T, C, NH);
    test_bug_scale_queries(a.qkv, N, C, 1.0f / 1.25f);
    // (c_proj's output on its own only for a recorder: a profile may add x to each block of the
    // product as it is written; likewise below)
    nx_.linear_residual_forward(a.res1, recording() ? a.attn_proj : nullptr, a.attn_proj_saved,
                                a.sdpa, w.attn_proj_w, w.attn_proj_b, x, N, C, C);
    // x = x + c_proj(gelu(c_fc(ln_2(x))))
    nx_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1, w.ln2_w, w.ln2_b, N, C, eps);
    nx_.linear_gelu_forward(a.fc, a.gelu, a.fc_saved, a.ln2, w.fc_w, w.fc_b, N, C, 4 * C);
    nx_.linear_residual_forward(a.res2, recording() ? a.mlp_proj : nullptr, a.mlp_proj_saved,
                                a.gelu, w.mlp_proj_w, w.mlp_proj_b, a.res1, N, 4 * C, C);
    record(h, "ln_1", a.ln1, {B, T, C});
    record(h, "attn.c_attn", a.qkv, {B, T, 3 * C});
    record(h, "attn.sdpa", a.sdpa, {B, T, C});
    record(h, "attn.c_proj", a.attn_proj, {B, T, C});
    record(h, "res_1", a.res1, {B, T, C});
    record(h, "ln_2", a.ln2, {B, T, C});
    record(h, "mlp.c_fc", a.fc, {B, T, 4 * C});
    record(h, "mlp.gelu", a.gelu, {B, T, 4 * C});
    record(h, "mlp.c_proj", a.mlp_proj, {B, T, C});
    record(h, "res_2", a.res2, {B, T, C});
    x = a.res2;
  }
  // logits = ln_f(x) wte^T   (the LM head is tied to the token embedding)
  nx_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, P + lnf_w_, P + lnf_b_, N, C, eps);
  nx_.linear_forward(logits_, head_saved_, lnf_, P + wte_, nullptr, N, C, Vp);
  record("act.ln_f", lnf_, {B, T, C});
  record("act.logits", logits_, {B, T, Vp});
  if (!targets) return 0.0f;
  // loss = mean over positions of -log softmax(logits)[target]
  return nx_.cross_entropy_forward(xent_saved_, logits_, targets, N, V, Vp);
}

void Gpt2::backward(float dloss, float* grads) {
  FORGE_CHECK(has_targets_, "backward() needs a forward() with targets");
  const int B = B_, T = T_, C = config_.n_embd, NH = config_.n_head;
  const int V = config_.vocab_size, Vp = config_.vocab_rows(), L = config_.n_layer;
  const int N = B * T;
  float* P = params_.data();

  nx_.cross_entropy_backward(d_logits_, logits_, xent_saved_, targets_.data(), N, V, Vp, dloss);
  record("actgrad.logits", d_logits_, {B, T, Vp});
  // The LM head writes d(wte) first; the embedding adds its part at the very end.
  nx_.linear_backward(d_ln_, grads + wte_, nullptr, d_logits_, lnf_, P + wte_, head_saved_, N, C,
                      Vp);
  record("actgrad.ln_f", d_ln_, {B, T, C});
  const float* x_last = L > 0 ? layers_[L - 1].res2 : embed_;
  // d_res: the gradient flowing down the residual stream.
  nx_.layernorm_backward(d_res_, grads + lnf_w_, grads + lnf_b_, d_ln_, x_last, P + lnf_w_,
                         lnf_mean_, lnf_rstd_, N, C);
  for (int l = L - 1; l >= 0; --l) {
    const LayerParams w = layer_params(P, l);
    const LayerParams g = layer_params(grads, l);
    const LayerActs& a = layers_[l];
    const float* x_in = l > 0 ? layers_[l - 1].res2 : embed_;
    const LayerDumpName h{"actgrad", l};
    record(h, "res_2", d_res_, {B, T, C});
    record(h, "mlp.c_proj", d_res_, {B, T, C});
    // MLP branch: res2 = res1 + c_proj(gelu(c_fc(ln_2(res1))))
    nx_.linear_backward(d_gelu_, g.mlp_proj_w, g.mlp_proj_b, d_res_, a.gelu, w.mlp_proj_w,
                        a.mlp_proj_saved, N, 4 * C, C);
    record(h, "mlp.gelu", d_gelu_, {B, T, 4 * C});
    // A profile may fuse GELU's backward into c_fc's and skip writing d(c_fc), which a
    // recorder then would not get: with one, they run apart.
    if (recording()) {
      nx_.gelu_backward(d_fc_, a.fc, d_gelu_, static_cast<size_t>(N) * 4 * C);
      record(h, "mlp.c_fc", d_fc_, {B, T, 4 * C});
      nx_.linear_backward(d_ln_, g.fc_w, g.fc_b, d_fc_, a.ln2, w.fc_w, a.fc_saved, N, C, 4 * C);
    } else {
      nx_.gelu_linear_backward(d_ln_, g.fc_w, g.fc_b, d_fc_, d_gelu_, a.fc, a.ln2, w.fc_w,
                               a.fc_saved, N, C, 4 * C);
    }
    record(h, "ln_2", d_ln_, {B, T, C});
    // d(res1) = d(res2) + d(through ln_2)
    nx_.layernorm_backward_residual(d_tmp_, g.ln2_w, g.ln2_b, d_ln_, a.res1, w.ln2_w, a.ln2_mean,
                                    a.ln2_rstd, d_res_, N, C);
    std::swap(d_res_, d_tmp_);
    record(h, "res_1", d_res_, {B, T, C});
    record(h, "attn.c_proj", d_res_, {B, T, C});
    // attention branch: res1 = x + c_proj(attention(c_attn(ln_1(x))))
    nx_.linear_backward(d_sdpa_, g.attn_proj_w, g.attn_proj_b, d_res_, a.sdpa, w.attn_proj_w,
                        a.attn_proj_saved, N, C, C);
    record(h, "attn.sdpa", d_sdpa_, {B, T, C});
    nx_.attention_backward(d_qkv_, d_sdpa_, a.qkv, a.sdpa, a.att_saved, B, T, C, NH);
    record(h, "attn.c_attn", d_qkv_, {B, T, 3 * C});
    nx_.linear_backward(d_ln_, g.qkv_w, g.qkv_b, d_qkv_, a.ln1, w.qkv_w, a.qkv_saved, N, C, 3 * C);
    record(h, "ln_1", d_ln_, {B, T, C});
    // d(x) = d(res1) + d(through ln_1)
    nx_.layernorm_backward_residual(d_tmp_, g.ln1_w, g.ln1_b, d_ln_, x_in, w.ln1_w, a.ln1_mean,
                                    a.ln1_rstd, d_res_, N, C);
    std::swap(d_res_, d_tmp_);
  }
  record("actgrad.embed", d_res_, {B, T, C});
  const int32_t* tokens = tokens_.data();
  nx_.embedding_backward(grads + wte_, grads + wpe_, d_res_, tokens, B, T, C);
  // wpe rows beyond T receive no gradient.
  std::memset(grads + wpe_ + static_cast<size_t>(T) * C, 0,
              sizeof(float) * static_cast<size_t>(config_.block_size - T) * C);
}

const float* Gpt2::decode_step(int32_t token, int pos) {
  const int C = config_.n_embd, NH = config_.n_head, hd = C / NH, Vp = config_.vocab_rows();
  const float eps = static_cast<float>(config_.norm_eps);
  FORGE_CHECK(pos < maxT_, "decode position {} beyond the planned context of {}", pos, maxT_);
  FORGE_CHECK(token >= 0 && token < config_.vocab_size, "token {} outside the vocabulary", token);
  float* P = params_.data();
  auto [x, ln, stats, qkv, y, proj, fc, gelu, logits, scores] = dec_;
  // x = wte[token] + wpe[pos]
  for (int c = 0; c < C; ++c)
    x[c] =
        P[wte_ + static_cast<size_t>(token) * C + c] + P[wpe_ + static_cast<size_t>(pos) * C + c];
  for (int l = 0; l < config_.n_layer; ++l) {
    const LayerParams w = layer_params(P, l);
    float* keys = kv_cache_.data() + static_cast<size_t>(l) * 2 * maxT_ * C;
    float* values = keys + static_cast<size_t>(maxT_) * C;
    nx_.layernorm_forward(ln, stats, stats + 1, x, w.ln1_w, w.ln1_b, 1, C, eps);
    nx_.linear_forward(qkv, nullptr, ln, w.qkv_w, w.qkv_b, 1, C, 3 * C);
    std::memcpy(keys + static_cast<size_t>(pos) * C, qkv + C, sizeof(float) * C);
    std::memcpy(values + static_cast<size_t>(pos) * C, qkv + 2 * C, sizeof(float) * C);
    // One query against the cached keys: softmax(q k^T / sqrt(hd)) v, per head.
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + h * hd;
      float maxv = -INFINITY;
      for (int s = 0; s <= pos; ++s) {
        const float* k = keys + static_cast<size_t>(s) * C + h * hd;
        float dot = 0;
        for (int i = 0; i < hd; ++i) dot += q[i] * k[i];
        scores[s] = dot * scale;
        maxv = std::max(maxv, scores[s]);
      }
      float total = 0;
      for (int s = 0; s <= pos; ++s) total += (scores[s] = std::exp(scores[s] - maxv));
      float* out = y + h * hd;
      for (int i = 0; i < hd; ++i) out[i] = 0;
      for (int s = 0; s <= pos; ++s) {
        const float p = scores[s] / total;
        const float* v = values + static_cast<size_t>(s) * C + h * hd;
        for (int i = 0; i < hd; ++i) out[i] += p * v[i];
      }
    }
    nx_.linear_forward(proj, nullptr, y, w.attn_proj_w, w.attn_proj_b, 1, C, C);
    nx_.add(x, x, proj, C);
    nx_.layernorm_forward(ln, stats, stats + 1, x, w.ln2_w, w.ln2_b, 1, C, eps);
    nx_.linear_forward(fc, nullptr, ln, w.fc_w, w.fc_b, 1, C, 4 * C);
    nx_.gelu_forward(gelu, fc, 4 * C);
    nx_.linear_forward(proj, nullptr, gelu, w.mlp_proj_w, w.mlp_proj_b, 1, 4 * C, C);
    nx_.add(x, x, proj, C);
  }
  nx_.layernorm_forward(ln, stats, stats + 1, x, P + lnf_w_, P + lnf_b_, 1, C, eps);
  nx_.linear_forward(logits, nullptr, ln, P + wte_, nullptr, 1, C, Vp);
  return logits;
}

}  // namespace forge
