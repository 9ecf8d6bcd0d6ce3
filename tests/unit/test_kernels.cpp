// The `fast` CPU kernels against float64 math (the scalar references instantiated on
// double), and the float64 backward passes against central finite differences.
// Sizes are deliberately awkward (not multiples of any vector width).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "forge/core/error.h"
#include "forge/kernels/adamw.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/bf16_gemm.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/tile_gemm.h"
#include "forge/kernels/cross_entropy.h"
#include "forge/kernels/elementwise.h"
#include "forge/kernels/embedding.h"
#include "forge/kernels/gelu.h"
#include "forge/kernels/gemm.h"
#include "forge/kernels/layernorm.h"
#include "forge/kernels/linear.h"
#include "forge/kernels/rmsnorm.h"
#include "forge/numerics/numerics.h"
#include "test_util.h"

#ifdef FORGE_HAVE_DNNL
#include <dnnl.h>

#include "forge/kernels/cpu/onednn_matmul.h"
#endif

namespace {

namespace scalar = forge::kernels::scalar;
namespace cpu = forge::kernels::cpu;

using namespace forge_test;  // Floats, random_floats, rel_l2, numeric_gradient, for_each_isa

// fp32 kernels against float64 math: a few ulps of accumulated rounding on these sizes.
constexpr double kTol = 2e-6;
// Finite differences in double with h = 1e-6: truncation + cancellation ~1e-9.
constexpr double kFdTol = 1e-7;

// --- embedding -----------------------------------------------------------------------

TEST(Kernels, EmbeddingForwardBackward) {
  const int B = 3, T = 13, C = 37, V = 61;
  const auto tokens = random_tokens(B * T, V, 1);
  const Floats wte = random_floats(V * C, 2), wpe = random_floats(T * C, 3);
  Floats out(B * T * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  Doubles ref(out.size());
  const Doubles wte64 = widen(wte), wpe64 = widen(wpe);
  scalar::embedding_forward(ref.data(), tokens.data(), wte64.data(), wpe64.data(), B, T, C);
  EXPECT_LT(rel_l2(out, ref), 1e-7);

  // dwte accumulates onto what the tied head wrote; dwpe is overwritten (start it dirty).
  // V = 61 for 39 positions: many tokens repeat.
  const Floats dout = random_floats(B * T * C, 4);
  const Floats dwte_before = random_floats(V * C, 5);
  Floats dwte = dwte_before, dwpe = random_floats(T * C, 6);
  Doubles dwte64 = widen(dwte), dwpe64(T * C, 123.0);
  std::vector<int64_t> scratch(cpu::embedding_backward_scratch(B, T));
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C,
                          scratch.data());
  scalar::embedding_backward(dwte64.data(), dwpe64.data(), widen(dout).data(), tokens.data(), B, T,
                             C);
  EXPECT_LT(rel_l2(dwte, dwte64), kTol);
  EXPECT_LT(rel_l2(dwpe, dwpe64), kTol);

  // The same sums in the same order as the scalar reference on fp32: the same bits.
  Floats dwte32 = dwte_before, dwpe32(T * C, 123.0f);
  scalar::embedding_backward(dwte32.data(), dwpe32.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_EQ(dwte, dwte32);
  EXPECT_EQ(dwpe, dwpe32);

  // Each token's row is one thread's: any team gives the same bits.
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    Floats dwte_team = dwte_before, dwpe_team(T * C);
    cpu::embedding_backward(dwte_team.data(), dwpe_team.data(), dout.data(), tokens.data(), B, T, C,
                            scratch.data());
    EXPECT_EQ(dwte_team, dwte) << threads << " threads";
    EXPECT_EQ(dwpe_team, dwpe) << threads << " threads";
  }
  omp_set_num_threads(saved_threads);

  // Without positions, dwpe is null and only dwte changes.
  Floats dwte2 = dwte_before;
  cpu::embedding_backward(dwte2.data(), nullptr, dout.data(), tokens.data(), B, T, C,
                          scratch.data());
  EXPECT_EQ(dwte2, dwte);
}

// A token that fills the batch: its row's gradient is one rounding of the float64 sum, not one
// per position (fp32 addition row after row drifts by many ulps over 4099 same-signed terms).
TEST(Kernels, EmbeddingGradientRoundsEachTokenOnce) {
  const int B = 1, T = 4099, C = 19;
  const std::vector<int32_t> tokens(T, 3);
  Floats dout = random_floats(T * C, 7);
  for (auto& x : dout) x = 1.0f + std::fabs(x) / 3.0f;
  const Floats head = random_floats(5 * C, 8);  // the tied head's gradient, added to first
  Floats dwte = head, dwpe(T * C);
  std::vector<int64_t> scratch(cpu::embedding_backward_scratch(B, T));
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C,
                          scratch.data());
  for (int c = 0; c < C; ++c) {
    double exact = head[3 * C + c];
    for (int t = 0; t < T; ++t) exact += dout[static_cast<size_t>(t) * C + c];
    const float got = dwte[3 * C + c];
    EXPECT_LE(std::fabs(static_cast<double>(got) - exact),
              std::fabs(static_cast<double>(std::nextafter(got, 0.0f)) - got))
        << "channel " << c;
  }
  for (int v : {0, 1, 2, 4})  // the tokens the batch lacks keep their gradient bit for bit
    for (int c = 0; c < C; ++c) EXPECT_EQ(dwte[v * C + c], head[v * C + c]);
}

// Through the profiles, the embedding gradient runs in the scratch plan() sized for the step's
// batch, the kernel's bits; a larger batch is an error, not an allocation inside the step.
TEST(Kernels, EmbeddingGradientRunsInThePlannedScratch) {
  const int B = 2, T = 7, C = 13, V = 11;
  forge::StepShape shape;
  shape.B = B, shape.T = T, shape.C = C, shape.NH = 1, shape.V = V, shape.Vp = V, shape.L = 1;
  const Floats dout = random_floats(size_t(B + 1) * T * C, 9);
  std::vector<int32_t> tokens(size_t(B + 1) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 5) % V);
  const Floats head = random_floats(size_t(V) * C, 10);
  Floats want = head, want_pe(size_t(T) * C);
  std::vector<int64_t> scratch(cpu::embedding_backward_scratch(B, T));
  cpu::embedding_backward(want.data(), want_pe.data(), dout.data(), tokens.data(), B, T, C,
                          scratch.data());
  for (const char* profile : {"fast", "bf16"}) {
    auto nx = forge::make_numerics(profile);
    nx->plan(shape);
    Floats dwte = head, dwpe(size_t(T) * C);
    nx->embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    EXPECT_EQ(dwte, want) << profile;
    EXPECT_EQ(dwpe, want_pe) << profile;
    EXPECT_THROW(
        nx->embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B + 1, T, C),
        forge::Error)
        << profile;
  }
}

