// The torch-cpu profile's Llama ops (RMSNorm, rotary tables and rotation, SwiGLU, grouped-
// query attention), bit for bit against Debian's PyTorch 1.13.1, and against the float64
// scalar references of kernels/{rmsnorm,rope,swiglu,gqa_attention}.h.
//
// tests/tools/torch_cpu_llama_fixtures.py (run by /usr/bin/python3 with
// ATEN_CPU_CAPABILITY=avx2 and torch.set_num_threads(n)) runs reference/forge_ref/llama.py's
// code on awkward shapes and writes inputs and torch's outputs; each test runs the kernel with
// OpenMP and OpenBLAS pinned to the same n and requires torch's bit pattern everywhere. A
// missing torch makes the fixture step fail, and so the tests fail.
#include <fmt/format.h>
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
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "forge/kernels/cpu/torch_cpu_linear.h"
#include "forge/kernels/cpu/torch_cpu_llama.h"
#include "forge/kernels/gqa_attention.h"
#include "forge/kernels/rmsnorm.h"
#include "forge/kernels/rope.h"
#include "forge/kernels/swiglu.h"
#include "forge/numerics/numerics.h"
#include "torch_cpu_fixtures.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Script {
  static constexpr const char* name = "torch_cpu_llama_fixtures.py";
};
using TorchCpuLlamaOps = forge_test::TorchCpuFixtureTest<Script>;

TEST_P(TorchCpuLlamaOps, RmsNorm) {
  for (const auto& c : cases("rmsnorm")) {
    const auto& p = c.at("params");
    const int64_t N = p.at("N"), C = p.at("C");
    const float eps = static_cast<float>(p.at("eps").get<double>());
    auto x = fx_->f32(c, "x"), w = fx_->f32(c, "w"), dout = fx_->f32(c, "dout");
    std::vector<float> out(N * C), rstd(N), dinp(N * C), dw(C);
    std::vector<float> scratch(forge::tcpu::rmsnorm_backward_scratch(N, C));
    forge::tcpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(rstd, fx_->f32(c, "rstd"), "rstd");
    forge::tcpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(),
                                  rstd.data(), nullptr, N, C, scratch.data());
    EXPECT_BITS(dinp, fx_->f32(c, "dinp"), "dinp");
    EXPECT_BITS(dw, fx_->f32(c, "dw"), "dweight");
    // The decoder layers' pattern: the residual's gradient reached x first.
    auto dout_res = fx_->f32(c, "dout_res"), dres = fx_->f32(c, "dres");
    forge::tcpu::rmsnorm_backward(dinp.data(), dw.data(), dout_res.data(), x.data(), w.data(),
                                  rstd.data(), dres.data(), N, C, scratch.data());
    EXPECT_BITS(dinp, fx_->f32(c, "dinp_res"), "dinp with residual");
    EXPECT_BITS(dw, fx_->f32(c, "dw_res"), "dweight with residual");
  }
}

TEST_P(TorchCpuLlamaOps, RopeTables) {
  for (const auto& c : cases("rope_tables")) {
    const auto& p = c.at("params");
    const int64_t T = p.at("T"), hd = p.at("hd");
    const double theta = p.at("theta");
    std::vector<float> cs(T * hd), sn(T * hd);
    forge::tcpu::rope_tables(cs.data(), sn.data(), T, hd, theta);
    EXPECT_BITS(cs, fx_->f32(c, "cos"), "cos");
    EXPECT_BITS(sn, fx_->f32(c, "sin"), "sin");
  }
}

TEST_P(TorchCpuLlamaOps, Rope) {
  for (const auto& c : cases("rope")) {
    const auto& p = c.at("params");
    const int64_t B = p.at("B"), T = p.at("T"), H = p.at("H"), hd = p.at("hd");
    auto x = fx_->f32(c, "x"), dout = fx_->f32(c, "dout");
    const auto cs = fx_->f32(c, "cos"), sn = fx_->f32(c, "sin");
    std::vector<float> out(x.size()), dinp(x.size());
    forge::tcpu::rope_forward(out.data(), x.data(), cs.data(), sn.data(), B, T, H, hd);
    forge::tcpu::rope_backward(dinp.data(), dout.data(), cs.data(), sn.data(), B, T, H, hd);
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(dinp, fx_->f32(c, "dinp"), "dinp");
  }
}

