// The Llama-family kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention): the fp32 `cpu`
// versions, under every instruction set this CPU has, against the scalar references run in
// float64, and the float64 backward passes against central finite differences. Sizes are
// awkward on purpose (not multiples of the vector width; sequences crossing the attention
// tiles of 32 queries and 64 keys).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "forge/core/error.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/elementwise.h"
#include "forge/kernels/gqa_attention.h"
#include "forge/kernels/rmsnorm.h"
#include "forge/kernels/rope.h"
#include "forge/kernels/swiglu.h"
#include "forge/numerics/numerics.h"
#include "test_util.h"

namespace {

namespace scalar = forge::kernels::scalar;
namespace cpu = forge::kernels::cpu;
using forge::kernels::GqaShape;

using namespace forge_test;  // Floats, random_floats, rel_l2, numeric_gradient, for_each_isa

constexpr double kTol = 2e-6;    // fp32 kernel vs float64 math on these sizes
constexpr double kFdTol = 1e-7;  // float64 analytic vs central differences

// --- RMSNorm -------------------------------------------------------------------------

void RmsNormMatchesFloat64_body() {
  for (int C : {37, 131}) {
    SCOPED_TRACE(testing::Message() << "C=" << C);
    const int N = 7 * 13;
    Floats x = random_floats(N * C, 10);
    for (auto& v : x) v += 3.0f;  // a non-zero mean: RMSNorm must not subtract it
    const Floats w = random_floats(C, 11), dout = random_floats(N * C, 13);
    Floats out(N * C), rstd(N), dx(N * C, 9.0f), dw(C, 9.0f);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    const Doubles x64 = widen(x), w64 = widen(w), dout64 = widen(dout);
    Doubles out64(N * C), rstd64(N), dx64(N * C), dw64(C);
    scalar::rmsnorm_forward(out64.data(), rstd64.data(), x64.data(), w64.data(), N, C, 1e-5);
    scalar::rmsnorm_backward(dx64.data(), dw64.data(), dout64.data(), x64.data(), w64.data(),
                             rstd64.data(), N, C);
    EXPECT_LT(rel_l2(out, out64), kTol);
    EXPECT_LT(rel_l2(rstd, rstd64), kTol);
    EXPECT_LT(rel_l2(dx, dx64), 1e-5);
    EXPECT_LT(rel_l2(dw, dw64), kTol);
    // The definition, spelled out on one element: w * x / sqrt(mean(x^2) + eps).
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x64[c] * x64[c];
    EXPECT_NEAR(out[5], w64[5] * x64[5] / std::sqrt(ss / C + 1e-5), 1e-5);
  }
}

TEST(LlamaKernels, RmsNormMatchesFloat64) { for_each_isa(RmsNormMatchesFloat64_body); }

// The residual's gradient added in the backward's own pass: what the backward followed by
// add_inplace computes (the defaults, numerics/llama_ops.cpp), but for the rounding of the last
// multiply, which the compiler may fuse with the add; and the float64 math.
void RmsNormBackwardResidualAddsInPlace_body() {
  for (int C : {37, 512}) {
    SCOPED_TRACE(testing::Message() << "C=" << C);
    const int N = 7 * 13;
    const Floats x = random_floats(N * C, 14), w = random_floats(C, 15),
                 dout = random_floats(N * C, 16), dres = random_floats(N * C, 17);
    Floats out(N * C), rstd(N), dx(N * C), dw(C), dx2(N * C, 9.0f), dw2(C, 9.0f);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    cpu::add_inplace(dx.data(), dres.data(), dx.size());
    cpu::rmsnorm_backward_residual(dx2.data(), dw2.data(), dout.data(), x.data(), w.data(),
                                   rstd.data(), dres.data(), N, C);
    EXPECT_LT(rel_l2(dx2, widen(dx)), 1e-6);
    EXPECT_EQ(std::memcmp(dw2.data(), dw.data(), dw.size() * sizeof(float)), 0);
    const Doubles x64 = widen(x), w64 = widen(w), dout64 = widen(dout), rstd64 = widen(rstd);
    Doubles dx64(N * C), dw64(C);
    scalar::rmsnorm_backward(dx64.data(), dw64.data(), dout64.data(), x64.data(), w64.data(),
                             rstd64.data(), N, C);
    for (size_t i = 0; i < dx64.size(); ++i) dx64[i] += dres[i];
    EXPECT_LT(rel_l2(dx2, dx64), 1e-5);
    // Not vacuous: the residual's gradient is in there.
    Floats plain(N * C), dw3(C);
    cpu::rmsnorm_backward(plain.data(), dw3.data(), dout.data(), x.data(), w.data(), rstd.data(), N,
                          C);
    EXPECT_GT(rel_l2(plain, widen(dx2)), 0.1);
  }
}

TEST(LlamaKernels, RmsNormBackwardResidualAddsInPlace) {
  for_each_isa(RmsNormBackwardResidualAddsInPlace_body);
}

TEST(LlamaKernels, RmsNormBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 5;
  const Doubles x = widen(random_floats(N * C, 20)), w = widen(random_floats(C, 21)),
                dout = widen(random_floats(N * C, 23));
  auto forward = [&](const Doubles& xx, const Doubles& ww) {
    Doubles out(N * C), rstd(N);
    scalar::rmsnorm_forward(out.data(), rstd.data(), xx.data(), ww.data(), N, C, 1e-5);
    return out;
  };
  Doubles out(N * C), rstd(N), dx(N * C), dw(C);
  scalar::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
  scalar::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N,
                           C);
  EXPECT_LT(rel_l2(dx, numeric_gradient([&](const Doubles& v) { return forward(v, w); }, x, dout)),
            kFdTol);
  EXPECT_LT(rel_l2(dw, numeric_gradient([&](const Doubles& v) { return forward(x, v); }, w, dout)),
            kFdTol);
}