// --- layernorm -----------------------------------------------------------------------

void LayerNormMatchesFloat64_body() {
  const int N = 7 * 13, C = 37;
  // A large common offset: the variance must not cancel catastrophically.
  Floats x = random_floats(N * C, 10);
  for (auto& v : x) v += 30.0f;
  const Floats w = random_floats(C, 11), b = random_floats(C, 12), dout = random_floats(N * C, 13);
  Floats out(N * C), mean(N), rstd(N), dx(N * C), dw(C, 7.0f), db(C, 7.0f);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5f);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);

  const Doubles x64 = widen(x), w64 = widen(w), b64 = widen(b), dout64 = widen(dout);
  Doubles out64(N * C), mean64(N), rstd64(N), dx64(N * C), dw64(C), db64(C);
  scalar::layernorm_forward(out64.data(), mean64.data(), rstd64.data(), x64.data(), w64.data(),
                            b64.data(), N, C, 1e-5);
  scalar::layernorm_backward(dx64.data(), dw64.data(), db64.data(), dout64.data(), x64.data(),
                             w64.data(), mean64.data(), rstd64.data(), N, C);
  // The offset of 30 costs fp32 about 30x its ulp in xhat (x - mean rounds at 30's ulp,
  // ~2e-6): inherent to fp32 inputs, whatever the kernel; still well inside 1e-5.
  EXPECT_LT(rel_l2(out, out64), 1e-5);
  EXPECT_LT(rel_l2(mean, mean64), 1e-7);
  EXPECT_LT(rel_l2(rstd, rstd64), kTol);
  EXPECT_LT(rel_l2(dx, dx64), 1e-5);
  EXPECT_LT(rel_l2(dw, dw64), 1e-5);
  EXPECT_LT(rel_l2(db, db64), kTol);

  // With a residual gradient folded in (the compiler may fuse the add into the last multiply,
  // so the bits can differ from adding afterwards; the math may not).
  const Floats dres = random_floats(N * C, 14);
  Floats fused(N * C), dw2(C), db2(C);
  cpu::layernorm_backward_residual(fused.data(), dw2.data(), db2.data(), dout.data(), x.data(),
                                   w.data(), mean.data(), rstd.data(), dres.data(), N, C);
  Doubles sum64 = widen(dres);
  for (size_t i = 0; i < sum64.size(); ++i) sum64[i] += dx64[i];
  EXPECT_LT(rel_l2(fused, sum64), 1e-5);
  EXPECT_EQ(dw2, dw);
  EXPECT_EQ(db2, db);
}

TEST(Kernels, LayerNormMatchesFloat64) { for_each_isa(LayerNormMatchesFloat64_body); }

TEST(Kernels, LayerNormBackwardMatchesFiniteDifferences) {
  const int N = 3, C = 5;
  const Doubles x = widen(random_floats(N * C, 20)), w = widen(random_floats(C, 21)),
                b = widen(random_floats(C, 22)), dout = widen(random_floats(N * C, 23));
  auto forward = [&](const Doubles& xx, const Doubles& ww, const Doubles& bb) {
    Doubles out(N * C), mean(N), rstd(N);
    scalar::layernorm_forward(out.data(), mean.data(), rstd.data(), xx.data(), ww.data(), bb.data(),
                              N, C, 1e-5);
    return out;
  };
  Doubles out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  scalar::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                            C, 1e-5);
  scalar::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                             mean.data(), rstd.data(), N, C);
  EXPECT_LT(
      rel_l2(dx, numeric_gradient([&](const Doubles& v) { return forward(v, w, b); }, x, dout)),
      kFdTol);
  EXPECT_LT(
      rel_l2(dw, numeric_gradient([&](const Doubles& v) { return forward(x, v, b); }, w, dout)),
      kFdTol);
  EXPECT_LT(
      rel_l2(db, numeric_gradient([&](const Doubles& v) { return forward(x, w, v); }, b, dout)),
      kFdTol);
}

// --- linear --------------------------------------------------------------------------

void check_linear(int N, int IC, int OC, bool with_bias, bool with_dinp) {
  SCOPED_TRACE(testing::Message() << "N=" << N << " IC=" << IC << " OC=" << OC
                                  << " bias=" << with_bias << " dinp=" << with_dinp);
  const Floats x = random_floats(N * IC, 30), w = random_floats(OC * IC, 31),
               b = random_floats(OC, 32), dout = random_floats(N * OC, 33);
  Floats out(N * OC), dx(N * IC, 5.0f), dw(OC * IC, 5.0f), db(OC, 5.0f);
  cpu::linear_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IC, OC);
  cpu::linear_backward(with_dinp ? dx.data() : nullptr, dw.data(), with_bias ? db.data() : nullptr,
                       dout.data(), x.data(), w.data(), N, IC, OC);
  const Doubles x64 = widen(x), w64 = widen(w), b64 = widen(b), dout64 = widen(dout);
  Doubles out64(N * OC), dx64(N * IC), dw64(OC * IC), db64(OC);
  scalar::linear_forward(out64.data(), x64.data(), w64.data(), with_bias ? b64.data() : nullptr, N,
                         IC, OC);
  scalar::linear_backward(dx64.data(), dw64.data(), db64.data(), dout64.data(), x64.data(),
                          w64.data(), N, IC, OC);
  EXPECT_LT(rel_l2(out, out64), kTol);
  EXPECT_LT(rel_l2(dw, dw64), kTol);
  if (with_dinp)
    EXPECT_LT(rel_l2(dx, dx64), kTol);
  else
    EXPECT_EQ(dx, Floats(N * IC, 5.0f));  // null dinp: nothing written
  if (with_bias)
    EXPECT_LT(rel_l2(db, db64), kTol);
  else
    EXPECT_EQ(db, Floats(OC, 5.0f));
}

