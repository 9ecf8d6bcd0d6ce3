// The Llama model: the engine's analytic gradients (fp32, `fast` profile) against central
// finite differences of an independent float64 Llama written here from the equations
// (Hugging Face's LlamaForCausalLM: RMSNorm, rotate_half RoPE, grouped-query attention,
// SwiGLU, untied head), on a tiny config with awkward sizes and a padded vocabulary; plus
// its parameter names, shapes and initialisation.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "forge/core/error.h"
#include "forge/core/rng.h"
#include "forge/model/llama.h"
#include "forge/model/model.h"
#include "forge/numerics/numerics.h"
#include "gradcheck_util.h"

namespace forge {
namespace {

struct Tiny {
  ModelConfig cfg;
  int B = 2, T = 5;
  std::vector<int32_t> tokens, targets;
  Tiny() {
    cfg.family = "llama";
    cfg.vocab_size = 11;
    cfg.padded_vocab_size = 16;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_kv_head = 2;
    cfg.n_embd = 16;  // head dim 4
    cfg.ffn_hidden = 10;
    cfg.block_size = 7;
    cfg.rope_theta = 50.0;  // fast-turning angles, so that positions matter in 5 steps
    cfg.norm_eps = 1e-5;
    Rng rng(5);
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
      targets.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
    }
  }
};

using Vec = std::vector<double>;

// The float64 model: reads the parameters through the engine's layout (names and shapes).
class LlamaFloat64 {
 public:
  LlamaFloat64(const Tiny& t, const ParamLayout& layout) : t_(t), layout_(layout) {}

  double loss(const Vec& p) const {
    const ModelConfig& m = t_.cfg;
    const int B = t_.B, T = t_.T, C = m.n_embd, NH = m.n_head, KVH = m.n_kv_head;
    const int hd = C / NH, half = hd / 2, F = m.ffn_hidden, V = m.vocab_size, Vp = m.vocab_rows();
    const int N = B * T;
    auto W = [&](const std::string& name) { return p.data() + layout_.find(name).offset; };
    Vec x(N * C);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        x[n * C + c] = W("model.embed_tokens.weight")[t_.tokens[n] * C + c];
    auto rmsnorm = [&](const Vec& in, const double* w) {
      Vec out(in.size());
      for (int n = 0; n < N; ++n) {
        double ms = 0;
        for (int c = 0; c < C; ++c) ms += in[n * C + c] * in[n * C + c] / C;
        for (int c = 0; c < C; ++c)
          out[n * C + c] = w[c] * in[n * C + c] / std::sqrt(ms + m.norm_eps);
      }
      return out;
    };
    auto linear = [&](const Vec& in, int IC, const double* w, int OC) {
      Vec out(static_cast<size_t>(N) * OC);
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
          double s = 0;
          for (int i = 0; i < IC; ++i) s += in[n * IC + i] * w[o * IC + i];
          out[n * OC + o] = s;
        }
      return out;
    };
    // Rotate each head's halves by the angle t * theta^(-2i/hd).
    auto rope = [&](Vec v, int heads) {
      for (int n = 0; n < N; ++n)
        for (int h = 0; h < heads; ++h) {
          double* u = &v[(n * heads + h) * hd];
          for (int i = 0; i < half; ++i) {
            const double a = (n % T) * std::pow(m.rope_theta, -2.0 * i / hd);
            const double x1 = u[i], x2 = u[i + half];
            u[i] = x1 * std::cos(a) - x2 * std::sin(a);
            u[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
          }
        }
      return v;
    };
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      auto h = rmsnorm(x, W(pre + "input_layernorm.weight"));
      auto q = rope(linear(h, C, W(pre + "self_attn.q_proj.weight"), NH * hd), NH);
      auto k = rope(linear(h, C, W(pre + "self_attn.k_proj.weight"), KVH * hd), KVH);
      auto v = linear(h, C, W(pre + "self_attn.v_proj.weight"), KVH * hd);
      Vec y(N * NH * hd, 0.0);
      for (int b = 0; b < B; ++b)
        for (int hh = 0; hh < NH; ++hh) {
          const int g = hh / (NH / KVH);  // repeat_kv: consecutive query heads share a kv head
          for (int t = 0; t < T; ++t) {
            const double* qv = &q[((b * T + t) * NH + hh) * hd];
            std::vector<double> att(t + 1);
            double mx = -1e300, z = 0;
            for (int s = 0; s <= t; ++s) {
              const double* kv = &k[((b * T + s) * KVH + g) * hd];
              double d = 0;
              for (int i = 0; i < hd; ++i) d += qv[i] * kv[i];
              att[s] = d / std::sqrt(static_cast<double>(hd));
              mx = std::max(mx, att[s]);
            }
            for (int s = 0; s <= t; ++s) z += (att[s] = std::exp(att[s] - mx));
            for (int s = 0; s <= t; ++s)
              for (int i = 0; i < hd; ++i)
                y[((b * T + t) * NH + hh) * hd + i] +=
                    att[s] / z * v[((b * T + s) * KVH + g) * hd + i];
          }
        }
      auto o = linear(y, NH * hd, W(pre + "self_attn.o_proj.weight"), C);
      for (int i = 0; i < N * C; ++i) x[i] += o[i];
      auto h2 = rmsnorm(x, W(pre + "post_attention_layernorm.weight"));
      auto gate = linear(h2, C, W(pre + "mlp.gate_proj.weight"), F);
      auto up = linear(h2, C, W(pre + "mlp.up_proj.weight"), F);
      for (size_t i = 0; i < gate.size(); ++i)
        gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      auto down = linear(gate, F, W(pre + "mlp.down_proj.weight"), C);
      for (int i = 0; i < N * C; ++i) x[i] += down[i];
    }
    auto logits = linear(rmsnorm(x, W("model.norm.weight")), C, W("lm_head.weight"), Vp);
    return forge_test::mean_cross_entropy(logits, N, V, Vp, t_.targets);
  }