// --- RoPE ----------------------------------------------------------------------------

TEST(LlamaKernels, RopeTablesFollowHuggingFace) {
  const int T = 300, hd = 22, half = hd / 2;
  for (double theta : {10000.0, 500000.0}) {
    SCOPED_TRACE(testing::Message() << "theta=" << theta);
    Floats c(T * half), s(T * half);
    cpu::rope_tables(c.data(), s.data(), T, hd, theta);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < half; ++i) {
        // Hugging Face's fp32 pipeline: inv_freq and the angle are rounded to float.
        const float inv = 1.0f / std::pow(static_cast<float>(theta), float(2 * i) / float(hd));
        const float a = static_cast<float>(t) * inv;
        ASSERT_EQ(c[t * half + i], static_cast<float>(std::cos(double(a)))) << t << "," << i;
        ASSERT_EQ(s[t * half + i], static_cast<float>(std::sin(double(a)))) << t << "," << i;
        // And close to the exact angle t * theta^(-2i/hd) (the fp32 angle costs up to
        // t * 2^-23 rad).
        const double exact = t * std::pow(theta, -2.0 * i / hd);
        ASSERT_NEAR(c[t * half + i], std::cos(exact), 1e-7 + t * 2e-7);
      }
    // Position 0 is the identity; frequency 0 (i = 0) turns one radian per position.
    EXPECT_EQ(c[0], 1.0f);
    EXPECT_EQ(s[0], 0.0f);
    EXPECT_NEAR(s[1 * half + 0], std::sin(1.0), 1e-7);
  }
}

