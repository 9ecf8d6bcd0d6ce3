// Whole-model gradient check: the engine's analytic gradients (fp32, `fast` profile) against
// central finite differences of an independent float64 GPT-2 written here from the
// equations, on a tiny config with awkward sizes and a padded vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "forge/core/rng.h"
#include "forge/model/gpt2.h"
#include "forge/numerics/numerics.h"
#include "gradcheck_util.h"

namespace forge {
namespace {

struct Tiny {
  ModelConfig cfg;
  int B = 2, T = 5;
  std::vector<int32_t> tokens, targets;
  Tiny() {
    cfg.vocab_size = 11;
    cfg.padded_vocab_size = 16;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 6;
    cfg.block_size = 7;
    Rng rng(5);
    for (int i = 0; i < B * T; ++i) {
      tokens.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
      targets.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
    }
  }
};

// The float64 model: reads parameters through the engine's layout (names and shapes).
class Gpt2Float64 {
 public:
  Gpt2Float64(const Tiny& t, const ParamLayout& layout) : t_(t), layout_(layout) {}

  double loss(const std::vector<double>& p) const {
    const ModelConfig& m = t_.cfg;
    const int B = t_.B, T = t_.T, C = m.n_embd, NH = m.n_head, hd = C / NH, V = m.vocab_size;
    const int N = B * T, Vp = m.vocab_rows();
    auto W = [&](const std::string& name) { return p.data() + layout_.find(name).offset; };
    std::vector<double> x(N * C);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        x[n * C + c] = W("transformer.wte.weight")[t_.tokens[n] * C + c] +
                       W("transformer.wpe.weight")[(n % T) * C + c];
    auto layernorm = [&](const std::vector<double>& in, const double* w, const double* b) {
      std::vector<double> out(in.size());
      for (int n = 0; n < N; ++n) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; ++c) mean += in[n * C + c] / C;
        for (int c = 0; c < C; ++c) var += (in[n * C + c] - mean) * (in[n * C + c] - mean) / C;
        const double rstd = 1.0 / std::sqrt(var + m.norm_eps);
        for (int c = 0; c < C; ++c) out[n * C + c] = (in[n * C + c] - mean) * rstd * w[c] + b[c];
      }
      return out;
    };
    auto linear = [&](const std::vector<double>& in, int IC, const double* w, const double* b,
                      int OC) {
      std::vector<double> out(static_cast<size_t>(N) * OC);
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
          double s = b ? b[o] : 0.0;
          for (int i = 0; i < IC; ++i) s += in[n * IC + i] * w[o * IC + i];
          out[n * OC + o] = s;
        }
      return out;
    };
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = "transformer.h." + std::to_string(l) + ".";
      auto ln1 = layernorm(x, W(h + "ln_1.weight"), W(h + "ln_1.bias"));
      auto qkv = linear(ln1, C, W(h + "attn.c_attn.weight"), W(h + "attn.c_attn.bias"), 3 * C);
      std::vector<double> y(N * C, 0.0);
      for (int b = 0; b < B; ++b)
        for (int hh = 0; hh < NH; ++hh)
          for (int t = 0; t < T; ++t) {
            const double* q = &qkv[(b * T + t) * 3 * C + hh * hd];
            std::vector<double> att(t + 1);
            double mx = -1e300, z = 0;
            for (int s = 0; s <= t; ++s) {
              const double* k = &qkv[(b * T + s) * 3 * C + C + hh * hd];
              double d = 0;
              for (int i = 0; i < hd; ++i) d += q[i] * k[i];
              att[s] = d / std::sqrt(static_cast<double>(hd));
              mx = std::max(mx, att[s]);
            }
            for (int s = 0; s <= t; ++s) z += (att[s] = std::exp(att[s] - mx));
            for (int s = 0; s <= t; ++s) {
              const double* v = &qkv[(b * T + s) * 3 * C + 2 * C + hh * hd];
              for (int i = 0; i < hd; ++i) y[(b * T + t) * C + hh * hd + i] += att[s] / z * v[i];
            }
          }
      auto proj = linear(y, C, W(h + "attn.c_proj.weight"), W(h + "attn.c_proj.bias"), C);
      for (int i = 0; i < N * C; ++i) x[i] += proj[i];
      auto ln2 = layernorm(x, W(h + "ln_2.weight"), W(h + "ln_2.bias"));
      auto fc = linear(ln2, C, W(h + "mlp.c_fc.weight"), W(h + "mlp.c_fc.bias"), 4 * C);
      for (double& u : fc)  // tanh-GELU
        u = 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
      auto mlp = linear(fc, 4 * C, W(h + "mlp.c_proj.weight"), W(h + "mlp.c_proj.bias"), C);
      for (int i = 0; i < N * C; ++i) x[i] += mlp[i];
    }
    auto lnf = layernorm(x, W("transformer.ln_f.weight"), W("transformer.ln_f.bias"));
    auto logits = linear(lnf, C, W("transformer.wte.weight"), nullptr, Vp);
    return forge_test::mean_cross_entropy(logits, N, V, Vp, t_.targets);
  }

 private:
  const Tiny& t_;
  const ParamLayout& layout_;
};