TEST_P(TorchCpuLlamaOps, SwiGlu) {
  for (const auto& c : cases("swiglu")) {
    const int64_t n = c.at("params").at("n");
    auto g = fx_->f32(c, "gate"), u = fx_->f32(c, "up"), dout = fx_->f32(c, "dout");
    std::vector<float> out(n), dg(n), du(n);
    forge::tcpu::swiglu_forward(out.data(), g.data(), u.data(), n);
    forge::tcpu::swiglu_backward(dg.data(), du.data(), dout.data(), g.data(), u.data(), n);
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(dg, fx_->f32(c, "dgate"), "dgate");
    EXPECT_BITS(du, fx_->f32(c, "dup"), "dup");
  }
}

TEST_P(TorchCpuLlamaOps, GqaAttention) {
  for (const auto& c : cases("gqa")) {
    const auto& p = c.at("params");
    const int64_t B = p.at("B"), T = p.at("T"), NH = p.at("NH"), KVH = p.at("KVH"), hd = p.at("hd");
    auto q = fx_->f32(c, "q"), k = fx_->f32(c, "k"), v = fx_->f32(c, "v");
    auto dout = fx_->f32(c, "dout");
    std::vector<float> out(q.size()), probs(B * NH * T * T), dq(q.size()), dk(k.size()),
        dv(v.size());
    std::vector<float> scratch(forge::tcpu::gqa_attention_scratch_floats(B, T, NH, hd));
    forge::tcpu::gqa_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), B, T,
                                       NH, KVH, hd, scratch.data());
    forge::tcpu::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                        k.data(), v.data(), probs.data(), B, T, NH, KVH, hd,
                                        scratch.data());
    EXPECT_BITS(out, fx_->f32(c, "out"), "out");
    EXPECT_BITS(probs, fx_->f32(c, "att"), "probabilities");
    EXPECT_BITS(dq, fx_->f32(c, "dq"), "dq");
    EXPECT_BITS(dk, fx_->f32(c, "dk"), "dk");
    EXPECT_BITS(dv, fx_->f32(c, "dv"), "dv");
  }
}

// The profile's virtuals are these kernels (not the fast defaults they override).
TEST_P(TorchCpuLlamaOps, ProfileUsesTheKernels) {
  auto nx = forge::make_numerics("torch-cpu");
  for (const auto& c : cases("rmsnorm")) {
    const auto& p = c.at("params");
    const int64_t N = p.at("N"), C = p.at("C");
    const float eps = static_cast<float>(p.at("eps").get<double>());
    auto x = fx_->f32(c, "x"), w = fx_->f32(c, "w"), dout = fx_->f32(c, "dout_res");
    auto dres = fx_->f32(c, "dres");
    std::vector<float> out(N * C), rstd(N), dinp(N * C), dw(C);
    nx->rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    nx->rmsnorm_backward_residual(dinp.data(), dw.data(), dout.data(), x.data(), w.data(),
                                  rstd.data(), dres.data(), N, C);
    EXPECT_BITS(out, fx_->f32(c, "out"), "profile out");
    EXPECT_BITS(dinp, fx_->f32(c, "dinp_res"), "profile dinp with residual");
  }
  for (const auto& c : cases("gqa")) {
    const auto& p = c.at("params");
    const int B = p.at("B"), T = p.at("T"), NH = p.at("NH"), KVH = p.at("KVH"), hd = p.at("hd");
    auto q = fx_->f32(c, "q"), k = fx_->f32(c, "k"), v = fx_->f32(c, "v");
    auto dout = fx_->f32(c, "dout");
    std::vector<float> out(q.size()), saved(nx->gqa_attention_saved_floats(B, T, NH, KVH, hd));
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    nx->gqa_attention_forward(out.data(), saved.data(), q.data(), k.data(), v.data(), B, T, NH, KVH,
                              hd);
    nx->gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                               v.data(), out.data(), saved.data(), B, T, NH, KVH, hd);
    EXPECT_BITS(out, fx_->f32(c, "out"), "profile out");
    EXPECT_BITS(dk, fx_->f32(c, "dk"), "profile dk");
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, TorchCpuLlamaOps, ::testing::Values(1, 2),
                         [](const auto& info) { return fmt::format("t{}", info.param); });