void RopeMatchesFloat64AndRotatesHalves_body() {
  const int B = 3, T = 13, NH = 5, hd = 38, half = hd / 2;
  Floats c(T * half), s(T * half);
  cpu::rope_tables(c.data(), s.data(), T, hd, 10000.0);
  const Floats x = random_floats(B * T * NH * hd, 40), dy = random_floats(B * T * NH * hd, 41);
  Floats y(x.size()), dx(x.size());
  cpu::rope_forward(y.data(), x.data(), c.data(), s.data(), B, T, NH, hd);
  cpu::rope_backward(dx.data(), dy.data(), c.data(), s.data(), B, T, NH, hd);
  const Doubles c64 = widen(c), s64 = widen(s);
  Doubles y64(x.size()), dx64(x.size());
  scalar::rope_forward(y64.data(), widen(x).data(), c64.data(), s64.data(), B, T, NH, hd);
  scalar::rope_backward(dx64.data(), widen(dy).data(), c64.data(), s64.data(), B, T, NH, hd);
  EXPECT_LT(rel_l2(y, y64), kTol);
  EXPECT_LT(rel_l2(dx, dx64), kTol);
  // rotate_half pairs element i with i + hd/2 (not 2i with 2i+1): check one pair by hand,
  // batch 1, position 4, head 2, i = 3.
  const size_t row = ((1 * T + 4) * NH + 2) * hd;
  const double a = 4.0 * std::pow(10000.0, -6.0 / hd);
  EXPECT_NEAR(y[row + 3], x[row + 3] * std::cos(a) - x[row + 3 + half] * std::sin(a), 1e-5);
  EXPECT_NEAR(y[row + 3 + half], x[row + 3 + half] * std::cos(a) + x[row + 3] * std::sin(a), 1e-5);
  // A rotation keeps lengths; and backward, the inverse rotation, undoes forward.
  double n_in = 0, n_out = 0;
  for (int d = 0; d < hd; ++d) {
    n_in += double(x[row + d]) * x[row + d];
    n_out += double(y[row + d]) * y[row + d];
  }
  EXPECT_NEAR(n_out, n_in, 1e-5 * n_in);
  Floats back(x.size());
  cpu::rope_backward(back.data(), y.data(), c.data(), s.data(), B, T, NH, hd);
  EXPECT_LT(rel_l2(back, widen(x)), kTol);
}

TEST(LlamaKernels, RopeMatchesFloat64AndRotatesHalves) {
  for_each_isa(RopeMatchesFloat64AndRotatesHalves_body);
}

TEST(LlamaKernels, RopeBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 4, NH = 3, hd = 6;
  Doubles c(T * hd / 2), s(T * hd / 2);
  scalar::rope_tables(c.data(), s.data(), T, hd, 100.0);
  const Doubles x = widen(random_floats(B * T * NH * hd, 50)),
                dy = widen(random_floats(B * T * NH * hd, 51));
  auto forward = [&](const Doubles& xx) {
    Doubles y(xx.size());
    scalar::rope_forward(y.data(), xx.data(), c.data(), s.data(), B, T, NH, hd);
    return y;
  };
  Doubles dx(x.size());
  scalar::rope_backward(dx.data(), dy.data(), c.data(), s.data(), B, T, NH, hd);
  EXPECT_LT(rel_l2(dx, numeric_gradient(forward, x, dy)), kFdTol);
}

// --- SwiGLU --------------------------------------------------------------------------

void SwigluMatchesFloat64_body() {
  const size_t n = 4096 * 2 + 1000 + 13;  // several parallel blocks plus a vector tail
  Floats gate = random_floats(n, 60, 3.0f);
  gate[0] = 95.0f;   // exp(-x) underflows: silu(x) = x
  gate[1] = -95.0f;  // exp(-x) overflows the fast exp's range: silu(x) ~ 0
  const Floats up = random_floats(n, 61), dout = random_floats(n, 62);
  Floats out(n), dg(n), du(n);
  cpu::swiglu_forward(out.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), n);
  Doubles out64(n), dg64(n), du64(n);
  const Doubles g64 = widen(gate), u64 = widen(up), d64 = widen(dout);
  scalar::swiglu_forward(out64.data(), g64.data(), u64.data(), n);
  scalar::swiglu_backward(dg64.data(), du64.data(), d64.data(), g64.data(), u64.data(), n);
  EXPECT_LT(rel_l2(out, out64), kTol);
  EXPECT_LT(rel_l2(dg, dg64), kTol);
  EXPECT_LT(rel_l2(du, du64), kTol);
  EXPECT_FLOAT_EQ(out[0], 95.0f * up[0]);
  EXPECT_NEAR(out[1], 0.0f, 1e-30);
  // silu(1) * up = up / (1 + e^-1)
  const float one = 1.0f, u = 2.5f;
  float o = 0;
  cpu::swiglu_forward(&o, &one, &u, 1);
  EXPECT_NEAR(o, 2.5 / (1 + std::exp(-1.0)), 1e-6);
}