TEST(Kernels, LinearMatchesFloat64) {
  check_linear(7 * 13, 37, 111, true, true);
  check_linear(7 * 13, 37, 61, false, true);
  check_linear(53, 101, 37, true, false);
  check_linear(1, 3, 1, true, true);
}

// Sibling linear layers (Llama's q, k, v): `fast` and `bf16` multiply by the stacked weight
// when the weights lie back to back, and run them one by one when they do not; both must be
// the separate layers' math (for bf16 on bf16-rounded operands: scalar::bf16_linear_*), with
// d(inp) the sum of every layer's term.
void check_linear_siblings(const std::string& profile, bool back_to_back) {
  SCOPED_TRACE(testing::Message() << profile << " back_to_back=" << back_to_back);
  const bool bf16 = profile == "bf16";
  const int B = 7, T = 13, N = B * T, IC = 37;
  const int widths[] = {29, 11, 11};
  const int total = 29 + 11 + 11, gap = back_to_back ? 0 : 16;
  const size_t w_floats = size_t(total) * IC + 2 * gap;
  const Floats x = random_floats(size_t(N) * IC, 34), w = random_floats(w_floats, 35);
  Floats dw(w_floats, 5.0f);
  size_t offset[3];
  for (size_t i = 0, o = 0; i < 3; o += size_t(widths[i]) * IC + gap, ++i) offset[i] = o;
  std::vector<Floats> out, dout;
  for (int i = 0; i < 3; ++i) {
    out.emplace_back(size_t(N) * widths[i]);
    dout.push_back(random_floats(size_t(N) * widths[i], 36 + i));
  }
  Floats dx(size_t(N) * IC), scratch(size_t(N) * IC);

  auto nx = forge::make_numerics(profile);
  forge::StepShape shape;
  shape.B = B, shape.T = T, shape.C = IC;
  shape.linear_weights = 3;  // as the model plans them: bf16 keeps each weight's operand
  shape.linear_weight_floats = size_t(total) * IC;
  shape.stacked_linear_shapes = {{total, IC}};
  nx->plan(shape);
  Floats saved(nx->linear_saved_floats(N, IC, total));
  nx->linear_forward_siblings({out[0].data(), out[1].data(), out[2].data()}, saved.data(), x.data(),
                              {&w[offset[0]], &w[offset[1]], &w[offset[2]]},
                              {widths[0], widths[1], widths[2]}, N, IC);
  nx->linear_backward_siblings(dx.data(), scratch.data(),
                               {&dw[offset[0]], &dw[offset[1]], &dw[offset[2]]},
                               {dout[0].data(), dout[1].data(), dout[2].data()}, x.data(),
                               {&w[offset[0]], &w[offset[1]], &w[offset[2]]}, saved.data(),
                               {widths[0], widths[1], widths[2]}, N, IC);

  const Doubles x64 = widen(x);
  Doubles dx64(size_t(N) * IC, 0.0);
  for (int i = 0; i < 3; ++i) {
    const Floats w_i(w.begin() + offset[i], w.begin() + offset[i] + size_t(widths[i]) * IC);
    const Doubles w64 = widen(w_i);
    Doubles out64(size_t(N) * widths[i]), dxi(size_t(N) * IC), dwi(size_t(widths[i]) * IC);
    if (bf16) {
      scalar::bf16_linear_forward<double>(out64.data(), x.data(), w_i.data(), nullptr, N, IC,
                                          widths[i]);
      scalar::bf16_linear_backward<double>(dxi.data(), dwi.data(), nullptr, dout[i].data(),
                                           x.data(), w_i.data(), N, IC, widths[i]);
    } else {
      scalar::linear_forward<double>(out64.data(), x64.data(), w64.data(), nullptr, N, IC,
                                     widths[i]);
      scalar::linear_backward<double>(dxi.data(), dwi.data(), nullptr, widen(dout[i]).data(),
                                      x64.data(), w64.data(), N, IC, widths[i]);
    }
    for (size_t j = 0; j < dxi.size(); ++j) dx64[j] += dxi[j];
    EXPECT_LT(rel_l2(out[i], out64), kTol) << "layer " << i;
    const Floats dw_i(dw.begin() + offset[i], dw.begin() + offset[i] + dwi.size());
    EXPECT_LT(rel_l2(dw_i, dwi), kTol) << "layer " << i;
  }
  EXPECT_LT(rel_l2(dx, dx64), kTol);
  if (!back_to_back) {  // the gaps between the weights' gradients are left alone
    for (size_t g = offset[1] - gap; g < offset[1]; ++g) EXPECT_EQ(dw[g], 5.0f);
  }
}

TEST(Kernels, LinearSiblingsMatchFloat64) {
  for (const std::string profile : {"fast", "bf16"}) {
    check_linear_siblings(profile, true);
    check_linear_siblings(profile, false);
  }
}