// --- against the float64 scalar references (no torch needed) -----------------------------

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = shift + scale * d(gen);
  return v;
}
std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double rel_l2(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// fp32 kernels against float64 math on these sizes (the bound test_llama_kernels.cpp uses).
constexpr double kTol = 2e-6;

TEST(TorchCpuLlamaScalar, RmsNormMatchesFloat64) {
  namespace sc = forge::kernels::scalar;
  for (int C : {5, 37, 131, 512}) {
    SCOPED_TRACE(C);
    const int N = 3 * 17;
    auto x = randn(N * C, 1, 1.0f, 3.0f), w = randn(C, 2, 0.1f, 1.0f), dy = randn(N * C, 3);
    auto dres = randn(N * C, 4);
    std::vector<float> out(N * C), rstd(N), dx(N * C), dw(C);
    std::vector<float> scratch(forge::tcpu::rmsnorm_backward_scratch(N, C));
    forge::tcpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    forge::tcpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(),
                                  dres.data(), N, C, scratch.data());
    std::vector<double> out64(N * C), rstd64(N), dx64(N * C), dw64(C);
    const auto x64 = widen(x), w64 = widen(w), dy64 = widen(dy);
    sc::rmsnorm_forward(out64.data(), rstd64.data(), x64.data(), w64.data(), N, C, 1e-5);
    sc::rmsnorm_backward(dx64.data(), dw64.data(), dy64.data(), x64.data(), w64.data(),
                         rstd64.data(), N, C);
    for (int i = 0; i < N * C; ++i) dx64[i] += dres[i];
    EXPECT_LT(rel_l2(out, out64), kTol);
    EXPECT_LT(rel_l2(rstd, rstd64), kTol);
    EXPECT_LT(rel_l2(dx, dx64), kTol);
    EXPECT_LT(rel_l2(dw, dw64), kTol);
  }
}

TEST(TorchCpuLlamaScalar, RopeMatchesFloat64) {
  namespace sc = forge::kernels::scalar;
  for (int hd : {2, 6, 16, 64, 130}) {
    SCOPED_TRACE(hd);
    const int B = 2, T = 37, H = 3, half = hd / 2;
    std::vector<float> cs(T * hd), sn(T * hd);
    forge::tcpu::rope_tables(cs.data(), sn.data(), T, hd, 10000.0);
    std::vector<double> c64(T * half), s64(T * half);
    sc::rope_tables(c64.data(), s64.data(), T, hd, 10000.0);
    // fp32 angles: t * inv_freq rounded twice, each within half an ulp of a value below T.
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < hd; ++j) {
        const double bound = 2.0 * t * std::ldexp(1.0, -24) + 1e-6;
        EXPECT_NEAR(cs[t * hd + j], c64[t * half + j % half], bound) << t << "," << j;
        EXPECT_NEAR(sn[t * hd + j], s64[t * half + j % half], bound) << t << "," << j;
      }
    // The rotation itself, on the same tables (the float64 reference reads [T, hd/2]).
    auto x = randn(B * T * H * hd, 5), dy = randn(B * T * H * hd, 6);
    std::vector<float> out(x.size()), dx(x.size());
    std::vector<double> cw(T * half), sw(T * half);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < half; ++j) {
        cw[t * half + j] = cs[t * hd + j];
        sw[t * half + j] = sn[t * hd + j];
      }
    forge::tcpu::rope_forward(out.data(), x.data(), cs.data(), sn.data(), B, T, H, hd);
    forge::tcpu::rope_backward(dx.data(), dy.data(), cs.data(), sn.data(), B, T, H, hd);
    std::vector<double> out64(x.size()), dx64(x.size());
    sc::rope_forward(out64.data(), widen(x).data(), cw.data(), sw.data(), B, T, H, hd);
    sc::rope_backward(dx64.data(), widen(dy).data(), cw.data(), sw.data(), B, T, H, hd);
    EXPECT_LT(rel_l2(out, out64), kTol);
    EXPECT_LT(rel_l2(dx, dx64), kTol);
  }
}