TEST(LlamaKernels, SwigluMatchesFloat64) { for_each_isa(SwigluMatchesFloat64_body); }

TEST(LlamaKernels, SwigluBackwardMatchesFiniteDifferences) {
  const size_t n = 11;
  const Doubles g = widen(random_floats(n, 70, 2.0f)), u = widen(random_floats(n, 71)),
                d = widen(random_floats(n, 72));
  auto forward = [&](const Doubles& gg, const Doubles& uu) {
    Doubles out(n);
    scalar::swiglu_forward(out.data(), gg.data(), uu.data(), n);
    return out;
  };
  Doubles dg(n), du(n);
  scalar::swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), n);
  EXPECT_LT(rel_l2(dg, numeric_gradient([&](const Doubles& v) { return forward(v, u); }, g, d)),
            kFdTol);
  EXPECT_LT(rel_l2(du, numeric_gradient([&](const Doubles& v) { return forward(g, v); }, u, d)),
            kFdTol);
}

// --- grouped-query attention ---------------------------------------------------------

void check_gqa(int B, int T, int NH, int KVH, int hd) {
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " NH=" << NH << " KVH=" << KVH
                                  << " hd=" << hd);
  const GqaShape s{B, T, NH, KVH, hd};
  const size_t nq = size_t(B) * T * NH * hd, nk = size_t(B) * T * KVH * hd;
  const Floats q = random_floats(nq, 80), k = random_floats(nk, 81), v = random_floats(nk, 82),
               dout = random_floats(nq, 83);
  Floats out(nq), saved(cpu::gqa_attention_saved_floats(s), 7.0f), dq(nq, 7.0f), dk(nk, 7.0f),
      dv(nk, 7.0f);
  cpu::gqa_attention_forward(out.data(), saved.data(), q.data(), k.data(), v.data(), s);
  cpu::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                              v.data(), out.data(), saved.data(), s);
  const Doubles q64 = widen(q), k64 = widen(k), v64 = widen(v), d64 = widen(dout);
  Doubles out64(nq), probs(scalar::gqa_attention_saved_floats(s)), dq64(nq), dk64(nk), dv64(nk);
  scalar::gqa_attention_forward(out64.data(), probs.data(), q64.data(), k64.data(), v64.data(), s);
  scalar::gqa_attention_backward(dq64.data(), dk64.data(), dv64.data(), d64.data(), q64.data(),
                                 k64.data(), v64.data(), probs.data(), s);
  EXPECT_LT(rel_l2(out, out64), kTol);
  EXPECT_LT(rel_l2(dq, dq64), 5e-6);
  EXPECT_LT(rel_l2(dk, dk64), 5e-6);
  EXPECT_LT(rel_l2(dv, dv64), kTol);
}

TEST(LlamaKernels, GqaAttentionMatchesFloat64) {
  for_each_isa([] {
    check_gqa(2, 77, 6, 2, 10);   // groups of 3 heads; query and key tiles with tails
    check_gqa(1, 130, 4, 1, 17);  // multi-query: one kv head for all
    check_gqa(2, 33, 3, 3, 8);    // plain multi-head
    check_gqa(1, 5, 8, 2, 64);    // llama-small's head dim, tiny T
    // 32 kv heads in all: forward's tasks are whole kv heads (up to 8 threads), the query-tile
    // tasks above.
    check_gqa(8, 21, 8, 4, 6);
  });
}