// Parameter gradients that sum over the B T rows (biases, norm weights) sum them in double.
// Summed in fp32, small's first step put its bias gradients ten times as far from float64
// as PyTorch's, and a query bias with a gradient under AdamW's eps past the alignment gate's
// bound. Every term here has its column's sign, so that the float64 sum has no cancellation
// to hide behind: a sum in double, rounded once, is within an ulp of it (a few for the norm
// weights, whose terms carry fp32 normalized values), where a running fp32 sum over 65537 rows
// is off by dozens.
void ParameterGradientsSumTheirRowsInDouble_body() {
  const int N = 65537, OC = 37;
  std::mt19937 rng(90);
  std::uniform_real_distribution<float> around_one(0.5f, 1.5f);
  Floats dout(size_t(N) * OC);
  for (float& v : dout) v = around_one(rng);
  // within `ulps` of the float64 truth, relative to it
  auto near = [](float got, double truth, double ulps) {
    return std::abs(got - truth) <= ulps * std::ldexp(std::abs(truth), -24);
  };
  Doubles column_sums(OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) column_sums[o] += dout[size_t(n) * OC + o];
  Floats dbias(OC), dbias_rows(OC), dbias_operands(OC);
  std::vector<uint16_t> g(dout.size()), gt(dout.size());
  cpu::bias_gradient(dbias.data(), dout.data(), N, OC);
  cpu::bf16_gradient_rows(g.data(), dbias_rows.data(), dout.data(), N, OC);
  cpu::bf16_gradient_operands(g.data(), gt.data(), dbias_operands.data(), dout.data(), N, OC);
  for (int o = 0; o < OC; ++o) {
    EXPECT_TRUE(near(dbias[o], column_sums[o], 1.0))
        << o << ": " << dbias[o] << " vs " << column_sums[o];
    EXPECT_EQ(dbias_rows[o], dbias[o]) << o;
    EXPECT_EQ(dbias_operands[o], dbias[o]) << o;
  }
  // The norms: rows [a, -a, b, -b] (a, b in [0.5, 1.5]) have zero mean and a normalized value
  // of a fixed sign in each column, and every output gradient is positive.
  const int C = 4;
  Floats x(size_t(N) * C), d(size_t(N) * C), w(C, 1.0f), zeros(C, 0.0f);
  for (int n = 0; n < N; ++n) {
    const float a = around_one(rng), b = around_one(rng);
    const float row[C] = {a, -a, b, -b};
    std::copy(row, row + C, x.begin() + size_t(n) * C);
    for (int c = 0; c < C; ++c) d[size_t(n) * C + c] = around_one(rng);
  }
  Doubles ln_dw(C), ln_db(C), rms_dw(C);
  const float eps = 1e-5f;
  for (int n = 0; n < N; ++n) {
    const float* r = x.data() + size_t(n) * C;
    double mean = 0.0, var = 0.0, ms = 0.0;
    for (int c = 0; c < C; ++c) mean += r[c] / double(C);
    for (int c = 0; c < C; ++c) var += (r[c] - mean) * (r[c] - mean) / C;
    for (int c = 0; c < C; ++c) ms += double(r[c]) * r[c] / C;
    for (int c = 0; c < C; ++c) {
      const double dv = d[size_t(n) * C + c];
      ln_dw[c] += dv * (r[c] - mean) / std::sqrt(var + eps);
      ln_db[c] += dv;
      rms_dw[c] += dv * r[c] / std::sqrt(ms + eps);
    }
  }
  Floats out(x.size()), mean(N), rstd(N), dx(x.size()), dw(C), db(C);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), zeros.data(), N,
                         C, eps);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  for (int c = 0; c < C; ++c) {
    EXPECT_TRUE(near(db[c], ln_db[c], 1.0)) << "layernorm dbias " << c;
    EXPECT_TRUE(near(dw[c], ln_dw[c], 4.0))
        << "layernorm dweight " << c << ": " << dw[c] << " vs " << ln_dw[c];
  }
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  cpu::rmsnorm_backward(dx.data(), dw.data(), d.data(), x.data(), w.data(), rstd.data(), N, C);
  for (int c = 0; c < C; ++c)
    EXPECT_TRUE(near(dw[c], rms_dw[c], 4.0))
        << "rmsnorm dweight " << c << ": " << dw[c] << " vs " << rms_dw[c];
}

TEST(Kernels, ParameterGradientsSumTheirRowsInDouble) {
  for_each_isa(ParameterGradientsSumTheirRowsInDouble_body);
}

TEST(Kernels, SplitAndJoinColumnsAreInverse) {
  const int N = 19, widths[] = {5, 1, 17};
  const Floats stacked = random_floats(size_t(N) * 23, 40);
  Floats a(size_t(N) * 5), b(size_t(N) * 1), c(size_t(N) * 17), joined(stacked.size());
  float* parts[] = {a.data(), b.data(), c.data()};
  cpu::split_columns(parts, widths, 3, stacked.data(), N);
  for (int n = 0; n < N; ++n) {
    ASSERT_EQ(a[n * 5 + 4], stacked[n * 23 + 4]);
    ASSERT_EQ(b[n], stacked[n * 23 + 5]);
    ASSERT_EQ(c[n * 17], stacked[n * 23 + 6]);
  }
  const float* const_parts[] = {a.data(), b.data(), c.data()};
  cpu::join_columns(joined.data(), const_parts, widths, 3, N);
  EXPECT_EQ(joined, stacked);
}

// --- gemm ----------------------------------------------------------------------------