 private:
  const Tiny& t_;
  const ParamLayout& layout_;
};

TEST(LlamaModel, GradientsMatchFiniteDifferencesInFloat64) {
  Tiny tiny;
  auto nx = make_numerics("fast");
  Llama model(tiny.cfg, tiny.B, tiny.T, *nx);
  model.init_weights(3);
  // Move every parameter off its initial value so that the norm weights (all 1) and the
  // small residual projections are exercised too.
  forge_test::perturb_params(model, 11, 0.2);

  LlamaFloat64 ref(tiny, model.layout());
  // Every tensor must have a gradient (allow_zero_gradient is off), and all are checked.
  const auto [grads, checked] = forge_test::check_whole_model(
      model, tiny.tokens, tiny.targets, tiny.B, tiny.T, [&](const Vec& p) { return ref.loss(p); });
  EXPECT_EQ(checked, 1 + 9 * tiny.cfg.n_layer + 2);
  // Padded vocabulary rows: no gradient into the embedding or the head.
  const auto& emb = model.layout().find("model.embed_tokens.weight");
  const auto& head = model.layout().find("lm_head.weight");
  for (int64_t r = tiny.cfg.vocab_size; r < tiny.cfg.vocab_rows(); ++r)
    for (int c = 0; c < tiny.cfg.n_embd; ++c) {
      EXPECT_EQ(grads[emb.offset + r * tiny.cfg.n_embd + c], 0.0f);
      EXPECT_EQ(grads[head.offset + r * tiny.cfg.n_embd + c], 0.0f);
    }
}

// Three layers of 8 heads over 2 kv heads, C = 128, SwiGLU width 352, 256 tokens.
ModelConfig llama_c128() {
  ModelConfig m;
  m.family = "llama";
  m.vocab_size = 256;
  m.n_layer = 3;
  m.n_head = 8;
  m.n_kv_head = 2;
  m.n_embd = 128;
  m.ffn_hidden = 352;
  m.block_size = 32;
  return m;
}