TEST(GradCheck, WholeModelMatchesFiniteDifferencesInFloat64) {
  Tiny tiny;
  auto nx = make_numerics("fast");
  Gpt2 model(tiny.cfg, tiny.B, tiny.T, *nx);
  model.init_weights(3);
  // Move every parameter off its initial value so that biases and norm weights are
  // exercised too (they start at 0 and 1).
  forge_test::perturb_params(model, 11, 0.1);

  Gpt2Float64 ref(tiny, model.layout());
  // Rows of wpe beyond T and padded rows of wte have exactly zero gradient, so a tensor
  // whose gradient is all zero must be exactly zero in the engine too.
  forge_test::GradcheckOptions opt;
  opt.allow_zero_gradient = true;
  forge_test::check_whole_model(
      model, tiny.tokens, tiny.targets, tiny.B, tiny.T,
      [&](const std::vector<double>& p) { return ref.loss(p); }, opt);
}

// The bf16 profile plans an operand slot for each linear layer's weight: four per layer and
// the LM head's, wte (tied); wpe and the norms' tensors are not multiplied by a linear layer.
TEST(Gpt2Model, DeclaresEveryLinearWeight) {
  Tiny tiny;
  auto nx = make_numerics("fast");
  Gpt2 model(tiny.cfg, tiny.B, tiny.T, *nx);
  size_t floats = 0;
  for (const auto& p : model.layout().tensors()) {
    const bool linear = p.name == "transformer.wte.weight" || p.name.ends_with("c_attn.weight") ||
                        p.name.ends_with("c_proj.weight") || p.name.ends_with("c_fc.weight");
    EXPECT_EQ(p.linear, linear) << p.name;
    if (linear) floats += p.numel;
  }
  EXPECT_EQ(model.layout().linear_weights(), 4 * tiny.cfg.n_layer + 1);
  EXPECT_EQ(model.layout().linear_weight_floats(), floats);
}

// A config made in code gets the checks a config file gets, each naming its field, instead of
// a division by zero (no heads) or a llama-only knob silently doing nothing.
TEST(Gpt2Model, RejectsConfigsItCannotRun) {
  const auto message = [](const ModelConfig& m) -> std::string {
    auto nx = make_numerics("fast");
    try {
      Gpt2 model(m, 1, 8, *nx);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  ModelConfig ok;
  ok.family = "gpt2";
  ok.n_embd = 64;
  ok.n_head = 4;
  ok.block_size = 16;
  EXPECT_EQ(message(ok), "(accepted)");
  const struct {
    const char* field;
    void (*spoil)(ModelConfig&);
  } cases[] = {
      {"model.n_head", [](ModelConfig& m) { m.n_head = 0; }},
      {"model.n_layer", [](ModelConfig& m) { m.n_layer = 0; }},
      {"model.vocab_size", [](ModelConfig& m) { m.vocab_size = -1; }},
      {"model.n_embd", [](ModelConfig& m) { m.n_embd = 66; }},
      {"model.n_kv_head", [](ModelConfig& m) { m.n_kv_head = 2; }},
      {"model.n_kv_head", [](ModelConfig& m) { m.n_kv_head = -4; }},
      {"model.ffn_hidden", [](ModelConfig& m) { m.ffn_hidden = 100; }},
      {"model.padded_vocab_size", [](ModelConfig& m) { m.padded_vocab_size = 3; }},
      {"model.family", [](ModelConfig& m) { m.family = "llama"; }},
  };
  for (const auto& c : cases) {
    ModelConfig bad = ok;
    c.spoil(bad);
    EXPECT_NE(message(bad).find(c.field), std::string::npos) << c.field << ": " << message(bad);
  }
}

}  // namespace
}  // namespace forge
