// The fused ops in the models' step. A profile may run two ops as one (a GELU or SwiGLU in a
// linear layer's rounding or epilogue, the residual's add in the product's epilogue) and skip
// writing the tensor between them; a recorder (`forge verify`'s dumps) needs that tensor, so
// with one listening the models run the ops apart. Both ways must train the same model: the
// same loss and the same gradients, bit for bit, under every profile, on shapes of whole AMX
// tiles (where the bf16 profile fuses on a CPU with AMX) and on awkward ones (where it does
// not).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "forge/core/float_buffer.h"
#include "forge/kernels/bf16_gemm.h"
#include "forge/model/model.h"
#include "forge/model/params.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/timed.h"
#include "training_step.h"

namespace {

using namespace forge;

// Takes every tensor handed to it and counts them.
class CountingRecorder final : public ActivationRecorder {
 public:
  void record(const std::string&, const float* data, const std::vector<int64_t>&) override {
    if (data) ++count;
  }
  int count = 0;
};

ModelConfig config(const std::string& family, int C, int F) {
  ModelConfig m;
  m.family = family;
  m.vocab_size = 100;
  m.padded_vocab_size = 128;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = C;
  m.block_size = 32;
  if (family == "llama") {
    m.n_kv_head = 1;
    m.ffn_hidden = F;
  }
  return m;
}

struct Step {
  float loss = 0;
  std::vector<float> grads;
};

// Two steps (forward, backward, AdamW) of a fresh model, the second's loss and gradients
// returned; with a recorder listening when `recorder` is not null, and the ops timed as
// `forge bench --breakdown` times them when `labels` is not null (their names go there).
Step two_steps(const ModelConfig& cfg, const std::string& profile, int B, int T,
               CountingRecorder* recorder, std::vector<std::string>* labels = nullptr) {
  forge_test::TrainingStep run(cfg, profile, B, T, 7, labels != nullptr);
  run.model->set_recorder(recorder);
  Step last;
  for (int step = 1; step <= 2; ++step) {
    last.loss = run.forward_backward();
    last.grads.assign(run.grads.data(), run.grads.data() + run.model->layout().total_floats());
    run.update(step);
  }
  if (run.timer)
    for (const auto& [label, seconds] : run.timer->seconds()) labels->push_back(label);
  return last;
}

struct Shape {
  int C, F, B, T;
};

// run_case(config, profile, shape) for each model family under each profile, on whole tiles
// (128 rows, widths multiples of 32) and on odd sizes off the AMX kernel.
template <typename Case>
void for_each_case(Case&& run_case) {
  for (const Shape s : {Shape{64, 160, 4, 32}, Shape{40, 72, 3, 13}})
    for (const std::string family : {"gpt2", "llama"})
      for (const std::string& profile : numerics_profiles()) {
        SCOPED_TRACE(family + " under " + profile + ", n_embd " + std::to_string(s.C));
        run_case(config(family, s.C, s.F), profile, s);
      }
}

TEST(FusedOps, ModelsTrainTheSameWithAndWithoutARecorder) {
  for_each_case([](const ModelConfig& cfg, const std::string& profile, const Shape& s) {
    CountingRecorder recorder;
    const Step fused = two_steps(cfg, profile, s.B, s.T, nullptr);
    const Step apart = two_steps(cfg, profile, s.B, s.T, &recorder);
    EXPECT_GT(recorder.count, 20) << "the recorder was handed the step's tensors";
    EXPECT_EQ(std::memcmp(&fused.loss, &apart.loss, sizeof(float)), 0)
        << fused.loss << " vs " << apart.loss;
    ASSERT_EQ(fused.grads.size(), apart.grads.size());
    EXPECT_EQ(
        std::memcmp(fused.grads.data(), apart.grads.data(), fused.grads.size() * sizeof(float)), 0);
  });
}

// The breakdown's op names, fused ones included, are cells of a Markdown table: no '|'.
TEST(FusedOps, BreakdownNamesFitAMarkdownCell) {
  for (const std::string family : {"gpt2", "llama"})
    for (const std::string& profile : numerics_profiles()) {
      SCOPED_TRACE(family + " under " + profile);
      std::vector<std::string> labels;
      two_steps(config(family, 64, 160), profile, 4, 32, nullptr, &labels);
      EXPECT_GT(labels.size(), 5u);
      for (const std::string& label : labels)
        EXPECT_EQ(label.find('|'), std::string::npos) << label;
    }
}

// `forge bench --breakdown` gives each op holding linear layers' GEMMs its products' operations
// (TimedNumerics::gemm_flops): one step's sum is the models' linear layers', forward and both
// backward products, whether the profile fuses them with other ops or not.
TEST(FusedOps, BreakdownCountsEachLinearLayersOperationsOnce) {
  for_each_case([](const ModelConfig& cfg, const std::string& profile, const Shape& s) {
    forge_test::TrainingStep run(cfg, profile, s.B, s.T, 7, /*timed=*/true);
    run.forward_backward();
    run.update(1);
    double counted = 0;
    for (const auto& [op, flops] : run.timer->gemm_flops()) {
      EXPECT_TRUE(run.timer->seconds().count(op)) << op;
      counted += flops;
    }
    // One x W^T per weight [out, in]: 2 N in out, three times (forward, dinp, dweight).
    const double N = s.B * s.T, C = s.C, Vp = cfg.padded_vocab_size;
    double per_row = C * Vp;  // the classifier
    if (cfg.family == "gpt2") {
      per_row += cfg.n_layer * 12 * C * C;  // c_attn 3C, c_proj C, c_fc 4C, c_proj 4C
    } else {
      const double Dq = C, Dkv = C / cfg.n_head * cfg.n_kv_head, F = s.F;
      per_row += cfg.n_layer * (C * (Dq + 2 * Dkv) + Dq * C + 3 * C * F);
    }
    EXPECT_DOUBLE_EQ(counted, 3 * 2 * N * per_row);
  });
}

// Not vacuous on a CPU with AMX: there the bf16 profile fuses every op above on the whole-tile
// shape.
TEST(FusedOps, Bf16FusesOnWholeTilesWhereAmxRuns) {
  if (!kernels::cpu::amx_linear_available()) GTEST_SKIP() << "forge's AMX kernels do not run here";
  std::unique_ptr<Numerics> nx = make_numerics("bf16");
  const int N = 128, C = 64, F = 160;
  EXPECT_TRUE(nx->fuses_linear_residual_forward(N, C, C));
  EXPECT_TRUE(nx->fuses_linear_residual_forward(N, F, C));
  EXPECT_TRUE(nx->fuses_linear_gelu_forward(N, C, 4 * C));
  EXPECT_TRUE(nx->fuses_gelu_linear_backward(N, C, 4 * C));
  EXPECT_TRUE(nx->fuses_swiglu_linear_forward(N, F, C));
  std::vector<float> gate_up(size_t(2) * F * C);
  EXPECT_TRUE(nx->fuses_swiglu_mlp_forward(gate_up.data(), gate_up.data() + F * C, N, C, F));
  EXPECT_FALSE(nx->fuses_swiglu_mlp_forward(gate_up.data(), gate_up.data() + 1, N, C, F));
  EXPECT_FALSE(nx->fuses_linear_residual_forward(120, C, C));  // rows not whole tiles
}

}  // namespace