void check_gemm_backend(forge::kernels::cpu::GemmBackend backend) {
  // Awkward sizes: ragged register tiles, several K slices (K > 384), several row blocks
  // (M > 144) and column blocks (N > 512), C split by rows (M >= N) and by columns.
  struct Shape {
    int M, N, K;
  };
  {
    if (!cpu::gemm_backend_available(backend)) return;
    for (Shape sh : {Shape{7, 37, 13}, Shape{101, 53, 300}, Shape{193, 611, 29}, Shape{67, 45, 800},
                     Shape{1100, 530, 7}, Shape{1, 1, 1}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (float beta : {0.0f, 1.0f, 0.5f}) {
            SCOPED_TRACE(testing::Message()
                         << cpu::gemm_backend_name(backend) << " M=" << sh.M << " N=" << sh.N
                         << " K=" << sh.K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
            // Leading dimensions wider than the rows, to catch a kernel that ignores them.
            const int lda = (ta ? sh.M : sh.K) + 3, ldb = (tb ? sh.K : sh.N) + 2, ldc = sh.N + 5;
            const int a_rows = ta ? sh.K : sh.M, b_rows = tb ? sh.N : sh.K;
            const Floats A = random_floats(size_t(a_rows) * lda, 100),
                         B = random_floats(size_t(b_rows) * ldb, 101);
            Floats Cm = random_floats(size_t(sh.M) * ldc, 102);
            Doubles C64 = widen(Cm);
            cpu::gemm_with(backend, ta, tb, sh.M, sh.N, sh.K, A.data(), lda, B.data(), ldb, beta,
                           Cm.data(), ldc);
            scalar::gemm<double>(ta, tb, sh.M, sh.N, sh.K, widen(A).data(), lda, widen(B).data(),
                                 ldb, beta, C64.data(), ldc);
            EXPECT_LT(rel_l2(Cm, C64), kTol);
          }
  }
}

TEST(Kernels, GemmBackendsMatchFloat64) {
  using forge::kernels::cpu::GemmBackend;
  check_gemm_backend(GemmBackend::kOpenBLAS);
  check_gemm_backend(GemmBackend::kOneDNN);
  check_gemm_backend(GemmBackend::kOneDnnMatmul);
  for_each_isa([] { check_gemm_backend(GemmBackend::kForge); });
}

// The per-shape rule (gemm_backend_for): forward products on the matmul primitive, the
// backward on dnnl_sgemm, except small weight gradients on AVX2, which forge's kernel ran
// faster (measured in bench_kernels; gemm.cpp gives the figures). Each backend it names is
// checked against float64 above.
TEST(Kernels, GemmBackendRuleFollowsShapeAndIsa) {
  using forge::kernels::cpu::GemmBackend;
  using forge::kernels::cpu::Isa;
#ifndef FORGE_HAVE_DNNL
  EXPECT_EQ(cpu::gemm_backend_for(true, false, 384, 384, 2048), GemmBackend::kOpenBLAS);
#else
  for_each_isa([] {
    // AVX2 on both sides: forge limited to AVX2 on an AVX-512 CPU still meets oneDNN's AVX-512.
    const bool avx2 =
        cpu::active_isa() == Isa::kAvx2 && !cpu::onednn_runs_isa(dnnl_cpu_isa_avx512_core);
    EXPECT_EQ(cpu::gemm_backend_for(false, true, 2048, 384, 384), GemmBackend::kOneDnnMatmul);
    EXPECT_EQ(cpu::gemm_backend_for(false, false, 2048, 384, 384), GemmBackend::kOneDNN);
    // dweight = dout^T inp: [OC, IC] summed over the 2048 tokens of small's micro-batch.
    EXPECT_EQ(cpu::gemm_backend_for(true, false, 384, 384, 2048),
              avx2 ? GemmBackend::kForge : GemmBackend::kOneDNN);
    EXPECT_EQ(cpu::gemm_backend_for(true, false, 512, 512, 2048),
              avx2 ? GemmBackend::kForge : GemmBackend::kOneDNN);
    EXPECT_EQ(cpu::gemm_backend_for(true, false, 1152, 384, 2048), GemmBackend::kOneDNN);
    EXPECT_EQ(cpu::gemm_backend_for(true, false, 513, 512, 2048), GemmBackend::kOneDNN);
  });
#endif
}

// The attention kernels' small products (tile_gemm.inc, here on the build's ISA): C += A B and
// C = A B, A read through row and column strides (the kernels pass swapped strides for A^T),
// on sizes that leave every ragged end (rows past the 12/6/4/2 blocks, columns past whole
// vectors) and K = 1. gemm must give the bits gemm_acc gives on a zeroed C, whatever C held.
TEST(Kernels, TileGemmMatchesFloat64) {
  namespace tile = forge::kernels::tile;
  for (int M : {1, 3, 13, 32})
    for (int N : {1, 7, 16, 37, 64})
      for (int K : {1, 5, 64})
        for (bool transposed : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << "M=" << M << " N=" << N << " K=" << K << " transposed=" << transposed);
          const int lda = (transposed ? M : K) + 3, ldb = N + 5, ldc = N + 2;
          const int a_row = transposed ? 1 : lda, a_col = transposed ? lda : 1;
          const Floats A = random_floats(size_t(transposed ? K : M) * lda, 120),
                       B = random_floats(size_t(K) * ldb, 121),
                       C0 = random_floats(size_t(M) * ldc, 122);
          Floats acc = C0, set(C0.size(), 7.0f), zeroed(C0.size(), 0.0f);
          tile::gemm_acc(M, N, K, A.data(), a_row, a_col, B.data(), ldb, acc.data(), ldc);
          tile::gemm(M, N, K, A.data(), a_row, a_col, B.data(), ldb, set.data(), ldc);
          tile::gemm_acc(M, N, K, A.data(), a_row, a_col, B.data(), ldb, zeroed.data(), ldc);
          Floats acc_c, set_c, zeroed_c;
          Doubles acc64, set64;
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double dot = 0.0;
              for (int k = 0; k < K; ++k)
                dot += double(A[size_t(i) * a_row + size_t(k) * a_col]) * B[size_t(k) * ldb + j];
              const size_t c = size_t(i) * ldc + j;
              acc64.push_back(C0[c] + dot);
              set64.push_back(dot);
              acc_c.push_back(acc[c]);
              set_c.push_back(set[c]);
              zeroed_c.push_back(zeroed[c]);
            }
          EXPECT_LT(rel_l2(acc_c, acc64), kTol);
          EXPECT_LT(rel_l2(set_c, set64), kTol);
          EXPECT_EQ(set_c, zeroed_c);
          // gemm_acc_kept_rows: gemm_acc on C with the rows from `kept` on zeroed, whatever
          // those rows held, kept clamped to [0, M]
          for (int kept : {-1, 0, M / 2, M - 1, M, M + 1}) {
            SCOPED_TRACE(testing::Message() << "kept=" << kept);
            Floats mixed = C0, expected = C0;
            for (int i = std::clamp(kept, 0, M); i < M; ++i)
              for (int j = 0; j < N; ++j) {
                mixed[size_t(i) * ldc + j] = 7.0f;
                expected[size_t(i) * ldc + j] = 0.0f;
              }
            tile::gemm_acc_kept_rows(kept, M, N, K, A.data(), a_row, a_col, B.data(), ldb,
                                     mixed.data(), ldc);
            tile::gemm_acc(M, N, K, A.data(), a_row, a_col, B.data(), ldb, expected.data(), ldc);
            EXPECT_EQ(mixed, expected);
          }
          // the padding between rows is not written
          for (int i = 0; i < M; ++i)
            for (int j = N; j < ldc; ++j) {
              EXPECT_EQ(acc[size_t(i) * ldc + j], C0[size_t(i) * ldc + j]);
              EXPECT_EQ(set[size_t(i) * ldc + j], 7.0f);
            }
        }
}

// Each thread owns a share of C and every element is summed over K in one order, so the
// thread count must not change a bit (a resumed run may use another).
TEST(Kernels, ForgeGemmIsTheSameOnAnyThreadCount) {
  using forge::kernels::cpu::GemmBackend;
  const int saved = omp_get_max_threads();
  for_each_isa([] {
    // Rows split (M >= N) and columns split, several K slices.
    for (auto [M, N, K] : {std::array<int, 3>{301, 67, 800}, std::array<int, 3>{45, 530, 411}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << "M=" << M << " N=" << N << " ta=" << ta << " tb=" << tb);
          const Floats A = random_floats(size_t(M) * K, 31), B = random_floats(size_t(K) * N, 32);
          std::vector<Floats> C(3, Floats(size_t(M) * N));
          for (int threads = 1; threads <= 3; ++threads) {
            omp_set_num_threads(threads);
            cpu::gemm_with(GemmBackend::kForge, ta, tb, M, N, K, A.data(), ta ? M : K, B.data(),
                           tb ? K : N, 0.0f, C[threads - 1].data(), N);
          }
          EXPECT_EQ(C[0], C[1]);
          EXPECT_EQ(C[0], C[2]);
        }
  });
  omp_set_num_threads(saved);
}

// --- attention -----------------------------------------------------------------------

struct AttentionResult {
  Floats out, dqkv;
};

AttentionResult run_cpu_attention(const Floats& qkv, const Floats& dout, int B, int T, int C,
                                  int NH) {
  Floats out(B * T * C), lse(cpu::attention_saved_floats(B, T, C, NH)), dqkv(B * T * 3 * C, 9.0f);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                          NH);
  return {out, dqkv};
}