TEST(TorchCpuLlamaScalar, SwiGluMatchesFloat64) {
  namespace sc = forge::kernels::scalar;
  for (size_t n : {1u, 7u, 33u, 1000u, 40007u}) {
    SCOPED_TRACE(n);
    auto g = randn(n, 7, 3.0f), u = randn(n, 8), dy = randn(n, 9);
    std::vector<float> out(n), dg(n), du(n);
    forge::tcpu::swiglu_forward(out.data(), g.data(), u.data(), n);
    forge::tcpu::swiglu_backward(dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
    std::vector<double> out64(n), dg64(n), du64(n);
    const auto g64 = widen(g), u64 = widen(u), dy64 = widen(dy);
    sc::swiglu_forward(out64.data(), g64.data(), u64.data(), n);
    sc::swiglu_backward(dg64.data(), du64.data(), dy64.data(), g64.data(), u64.data(), n);
    EXPECT_LT(rel_l2(out, out64), kTol);
    EXPECT_LT(rel_l2(dg, dg64), kTol);
    EXPECT_LT(rel_l2(du, du64), kTol);
  }
}

TEST(TorchCpuLlamaScalar, GqaAttentionMatchesFloat64) {
  namespace sc = forge::kernels::scalar;
  struct Shape {
    int B, T, NH, KVH, hd;
  };
  for (const Shape s : {Shape{2, 5, 4, 2, 6}, Shape{1, 33, 4, 1, 12}, Shape{2, 40, 8, 2, 16},
                        Shape{1, 70, 6, 3, 10}}) {
    SCOPED_TRACE(s.T);
    const size_t nq = size_t(s.B) * s.T * s.NH * s.hd, nk = size_t(s.B) * s.T * s.KVH * s.hd;
    auto q = randn(nq, 10), k = randn(nk, 11), v = randn(nk, 12), dy = randn(nq, 13);
    std::vector<float> out(nq), probs(size_t(s.B) * s.NH * s.T * s.T), dq(nq), dk(nk), dv(nk);
    std::vector<float> scratch(forge::tcpu::gqa_attention_scratch_floats(s.B, s.T, s.NH, s.hd));
    forge::tcpu::gqa_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), s.B,
                                       s.T, s.NH, s.KVH, s.hd, scratch.data());
    forge::tcpu::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), q.data(),
                                        k.data(), v.data(), probs.data(), s.B, s.T, s.NH, s.KVH,
                                        s.hd, scratch.data());
    const forge::kernels::GqaShape gs{s.B, s.T, s.NH, s.KVH, s.hd};
    std::vector<double> out64(nq), probs64(sc::gqa_attention_saved_floats(gs)), dq64(nq), dk64(nk),
        dv64(nk);
    const auto q64 = widen(q), k64 = widen(k), v64 = widen(v), dy64 = widen(dy);
    sc::gqa_attention_forward(out64.data(), probs64.data(), q64.data(), k64.data(), v64.data(), gs);
    sc::gqa_attention_backward(dq64.data(), dk64.data(), dv64.data(), dy64.data(), q64.data(),
                               k64.data(), v64.data(), probs64.data(), gs);
    EXPECT_LT(rel_l2(out, out64), kTol);
    EXPECT_LT(rel_l2(dq, dq64), kTol);
    EXPECT_LT(rel_l2(dk, dk64), kTol);
    EXPECT_LT(rel_l2(dv, dv64), kTol);
  }
}

}  // namespace