// Forward and backward must not change a bit with the thread count (a resumed run may use
// another). Few (sequence, kv head) pairs is where the schedules differ: forward's tasks are
// query tiles, and backward splits a pair into key-tile tasks (dk, dv) and query-tile tasks
// (dq) when there are too few pairs to share out, but not on one thread.
TEST(LlamaKernels, GqaAttentionIsTheSameOnAnyThreadCount) {
  const int saved_threads = omp_get_max_threads();
  for_each_isa([] {
    for (const GqaShape& s : {GqaShape{1, 200, 4, 1, 64}, GqaShape{2, 45, 4, 1, 16},
                              GqaShape{1, 97, 6, 3, 32}, GqaShape{1, 130, 2, 2, 24}}) {
      SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                      << " KVH=" << s.KVH << " hd=" << s.hd);
      const size_t nq = size_t(s.B) * s.T * s.NH * s.hd, nk = size_t(s.B) * s.T * s.KVH * s.hd;
      const Floats q = random_floats(nq, 84), k = random_floats(nk, 85), v = random_floats(nk, 86),
                   dout = random_floats(nq, 87);
      std::vector<Floats> results;
      for (int threads = 1; threads <= 3; ++threads) {
        omp_set_num_threads(threads);
        Floats out(nq), saved(cpu::gqa_attention_saved_floats(s)), dq(nq, 7.0f), dk(nk, 7.0f),
            dv(nk, 7.0f);
        cpu::gqa_attention_forward(out.data(), saved.data(), q.data(), k.data(), v.data(), s);
        cpu::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                    k.data(), v.data(), out.data(), saved.data(), s);
        for (Floats* r : {&out, &dq, &dk, &dv}) results.push_back(std::move(*r));
      }
      for (size_t i = 4; i < results.size(); ++i) EXPECT_EQ(results[i], results[i % 4]) << i;
    }
  });
  omp_set_num_threads(saved_threads);
}

// Query head h reads kv head h / (NH / KVH), so KVH must divide NH; the fused kernel checks
// before touching a buffer (the bf16 one alike: AttentionBf16.RefusesKvHeads...).
TEST(LlamaKernels, GqaAttentionRefusesKvHeadsThatDoNotDivideQueryHeads) {
  const GqaShape s{1, 4, 6, 4, 8};  // 6 query heads, 4 kv heads
  float* none = nullptr;
  EXPECT_THROW(cpu::gqa_attention_forward(none, none, none, none, none, s), forge::Error);
  EXPECT_THROW(cpu::gqa_attention_backward(none, none, none, none, none, none, none, none, none, s),
               forge::Error);
}

// GQA is multi-head attention over repeated kv heads, query head h reading kv head
// h / (NH / KVH) (Hugging Face's repeat_kv), not h % KVH: the independent GPT-2 scalar
// kernel run on a qkv with the kv heads repeated that way must give the same output.
TEST(LlamaKernels, GqaEqualsMultiHeadAttentionOnRepeatedKvHeads) {
  const int B = 2, T = 9, NH = 6, KVH = 2, hd = 5, rep = NH / KVH, C = NH * hd;
  const GqaShape s{B, T, NH, KVH, hd};
  const Doubles q = widen(random_floats(B * T * C, 90)),
                k = widen(random_floats(B * T * KVH * hd, 91)),
                v = widen(random_floats(B * T * KVH * hd, 92)),
                dout = widen(random_floats(B * T * C, 93));
  Doubles qkv(size_t(B) * T * 3 * C);
  for (int n = 0; n < B * T; ++n)
    for (int h = 0; h < NH; ++h)
      for (int d = 0; d < hd; ++d) {
        qkv[n * 3 * C + h * hd + d] = q[n * C + h * hd + d];
        qkv[n * 3 * C + C + h * hd + d] = k[(n * KVH + h / rep) * hd + d];
        qkv[n * 3 * C + 2 * C + h * hd + d] = v[(n * KVH + h / rep) * hd + d];
      }
  Doubles mha_out(B * T * C), mha_probs(scalar::attention_saved_floats(B, T, NH));
  scalar::attention_forward(mha_out.data(), mha_probs.data(), qkv.data(), B, T, C, NH);
  Doubles out(B * T * C), probs(scalar::gqa_attention_saved_floats(s));
  scalar::gqa_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), s);
  EXPECT_LT(rel_l2(out, mha_out), 1e-14);
  // Backward: dk, dv are the sums of the repeated heads' gradients.
  Doubles dqkv(qkv.size());
  scalar::attention_backward(dqkv.data(), dout.data(), qkv.data(), mha_probs.data(), B, T, C, NH);
  Doubles dq(q.size()), dk(k.size()), dv(v.size());
  scalar::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                 v.data(), probs.data(), s);
  Doubles dq_ref(q.size()), dk_ref(k.size(), 0.0), dv_ref(v.size(), 0.0);
  for (int n = 0; n < B * T; ++n)
    for (int h = 0; h < NH; ++h)
      for (int d = 0; d < hd; ++d) {
        dq_ref[n * C + h * hd + d] = dqkv[n * 3 * C + h * hd + d];
        dk_ref[(n * KVH + h / rep) * hd + d] += dqkv[n * 3 * C + C + h * hd + d];
        dv_ref[(n * KVH + h / rep) * hd + d] += dqkv[n * 3 * C + 2 * C + h * hd + d];
      }
  EXPECT_LT(rel_l2(dq, dq_ref), 1e-13);
  EXPECT_LT(rel_l2(dk, dk_ref), 1e-13);
  EXPECT_LT(rel_l2(dv, dv_ref), 1e-13);
}