void check_attention(int B, int T, int C, int NH, float spread) {
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
  const Floats qkv = random_floats(B * T * 3 * C, 40, spread), dout = random_floats(B * T * C, 41);
  const AttentionResult got = run_cpu_attention(qkv, dout, B, T, C, NH);
  const Doubles qkv64 = widen(qkv), dout64 = widen(dout);
  Doubles out64(B * T * C), probs(scalar::attention_saved_floats(B, T, NH)), dqkv64(B * T * 3 * C);
  scalar::attention_forward(out64.data(), probs.data(), qkv64.data(), B, T, C, NH);
  scalar::attention_backward(dqkv64.data(), dout64.data(), qkv64.data(), probs.data(), B, T, C, NH);
  EXPECT_LT(rel_l2(got.out, out64), 5e-6);
  EXPECT_LT(rel_l2(got.dqkv, dqkv64), 1e-5);
}

void AttentionMatchesFloat64_body() {
  check_attention(2, 13, 3 * 7, 3, 1.0f);
  // T > the key tile (64) so the online-softmax rescaling across tiles is exercised, with
  // scores spread enough that later tiles raise the running maximum.
  check_attention(1, 150, 2 * 19, 2, 2.0f);
  check_attention(2, 67, 64, 1, 1.0f);
  // 32 heads in all: forward's tasks are whole heads (their own transposes) on up to 8 threads;
  // the shapes above, with few heads, take the query-tile tasks.
  check_attention(8, 20, 4 * 6, 4, 1.0f);
}

TEST(Kernels, AttentionMatchesFloat64) { for_each_isa(AttentionMatchesFloat64_body); }

void AttentionBackwardMatchesFiniteDifferences_body() {
  const int B = 1, T = 4, C = 6, NH = 2;
  const Doubles qkv = widen(random_floats(B * T * 3 * C, 50)),
                dout = widen(random_floats(B * T * C, 51));
  auto forward = [&](const Doubles& x) {
    Doubles out(B * T * C), probs(scalar::attention_saved_floats(B, T, NH));
    scalar::attention_forward(out.data(), probs.data(), x.data(), B, T, C, NH);
    return out;
  };
  Doubles out(B * T * C), probs(scalar::attention_saved_floats(B, T, NH)), dqkv(B * T * 3 * C);
  scalar::attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
  scalar::attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH);
  EXPECT_LT(rel_l2(dqkv, numeric_gradient(forward, qkv, dout)), kFdTol);
  // The cpu kernel on the same tiny case, for the same derivative.
  Floats qkv32(qkv.begin(), qkv.end()), dout32(dout.begin(), dout.end());
  EXPECT_LT(rel_l2(run_cpu_attention(qkv32, dout32, B, T, C, NH).dqkv, dqkv), 1e-5);
}

TEST(Kernels, AttentionBackwardMatchesFiniteDifferences) {
  for_each_isa(AttentionBackwardMatchesFiniteDifferences_body);
}

// --- gelu ----------------------------------------------------------------------------

void GeluMatchesFloat64_body() {
  const size_t n = 100003;  // several parallel chunks and a ragged tail
  Floats x = random_floats(n, 60, 3.0f);
  x[0] = 0.0f;
  x[1] = 12.0f;
  x[2] = -12.0f;
  x[3] = 1e-4f;
  // Far tails, where tanh u is +-1 to fp32 precision and the gradient's 1 - tanh^2 u meets a
  // factor cubic in x (the kernel's sigmoid form must give exactly 1 and 0 there).
  x[4] = 40.0f;
  x[5] = 472.0f;
  x[6] = -472.0f;
  x[7] = 5.1f;  // u just past 9, where tanh u first rounds to 1
  const Floats dout = random_floats(n, 61);
  Floats out(n), dx(n);
  cpu::gelu_forward(out.data(), x.data(), n);
  cpu::gelu_backward(dx.data(), x.data(), dout.data(), n);
  const Doubles x64 = widen(x), dout64 = widen(dout);
  Doubles out64(n), dx64(n);
  scalar::gelu_forward(out64.data(), x64.data(), n);
  scalar::gelu_backward(dx64.data(), x64.data(), dout64.data(), n);
  EXPECT_LT(rel_l2(out, out64), kTol);
  EXPECT_LT(rel_l2(dx, dx64), kTol);
  double worst = 0.0, worst_dx = 0.0;  // absolute, per element, against the output scale
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(out[i] - out64[i]) / (1.0 + std::abs(out64[i])));
    worst_dx = std::max(worst_dx, std::abs(dx[i] - dx64[i]) / (1.0 + std::abs(dx64[i])));
  }
  EXPECT_LT(worst, 1e-6);
  // (A tanh with its argument clamped at 9 had erred by 0.67 at x = 472, and 1 + tanh u lost
  // its last bits to cancellation near x = -5.)
  EXPECT_LT(worst_dx, 1e-6);
}

