// The torch-cpu profile, op by op, bit for bit against Debian's PyTorch 1.13.1.
//
// tests/tools/torch_cpu_fixtures.py (run by /usr/bin/python3 with ATEN_CPU_CAPABILITY=avx2
// and torch.set_num_threads(n)) writes inputs and torch's outputs; each test runs the
// profile's kernel with OpenMP pinned to the same n and requires every output element to have
// torch's bit pattern. A missing torch makes the fixture step fail, and so the tests fail.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "forge/kernels/cpu/torch_cpu_attention.h"
#include "forge/kernels/cpu/torch_cpu_embedding.h"
#include "forge/kernels/cpu/torch_cpu_gelu.h"
#include "forge/kernels/cpu/torch_cpu_layernorm.h"
#include "forge/kernels/cpu/torch_cpu_linear.h"
#include "forge/kernels/cpu/torch_cpu_optim.h"
#include "forge/kernels/cpu/torch_cpu_xent.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/profiles.h"
#include "torch_cpu_fixtures.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Script {
  static constexpr const char* name = "torch_cpu_fixtures.py";
};
using TorchCpuOps = forge_test::TorchCpuFixtureTest<Script>;

// "s1_g3"-style fixture names (idx < 0: no trailing number).
std::string key(const char* a, int x, const char* b, int idx) {
  std::ostringstream os;
  os << a << x << b;
  if (idx >= 0) os << idx;
  return os.str();
}

TEST_P(TorchCpuOps, Linear) {
  for (const auto& c : cases("linear")) {
    const auto& p = c.at("params");
    const int64_t N = p.at("N"), IC = p.at("IC"), OC = p.at("OC");
    const bool bias = p.at("bias");
    auto x = fx_->f32(c, "x"), w = fx_->f32(c, "w"), dout = fx_->f32(c, "dout");
    std::vector<float> b = bias ? fx_->f32(c, "b") : std::vector<float>{};
    std::vector<float> out(N * OC), dinp(N * IC), dw(OC * IC), db(OC);
    forge::tcpu::linear_forward(out.data(), x.data(), w.data(), bias ? b.data() : nullptr, N, IC,
                                OC);
    forge::tcpu::linear_backward(dinp.data(), dw.data(), bias ? db.data() : nullptr, dout.data(),
                                 x.data(), w.data(), N, IC, OC);
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(dinp, fx_->f32(c, "dinp"), "dinp");
    EXPECT_BITS(dw, fx_->f32(c, "dw"), "dweight");
    if (bias) {
      EXPECT_BITS(db, fx_->f32(c, "dbias"), "dbias");
    }
  }
}

TEST_P(TorchCpuOps, LayerNorm) {
  for (const auto& c : cases("layernorm")) {
    const auto& p = c.at("params");
    const int64_t N = p.at("N"), C = p.at("C");
    const float eps = static_cast<float>(p.at("eps").get<double>());
    auto x = fx_->f32(c, "x"), w = fx_->f32(c, "w"), b = fx_->f32(c, "b");
    auto dout = fx_->f32(c, "dout");
    std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C), dw(C), db(C);
    std::vector<float> scratch(forge::tcpu::layernorm_backward_scratch(C, threads_));
    forge::tcpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                   b.data(), N, C, eps);
    forge::tcpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(),
                                    w.data(), mean.data(), rstd.data(), N, C, scratch.data());
    EXPECT_BITS(mean, fx_->f32(c, "mean"), "mean");
    EXPECT_BITS(rstd, fx_->f32(c, "rstd"), "rstd");
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(dinp, fx_->f32(c, "dinp"), "dinp");
    EXPECT_BITS(dw, fx_->f32(c, "dw"), "dweight");
    EXPECT_BITS(db, fx_->f32(c, "db"), "dbias");
  }
}

TEST_P(TorchCpuOps, Gelu) {
  for (const auto& c : cases("gelu")) {
    const size_t n = c.at("params").at("n");
    auto x = fx_->f32(c, "x"), dout = fx_->f32(c, "dout");
    std::vector<float> out(n), dinp(n);
    forge::tcpu::gelu_forward(out.data(), x.data(), n);
    forge::tcpu::gelu_backward(dinp.data(), x.data(), dout.data(), n);
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(dinp, fx_->f32(c, "dinp"), "dinp");
  }
}