TEST(LlamaModel, ParametersHaveHuggingFaceNamesShapesAndInit) {
  const ModelConfig m = llama_c128();
  auto nx = make_numerics("fast");
  Llama model(m, 1, 16, *nx);
  const auto& t = model.layout().tensors();
  ASSERT_EQ(t.size(), 1u + 9 * 3 + 2);
  EXPECT_EQ(t[0].name, "model.embed_tokens.weight");
  const std::vector<std::pair<std::string, std::vector<int64_t>>> layer1 = {
      {"model.layers.1.self_attn.q_proj.weight", {128, 128}},
      {"model.layers.1.self_attn.k_proj.weight", {32, 128}},
      {"model.layers.1.self_attn.v_proj.weight", {32, 128}},
      {"model.layers.1.self_attn.o_proj.weight", {128, 128}},
      {"model.layers.1.mlp.gate_proj.weight", {352, 128}},
      {"model.layers.1.mlp.up_proj.weight", {352, 128}},
      {"model.layers.1.mlp.down_proj.weight", {128, 352}},
      {"model.layers.1.input_layernorm.weight", {128}},
      {"model.layers.1.post_attention_layernorm.weight", {128}}};
  for (size_t i = 0; i < layer1.size(); ++i) {
    EXPECT_EQ(t[10 + i].name, layer1[i].first);
    EXPECT_EQ(t[10 + i].shape, layer1[i].second) << layer1[i].first;
    EXPECT_FALSE(t[10 + i].file_transposed) << "nn.Linear layout in files too";
    EXPECT_EQ(t[10 + i].decay, layer1[i].second.size() == 2) << layer1[i].first;
    // What the bf16 profile plans an operand slot for: every weight a linear layer multiplies.
    EXPECT_EQ(t[10 + i].linear, layer1[i].second.size() == 2) << layer1[i].first;
  }
  EXPECT_FALSE(t[0].linear) << "the embedding is only looked up";
  EXPECT_TRUE(t.back().linear) << "the LM head";
  EXPECT_EQ(model.layout().linear_weights(), 7 * 3 + 1);
  EXPECT_EQ(model.layout().linear_weight_floats(),
            size_t(3) * (2 * 128 * 128 + 2 * 32 * 128 + 3 * 352 * 128) + 256 * 128);
  EXPECT_EQ(t[t.size() - 2].name, "model.norm.weight");
  EXPECT_EQ(t.back().name, "lm_head.weight");
  EXPECT_EQ(t.back().shape, (std::vector<int64_t>{256, 128}));

  model.init_weights(7);
  auto stddev = [&](const std::string& name) {
    const auto& s = model.layout().find(name);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < s.numel; ++i) {
      sum += model.params()[s.offset + i];
      sq += double(model.params()[s.offset + i]) * model.params()[s.offset + i];
    }
    return std::sqrt(sq / s.numel - (sum / s.numel) * (sum / s.numel));
  };
  EXPECT_NEAR(stddev("model.embed_tokens.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("lm_head.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("model.layers.0.mlp.gate_proj.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("model.layers.2.self_attn.o_proj.weight"), 0.02 / std::sqrt(6.0), 0.0005);
  EXPECT_NEAR(stddev("model.layers.2.mlp.down_proj.weight"), 0.02 / std::sqrt(6.0), 0.0005);
  const auto& norm = model.layout().find("model.layers.1.input_layernorm.weight");
  for (size_t i = 0; i < norm.numel; ++i) ASSERT_EQ(model.params()[norm.offset + i], 1.0f);
  // The untied head is its own draw, not a copy of the embedding.
  EXPECT_NE(model.params()[t.back().offset], model.params()[t[0].offset]);

  // BENCHMARKS.md's llama formula: d=128, d_q=128, d_kv=32, f=352, T=16, V=256, L=3.
  const double fwd =
      3 * (2.0 * 128 * (128 + 64) + 2.0 * 128 * 128 + 6.0 * 128 * 352 + 2.0 * 16 * 128) +
      2.0 * 128 * 256;
  EXPECT_DOUBLE_EQ(model.train_flops_per_token(16), 3 * fwd);
}

// step_shape(), the plan both families hand their numerics profile (Llama adds its sibling
// layers to it): each family's own kv heads and MLP width, the real and padded vocabulary, and
// one linear shape per linear weight of the layout.
TEST(LlamaModel, StepShapeFollowsTheFamily) {
  ModelConfig m = llama_c128();
  m.vocab_size = 250;
  m.padded_vocab_size = 256;
  auto nx = make_numerics("fast");
  const auto llama = make_model(m, 2, 16, *nx);
  StepShape s = step_shape(m, 2, 16, llama->layout());
  EXPECT_EQ(s.B, 2);
  EXPECT_EQ(s.T, 16);
  EXPECT_EQ(s.C, 128);
  EXPECT_EQ(s.NH, 8);
  EXPECT_EQ(s.n_kv_head, 2);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_EQ(s.ffn, 352);
  EXPECT_EQ(s.V, 250);
  EXPECT_EQ(s.Vp, 256);
  EXPECT_EQ(s.L, 3);
  EXPECT_TRUE(s.llama);
  EXPECT_EQ(s.linear_weights, 7 * 3 + 1) << "seven per layer and the untied head";
  EXPECT_EQ(s.linear_shapes.size(), static_cast<size_t>(s.linear_weights));
  EXPECT_EQ(s.linear_shapes.back(), (std::array<int, 2>{256, 128})) << "the head, last";
  EXPECT_TRUE(s.stacked_linear_shapes.empty()) << "the family's to add";

  m.family = "gpt2";
  m.n_kv_head = 0;
  m.ffn_hidden = 0;
  const auto gpt2 = make_model(m, 2, 16, *nx);
  s = step_shape(m, 2, 16, gpt2->layout());
  EXPECT_EQ(s.n_kv_head, 8);
  EXPECT_EQ(s.ffn, 4 * 128);
  EXPECT_FALSE(s.llama);
  EXPECT_EQ(s.linear_weights, 4 * 3 + 1) << "four per layer and the tied embedding";
  EXPECT_EQ(s.linear_shapes.size(), static_cast<size_t>(s.linear_weights));
}

TEST(LlamaModel, RejectsConfigsItCannotRun) {
  ModelConfig m;
  m.family = "llama";
  m.n_embd = 64;
  m.n_head = 4;
  m.block_size = 16;
  auto nx = make_numerics("fast");
  m.ffn_hidden = 0;
  EXPECT_THROW(Llama(m, 1, 8, *nx), Error);
  m.ffn_hidden = 96;
  m.n_kv_head = 3;
  EXPECT_THROW(Llama(m, 1, 8, *nx), Error);
  m.n_kv_head = 2;
  m.n_embd = 72;
  m.n_head = 8;  // head dim 9: odd, no rotary pairs
  EXPECT_THROW(Llama(m, 1, 8, *nx), Error);
  m.n_embd = 64;
  m.n_head = 0;  // a division by zero before validate_model_config checked sizes first
  EXPECT_THROW(Llama(m, 1, 8, *nx), Error);
  m.n_head = 4;
  m.family = "gpt2";
  EXPECT_THROW(Llama(m, 1, 8, *nx), Error);
}

}  // namespace
}  // namespace forge