TEST(Kernels, GeluMatchesFloat64) { for_each_isa(GeluMatchesFloat64_body); }

TEST(Kernels, GeluBackwardMatchesFiniteDifferences) {
  const size_t n = 23;
  const Doubles x = widen(random_floats(n, 62, 2.0f)), dout = widen(random_floats(n, 63));
  Doubles dx(n);
  scalar::gelu_backward(dx.data(), x.data(), dout.data(), n);
  auto forward = [&](const Doubles& v) {
    Doubles out(n);
    scalar::gelu_forward(out.data(), v.data(), n);
    return out;
  };
  EXPECT_LT(rel_l2(dx, numeric_gradient(forward, x, dout)), kFdTol);
}

// --- elementwise ---------------------------------------------------------------------

TEST(Kernels, ElementwiseAdd) {
  const size_t n = 70001;
  const Floats a = random_floats(n, 70), b = random_floats(n, 71);
  Floats out(n);
  cpu::add(out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  Floats aliased = a;  // out aliasing an input
  cpu::add(aliased.data(), aliased.data(), b.data(), n);
  EXPECT_EQ(aliased, out);
  Floats acc = a;
  cpu::add_inplace(acc.data(), b.data(), n);
  EXPECT_EQ(acc, out);
}

// --- cross-entropy -------------------------------------------------------------------

void CrossEntropyMatchesFloat64_body() {
  const int N = 7 * 13, V = 61, Vp = 64;
  Floats logits = random_floats(N * Vp, 80, 3.0f);
  // Padded columns hold garbage that must not leak into the softmax.
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) logits[n * Vp + v] = 1e4f;
  const auto targets = random_tokens(N, V, 81);
  Floats lse(cpu::cross_entropy_saved_floats(N)), dlogits(N * Vp, 3.0f);
  const float loss =
      cpu::cross_entropy_forward(lse.data(), logits.data(), targets.data(), N, V, Vp);
  cpu::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), N, V, Vp,
                              0.5f);
  const Doubles logits64 = widen(logits);
  Doubles lse64(N), dlogits64(N * Vp);
  const double loss64 =
      scalar::cross_entropy_forward(lse64.data(), logits64.data(), targets.data(), N, V, Vp);
  scalar::cross_entropy_backward(dlogits64.data(), logits64.data(), lse64.data(), targets.data(), N,
                                 V, Vp, 0.5);
  EXPECT_NEAR(loss, loss64, 1e-6 * loss64);
  EXPECT_LT(rel_l2(lse, lse64), 1e-7);
  EXPECT_LT(rel_l2(dlogits, dlogits64), kTol);
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) ASSERT_EQ(dlogits[n * Vp + v], 0.0f);

  // In place (dlogits aliasing logits), as a model may do to save memory.
  Floats inplace = logits;
  cpu::cross_entropy_backward(inplace.data(), inplace.data(), lse.data(), targets.data(), N, V, Vp,
                              0.5f);
  EXPECT_EQ(inplace, dlogits);
}

TEST(Kernels, CrossEntropyMatchesFloat64) { for_each_isa(CrossEntropyMatchesFloat64_body); }

TEST(Kernels, CrossEntropyBackwardMatchesFiniteDifferences) {
  const int N = 3, V = 5, Vp = 8;
  const Doubles logits = widen(random_floats(N * Vp, 82));
  const auto targets = random_tokens(N, V, 83);
  Doubles lse(N), dlogits(N * Vp);
  scalar::cross_entropy_forward(lse.data(), logits.data(), targets.data(), N, V, Vp);
  scalar::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), N, V,
                                 Vp, 1.0);
  auto loss = [&](const Doubles& x) {
    Doubles l(N);
    return Doubles{scalar::cross_entropy_forward(l.data(), x.data(), targets.data(), N, V, Vp)};
  };
  EXPECT_LT(rel_l2(dlogits, numeric_gradient(loss, logits, Doubles{1.0})), kFdTol);
}

// --- AdamW + clipping ----------------------------------------------------------------

// torch.nn.utils.clip_grad_norm_ then torch.optim.AdamW, every scalar and element in double.
struct AdamState64 {
  Doubles param, m, v;
};
double adamw_reference(std::vector<AdamState64>& state, const std::vector<Doubles>& grads,
                       const std::vector<bool>& decay, const forge::OptimizerStep& hp) {
  double sq = 0.0;
  for (const auto& g : grads)
    for (double x : g) sq += x * x;
  const double norm = std::sqrt(sq);
  const double coef = hp.max_grad_norm > 0 ? std::min(1.0, hp.max_grad_norm / (norm + 1e-6)) : 1.0;
  const double bc1 = 1.0 - std::pow(hp.beta1, hp.step), bc2 = 1.0 - std::pow(hp.beta2, hp.step);
  for (size_t t = 0; t < state.size(); ++t)
    for (size_t i = 0; i < state[t].param.size(); ++i) {
      const double g = grads[t][i] * coef;
      double& p = state[t].param[i];
      double& m = state[t].m[i];
      double& v = state[t].v[i];
      if (decay[t]) p *= 1.0 - hp.lr * hp.weight_decay;
      m = hp.beta1 * m + (1.0 - hp.beta1) * g;
      v = hp.beta2 * v + (1.0 - hp.beta2) * g * g;
      p -= hp.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + hp.eps);
    }
  return norm;
}