TEST_P(TorchCpuOps, Attention) {
  for (const auto& c : cases("attention")) {
    const auto& p = c.at("params");
    const int64_t B = p.at("B"), T = p.at("T"), C = p.at("C"), NH = p.at("NH");
    auto qkv = fx_->f32(c, "qkv"), dout = fx_->f32(c, "dout");
    std::vector<float> out(B * T * C), probs(B * NH * T * T), dqkv(B * T * 3 * C);
    std::vector<float> scratch(forge::tcpu::attention_scratch_floats(B, T, C, NH));
    forge::tcpu::attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH,
                                   scratch.data());
    forge::tcpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH,
                                    scratch.data());
    EXPECT_BITS(probs, fx_->f32(c, "att"), "softmax probabilities");
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(dqkv, fx_->f32(c, "dqkv"), "dqkv");
  }
}

TEST_P(TorchCpuOps, CrossEntropy) {
  for (const auto& c : cases("xent")) {
    const auto& p = c.at("params");
    const int64_t N = p.at("N"), V = p.at("V"), Vp = p.at("Vp");
    auto logits = fx_->f32(c, "logits");
    auto targets = fx_->i32(c, "targets");
    const float dloss = fx_->f32(c, "dloss")[0];
    std::vector<float> logp(N * V), dlogits(N * Vp, 1.0f);
    std::vector<float> loss{
        forge::tcpu::cross_entropy_forward(logp.data(), logits.data(), targets.data(), N, V, Vp)};
    forge::tcpu::cross_entropy_backward(dlogits.data(), logp.data(), targets.data(), N, V, Vp,
                                        dloss);
    EXPECT_BITS(loss, fx_->f32(c, "loss"), "loss");
    EXPECT_BITS(dlogits, fx_->f32(c, "dlogits"), "dlogits");
  }
}

TEST_P(TorchCpuOps, Embedding) {
  for (const auto& c : cases("embedding")) {
    const auto& p = c.at("params");
    const int64_t B = p.at("B"), T = p.at("T"), V = p.at("V"), C = p.at("C");
    auto tokens = fx_->i32(c, "tokens");
    auto wte = fx_->f32(c, "wte"), wpe = fx_->f32(c, "wpe"), dout = fx_->f32(c, "dout");
    std::vector<float> out(B * T * C), dwte = fx_->f32(c, "head_grad"), dwpe(T * C), row(C);
    std::vector<int32_t> ints(forge::tcpu::embedding_backward_scratch_ints(B, T, V));
    forge::tcpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    forge::tcpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C,
                                    V, ints.data(), row.data());
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(dwte, fx_->f32(c, "dwte"), "dwte");
    EXPECT_BITS(dwpe, fx_->f32(c, "dwpe"), "dwpe");
  }
}

TEST_P(TorchCpuOps, Add) {
  for (const auto& c : cases("add")) {
    auto a = fx_->f32(c, "a"), b = fx_->f32(c, "b");
    std::vector<float> out(a.size());
    forge::tcpu::add(out.data(), a.data(), b.data(), static_cast<int64_t>(a.size()));
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
  }
}