TEST(LlamaKernels, GqaAttentionBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 4, NH = 4, KVH = 2, hd = 3;
  const GqaShape s{B, T, NH, KVH, hd};
  const size_t nq = size_t(B) * T * NH * hd, nk = size_t(B) * T * KVH * hd;
  const Doubles q = widen(random_floats(nq, 100)), k = widen(random_floats(nk, 101)),
                v = widen(random_floats(nk, 102)), dout = widen(random_floats(nq, 103));
  auto forward = [&](const Doubles& qq, const Doubles& kk, const Doubles& vv) {
    Doubles out(nq), probs(scalar::gqa_attention_saved_floats(s));
    scalar::gqa_attention_forward(out.data(), probs.data(), qq.data(), kk.data(), vv.data(), s);
    return out;
  };
  Doubles out(nq), probs(scalar::gqa_attention_saved_floats(s)), dq(nq), dk(nk), dv(nk);
  scalar::gqa_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), s);
  scalar::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                 v.data(), probs.data(), s);
  EXPECT_LT(
      rel_l2(dq, numeric_gradient([&](const Doubles& x) { return forward(x, k, v); }, q, dout)),
      kFdTol);
  EXPECT_LT(
      rel_l2(dk, numeric_gradient([&](const Doubles& x) { return forward(q, x, v); }, k, dout)),
      kFdTol);
  EXPECT_LT(
      rel_l2(dv, numeric_gradient([&](const Doubles& x) { return forward(q, k, x); }, v, dout)),
      kFdTol);
}

// The profile seam: every profile inherits the Llama ops (the defaults call these kernels).
TEST(LlamaKernels, NumericsDefaultsReachTheKernels) {
  auto nx = forge::make_numerics("fast");
  const int N = 3, C = 19;
  const Floats x = random_floats(N * C, 110), w = random_floats(C, 111);
  Floats a(N * C), ra(N), b(N * C), rb(N);
  nx->rmsnorm_forward(a.data(), ra.data(), x.data(), w.data(), N, C, 1e-6f);
  cpu::rmsnorm_forward(b.data(), rb.data(), x.data(), w.data(), N, C, 1e-6f);
  EXPECT_EQ(a, b);
  // lse [B, NH, T], then k^T and v^T [B, KVH, hd, key stride]
  EXPECT_EQ(nx->gqa_attention_saved_floats(2, 7, 4, 2, 8),
            size_t(2 * 4 * 7) + 2 * size_t(2 * 2 * 8) * cpu::attention_key_stride(7));
}

}  // namespace