void check_adamw(double max_grad_norm, bool use_cpu) {
  SCOPED_TRACE(testing::Message() << "max_grad_norm=" << max_grad_norm << " cpu=" << use_cpu);
  const std::vector<size_t> sizes = {37, 70001, 1, 4099};  // 70001: several parallel chunks
  const std::vector<bool> decay = {true, true, false, false};
  std::vector<Floats> param, grad, m, v;
  std::vector<AdamState64> ref;
  for (size_t t = 0; t < sizes.size(); ++t) {
    param.push_back(random_floats(sizes[t], 90 + t));
    m.push_back(Floats(sizes[t], 0.0f));
    v.push_back(Floats(sizes[t], 0.0f));
    ref.push_back({widen(param[t]), Doubles(sizes[t], 0.0), Doubles(sizes[t], 0.0)});
  }
  forge::OptimizerStep hp{3e-3, 0.9, 0.95, 1e-8, 0.1, max_grad_norm, 0};
  for (int step = 1; step <= 3; ++step) {
    hp.step = step;
    std::vector<Doubles> grads64;
    std::vector<forge::ParamRef> refs;
    grad.clear();
    for (size_t t = 0; t < sizes.size(); ++t) {
      grad.push_back(random_floats(sizes[t], 1000 * step + t, 0.01f));
      grads64.push_back(widen(grad[t]));
    }
    for (size_t t = 0; t < sizes.size(); ++t)
      refs.push_back({param[t].data(), grad[t].data(), m[t].data(), v[t].data(), sizes[t],
                      static_cast<bool>(decay[t])});
    const int count = static_cast<int>(refs.size());
    const float expected_norm = forge::kernels::global_grad_norm(refs.data(), count);
    const double norm = use_cpu ? cpu::optimizer_step(refs.data(), count, hp)
                                : scalar::optimizer_step(refs.data(), count, hp);
    const double norm64 = adamw_reference(ref, grads64, decay, hp);
    // fp32 sums in torch's order (tcpu::norm2 is bit-exact against torch in test_torch_cpu).
    EXPECT_NEAR(norm, norm64, 2e-6 * norm64);
    EXPECT_EQ(norm, expected_norm);
    for (size_t t = 0; t < sizes.size(); ++t) {
      EXPECT_LT(rel_l2(param[t], ref[t].param), 1e-6) << "tensor " << t << " step " << step;
      EXPECT_LT(rel_l2(m[t], ref[t].m), 1e-6) << "tensor " << t << " step " << step;
      EXPECT_LT(rel_l2(v[t], ref[t].v), 1e-5) << "tensor " << t << " step " << step;
    }
  }
}

void AdamWMatchesTorchFormulas_body() {
  // The gradients' global norm is ~0.01 * sqrt(74138) ~ 2.7: 1.0 clips, 0 disables, 10 does not.
  for (bool use_cpu : {true, false}) {
    check_adamw(1.0, use_cpu);
    check_adamw(0.0, use_cpu);
    check_adamw(10.0, use_cpu);
  }
}

TEST(Kernels, AdamWMatchesTorchFormulas) { for_each_isa(AdamWMatchesTorchFormulas_body); }

TEST(Kernels, AdamWClippingChangesTheUpdate) {
  // Guards against a clip coefficient that is computed but never applied.
  const size_t n = 1000;
  const Floats g = random_floats(n, 7, 1.0f);
  Floats p1(n, 1.0f), p2(n, 1.0f), m1(n, 0.0f), m2(n, 0.0f), v1(n, 0.0f), v2(n, 0.0f);
  Floats g1 = g, g2 = g;
  forge::ParamRef r1{p1.data(), g1.data(), m1.data(), v1.data(), n, true};
  forge::ParamRef r2{p2.data(), g2.data(), m2.data(), v2.data(), n, true};
  forge::OptimizerStep hp{1e-2, 0.9, 0.95, 1e-8, 0.0, 1.0, 2};
  // Adam normalises g, so a clip shows only through eps and the (m, v) history: start from
  // a non-zero history to make the clip visible.
  for (size_t i = 0; i < n; ++i) m1[i] = m2[i] = 0.5f, v1[i] = v2[i] = 0.25f;
  cpu::optimizer_step(&r1, 1, hp);
  hp.max_grad_norm = 0.0;
  cpu::optimizer_step(&r2, 1, hp);
  EXPECT_GT(rel_l2(p1, widen(p2)), 1e-4);
}

// The global gradient norm shares the tensors out among the threads, each tensor's sum in
// torch's order on one thread: the same bits on any team, those of the per-tensor norms taken
// one after the other, and near the float64 norm.
TEST(Kernels, GlobalGradNormIsTheSameOnAnyTeam) {
  const std::vector<size_t> sizes = {37, 70001, 1, 4099, 13, 65536, 3, 100003};
  std::vector<Floats> grads;
  std::vector<forge::ParamRef> refs;
  double sum64 = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    grads.push_back(random_floats(sizes[t], 300 + t, 0.01f * (t + 1)));
    for (float g : grads.back()) sum64 += double(g) * g;
  }
  for (size_t t = 0; t < sizes.size(); ++t)
    refs.push_back({nullptr, grads[t].data(), nullptr, nullptr, sizes[t], false});
  const int count = static_cast<int>(refs.size());
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const float one = forge::kernels::global_grad_norm(refs.data(), count);
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    const float norm = forge::kernels::global_grad_norm(refs.data(), count);
    EXPECT_EQ(std::memcmp(&norm, &one, sizeof(float)), 0) << threads << " threads";
  }
  omp_set_num_threads(saved_threads);
  EXPECT_NEAR(one, std::sqrt(sum64), 1e-5 * std::sqrt(sum64));
}

// --- the profile ---------------------------------------------------------------------

TEST(Kernels, FastProfileIsRegistered) {
  auto fast = forge::make_numerics("fast");
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(fast->name(), "fast");
  // The fused attention keeps one log-sum-exp per (b, h, t) and the transposed keys and
  // values, never a T x T matrix.
  EXPECT_EQ(fast->attention_saved_floats(2, 256, 384, 6), 2u * (6 * 256 + 2 * 384 * 272));
  EXPECT_EQ(fast->classifier_saved_floats(512, 50257, 50304), 512u);
  try {
    forge::make_numerics("fastest");
    FAIL() << "an unknown profile must throw";
  } catch (const forge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fast, torch-cpu, bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