// clip_grad_norm_ + AdamW over three steps with a changing lr, through the profile's
// optimizer_step (two parameter groups: decay on >= 2-D tensors only).
TEST_P(TorchCpuOps, Optimizer) {
  auto numerics = forge::make_torch_cpu_numerics();
  for (const auto& c : cases("optimizer")) {
    const auto& p = c.at("params");
    const int count = p.at("count");
    const int steps = p.at("steps");
    std::vector<std::vector<float>> param(count), grad(count), m(count), v(count);
    std::vector<forge::ParamRef> refs(count);
    for (int i = 0; i < count; ++i) {
      param[i] = fx_->f32(c, key("p", i, "_init", -1));
      const size_t n = param[i].size();
      grad[i].assign(n, 0.f);
      m[i].assign(n, 0.f);
      v[i].assign(n, 0.f);
      refs[i] = {param[i].data(),
                 grad[i].data(),
                 m[i].data(),
                 v[i].data(),
                 n,
                 p.at("decay")[i].get<bool>()};
    }
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < count; ++i) {
        grad[i] = fx_->f32(c, key("s", s, "_g", i));
        refs[i].grad = grad[i].data();
      }
      forge::OptimizerStep hp{p.at("lrs")[s].get<double>(),
                              p.at("beta1"),
                              p.at("beta2"),
                              p.at("eps"),
                              p.at("wd"),
                              p.at("max_norm"),
                              s + 1};
      const double norm = numerics->optimizer_step(refs.data(), count, hp);
      if (hp.max_grad_norm > 0) {
        EXPECT_BITS(std::vector<float>{static_cast<float>(norm)},
                    std::vector<float>{p.at("norms_f32")[s].get<float>()},
                    key("grad norm, step ", s + 1, "", -1));
      }
      for (int i = 0; i < count; ++i) {
        EXPECT_BITS(grad[i], fx_->f32(c, key("s", s, "_gc", i)),
                    key("clipped grad, step ", s + 1, " tensor ", i));
        EXPECT_BITS(m[i], fx_->f32(c, key("s", s, "_m", i)),
                    key("exp_avg, step ", s + 1, " tensor ", i));
        EXPECT_BITS(v[i], fx_->f32(c, key("s", s, "_v", i)),
                    key("exp_avg_sq, step ", s + 1, " tensor ", i));
        EXPECT_BITS(param[i], fx_->f32(c, key("s", s, "_p", i)),
                    key("param, step ", s + 1, " tensor ", i));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TorchCpu, TorchCpuOps, ::testing::Values(1, 2), [](const auto& info) {
  std::ostringstream os;  // "t" + to_string trips GCC 12's -Wrestrict
  os << 't' << info.param;
  return os.str();
});

}  // namespace

// copy_strided against the index arithmetic written out: a [2, 3, 5, 7] block read through a
// permutation of its strides (the heads <-> rows transposes of attention), into a padded
// strided destination, and a 5-D read with a stride-0 dimension (repeat_kv's expand).
TEST(TorchCpuCopyStrided, MatchesIndexArithmetic) {
  std::vector<float> src(2 * 3 * 5 * 7);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7.0f;
  // src as [a=2, b=3, c=5, d=7] contiguous, read in the order (a, c, b, d) into a
  // destination whose rows are 9 floats apart (2 of padding left untouched).
  std::vector<float> dst(2 * 5 * 3 * 9, -1.0f);
  forge::tcpu::copy_strided(dst.data(), {5 * 3 * 9, 3 * 9, 9, 1}, src.data(),
                            {3 * 5 * 7, 7, 5 * 7, 1}, {2, 5, 3, 7});
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 5; ++c)
      for (int b = 0; b < 3; ++b)
        for (int d = 0; d < 9; ++d) {
          const float got = dst[((a * 5 + c) * 3 + b) * 9 + d];
          const float want = d < 7 ? src[((a * 3 + b) * 5 + c) * 7 + d] : -1.0f;
          ASSERT_EQ(got, want) << a << " " << c << " " << b << " " << d;
        }
  // [2, 3] rows repeated 4 times each along a stride-0 dimension, transposed on the way.
  std::vector<float> rep(2 * 3 * 4 * 5 * 7);
  forge::tcpu::copy_strided(rep.data(), {3 * 4 * 7 * 5, 4 * 7 * 5, 7 * 5, 1, 5}, src.data(),
                            {3 * 5 * 7, 5 * 7, 0, 7, 1}, {2, 3, 4, 5, 7});
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 5; ++c)
          for (int d = 0; d < 7; ++d)
            ASSERT_EQ(rep[(((a * 3 + b) * 4 + r) * 7 + d) * 5 + c],
                      src[((a * 3 + b) * 5 + c) * 7 + d]);
  // One dimension, and an empty one (nothing written).
  std::vector<float> one(7, 0.0f);
  forge::tcpu::copy_strided(one.data(), {1}, src.data() + 3, {5}, {7});
  for (int i = 0; i < 7; ++i) ASSERT_EQ(one[i], src[3 + 5 * i]);
  forge::tcpu::copy_strided(one.data(), {7, 1}, src.data(), {7, 1}, {0, 7});
  ASSERT_EQ(one[0], src[3]);
}
