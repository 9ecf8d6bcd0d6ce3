// The bf16 kernels: fp32->bf16 rounding against an independent round-to-nearest-even
// reference, and the bf16 linear layer against float64 math over the bf16-rounded operands.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "forge/core/error.h"
#include "forge/kernels/bf16_gemm.h"
#include "forge/kernels/cpu/amx.h"
#include "forge/kernels/cpu/amx_gemm.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/elementwise.h"
#include "forge/kernels/gelu.h"
#include "forge/kernels/linear.h"
#include "forge/kernels/swiglu.h"
#include "forge/numerics/numerics.h"
#include "test_util.h"

namespace {

namespace scalar = forge::kernels::scalar;
namespace cpu = forge::kernels::cpu;

using namespace forge_test;  // Floats, random_floats, rel_l2, for_each_isa

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
uint32_t to_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Round to nearest even by value, not by bit tricks: of the two bf16 values that bracket x
// (its truncation and the next one away from zero), take the nearer in exact double
// arithmetic, the one with an even last bit on a tie. NaN must stay NaN.
bool is_nan_bits(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }
uint16_t reference_bits(float x) {
  const uint32_t u = to_bits(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if (std::isnan(x) || std::isinf(x) || (u & 0xffffu) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next magnitude up (may be Inf)
  const double dlo = std::fabs(double(x) - double(scalar::bf16_to_float(lo)));
  // Past the largest finite bf16 the upper neighbour is Inf; IEEE rounding treats it as
  // the value one ulp above (2^128 in magnitude).
  const double hi_val = (hi & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128)
                                                  : std::fabs(double(scalar::bf16_to_float(hi)));
  const double dhi = std::fabs(std::fabs(double(x)) - hi_val);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

void expect_same_bits(uint16_t got, uint16_t want, float x) {
  if (is_nan_bits(want) || std::isnan(x)) {
    EXPECT_TRUE(is_nan_bits(got)) << std::hex << "x bits 0x" << to_bits(x) << " got 0x" << got;
    EXPECT_EQ(got & 0x8000u, to_bits(x) >> 31 << 15) << "NaN sign kept";
  } else {
    EXPECT_EQ(got, want) << std::hex << "x bits 0x" << to_bits(x);
  }
}

TEST(Bf16, RoundingKnownValues) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80u},  // 1.0 exact
      {0x3f808000u, 0x3f80u},  // tie between 1 and 1+2^-7: even (down)
      {0x3f818000u, 0x3f82u},  // tie, odd lower neighbour: up
      {0x3f808001u, 0x3f81u},  // just above the tie: up
      {0x3f807fffu, 0x3f80u},  // just below the tie: down
      {0xbf818000u, 0xbf82u},  // negative tie rounds by magnitude
      {0x80000000u, 0x8000u},  // -0 stays -0
      {0x00008000u, 0x0000u},  // denormal tie to even zero
      {0x00018000u, 0x0002u},  // denormal tie, odd: up
      {0x007fffffu, 0x0080u},  // largest denormal rounds up to the smallest normal
      {0x7f7fffffu, 0x7f80u},  // FLT_MAX is past the largest bf16: Inf
      {0x7f7f7fffu, 0x7f7fu},  // largest bf16 region, below the tie: stays finite
      {0x7f800000u, 0x7f80u},  // +Inf
      {0xff800000u, 0xff80u},  // -Inf
  };
  for (const Case& c : cases) {
    EXPECT_EQ(scalar::bf16_bits(from_bits(c.in)), c.out) << std::hex << "in 0x" << c.in;
    EXPECT_EQ(reference_bits(from_bits(c.in)), c.out) << std::hex << "reference, in 0x" << c.in;
  }
  // NaNs whose payload lies only in the low 16 bits must not turn into Inf.
  for (uint32_t nan : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f80ffffu, 0xffffffffu}) {
    const uint16_t b = scalar::bf16_bits(from_bits(nan));
    EXPECT_TRUE(is_nan_bits(b)) << std::hex << "in 0x" << nan << " out 0x" << b;
    EXPECT_EQ(b >> 15, nan >> 31);
  }
}

// Every high half with a set of low halves (zero, ties, just off ties, extremes, random):
// all exponents, signs, denormals, NaNs and Infs, through every path of the rounding.
Floats rounding_inputs() {
  std::mt19937 rng(7);
  Floats v;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu,
                        static_cast<uint32_t>(rng() & 0xffffu)})
      v.push_back(from_bits(hi << 16 | lo));
  return v;
}

TEST(Bf16, RoundingMatchesReferenceOnAllExponents) {
  const Floats in = rounding_inputs();
  for (size_t i = 0; i < in.size(); ++i) {
    expect_same_bits(scalar::bf16_bits(in[i]), reference_bits(in[i]), in[i]);
    if (HasFailure()) return;  // one diagnosis, not half a million
  }
  for_each_isa([&] {
    // Awkward lengths: vector tails, and large enough for the threaded split.
    for (size_t n : {size_t{1}, size_t{7}, size_t{15}, size_t{17}, size_t{4099}, in.size()}) {
      SCOPED_TRACE(testing::Message() << "n=" << n);
      Floats rounded(n + 1, -3.0f);
      std::vector<uint16_t> bits(n + 1, 0x1234u);
      cpu::round_bf16(rounded.data(), in.data(), n);
      cpu::to_bf16(bits.data(), in.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = scalar::bf16_bits(in[i]);
        expect_same_bits(bits[i], want, in[i]);
        const uint32_t r = to_bits(rounded[i]);
        EXPECT_EQ(r & 0xffffu, 0u);
        expect_same_bits(static_cast<uint16_t>(r >> 16), want, in[i]);
        if (HasFailure()) return;
      }
      EXPECT_EQ(rounded[n], -3.0f) << "wrote past the end";
      EXPECT_EQ(bits[n], 0x1234u) << "wrote past the end";
    }
    // In place.
    Floats inplace(in.begin(), in.begin() + 4099);
    cpu::round_bf16(inplace.data(), inplace.data(), inplace.size());
    for (size_t i = 0; i < inplace.size(); ++i)
      expect_same_bits(static_cast<uint16_t>(to_bits(inplace[i]) >> 16), scalar::bf16_bits(in[i]),
                       in[i]);
  });
}

// --- linear ---------------------------------------------------------------------------

// The products are exact, so only fp32 accumulation separates the kernel from float64: the
// same few-ulp bound as the fp32 kernels' tests.
constexpr double kTol = 2e-6;
// bf16 keeps 8 significant bits: rounding moves a random dot product by ~2^-9 relative.
// Above this, the result provably used rounded operands, not the fp32 inputs.
constexpr double kRoundingVisible = 3e-4;

void check_bf16_linear(int N, int IC, int OC, bool with_bias, bool with_dinp) {
  SCOPED_TRACE(testing::Message() << "N=" << N << " IC=" << IC << " OC=" << OC
                                  << " bias=" << with_bias << " dinp=" << with_dinp);
  const Floats x = random_floats(size_t(N) * IC, 40), w = random_floats(size_t(OC) * IC, 41),
               b = random_floats(OC, 42), dout = random_floats(size_t(N) * OC, 43);
  Floats out(size_t(N) * OC), dx(size_t(N) * IC, 5.0f), dw(size_t(OC) * IC, 5.0f), db(OC, 5.0f);
  Floats scratch(cpu::bf16_linear_scratch_floats(N, IC, OC), 0.0f);
  Floats saved(cpu::bf16_linear_saved_floats(N, IC, OC), 0.0f);
  const float* bias = with_bias ? b.data() : nullptr;
  cpu::bf16_linear_forward(out.data(), saved.data(), x.data(), w.data(), bias, N, IC, OC,
                           scratch.data());
  cpu::bf16_linear_backward(with_dinp ? dx.data() : nullptr, dw.data(),
                            with_bias ? db.data() : nullptr, dout.data(), x.data(), w.data(),
                            saved.data(), N, IC, OC, scratch.data());

  // Without saved state (inference's forward, a backward converting its own operands): the
  // same operands, so the same bits. Backward is then fed an inp the saved copy no longer
  // matches, to show that with saved state it reads the copy and not inp.
  {
    Floats out2(out.size()), dx2(dx.size(), 5.0f), dw2(dw.size()), db2(db.size(), 5.0f);
    cpu::bf16_linear_forward(out2.data(), nullptr, x.data(), w.data(), bias, N, IC, OC,
                             scratch.data());
    cpu::bf16_linear_backward(with_dinp ? dx2.data() : nullptr, dw2.data(),
                              with_bias ? db2.data() : nullptr, dout.data(), x.data(), w.data(),
                              nullptr, N, IC, OC, scratch.data());
    EXPECT_EQ(out2, out);
    EXPECT_EQ(dx2, dx);
    EXPECT_EQ(dw2, dw);
    EXPECT_EQ(db2, db);
    const Floats zeros_x(x.size(), 0.0f);
    cpu::bf16_linear_backward(with_dinp ? dx2.data() : nullptr, dw2.data(),
                              with_bias ? db2.data() : nullptr, dout.data(), zeros_x.data(),
                              w.data(), saved.data(), N, IC, OC, scratch.data());
    EXPECT_EQ(dx2, dx);
    EXPECT_EQ(dw2, dw);
  }
  // With the weight's operand kept from forward: the same bits. Backward, fed a zeroed weight,
  // still gives forward's dinp: it reads the kept operand, not the weight.
  {
    Floats operand(cpu::bf16_operand_floats(size_t(OC) * IC)), saved3(saved.size());
    Floats out3(out.size()), dx3(dx.size(), 5.0f), dw3(dw.size()), db3(db.size(), 5.0f);
    const Floats zeros_w(w.size(), 0.0f);
    cpu::bf16_linear_forward(out3.data(), saved3.data(), x.data(), w.data(), bias, N, IC, OC,
                             scratch.data(), false, operand.data());
    cpu::bf16_linear_backward(
        with_dinp ? dx3.data() : nullptr, dw3.data(), with_bias ? db3.data() : nullptr, dout.data(),
        x.data(), zeros_w.data(), saved3.data(), N, IC, OC, scratch.data(), operand.data());
    EXPECT_EQ(out3, out);
    EXPECT_EQ(dx3, dx);
    EXPECT_EQ(dw3, dw);
    EXPECT_EQ(db3, db);
  }
  // The bias gradient, fused into the conversion of dout, sums in bias_gradient's order.
  if (with_bias) {
    Floats want_db(OC);
    cpu::bias_gradient(want_db.data(), dout.data(), N, OC);
    EXPECT_EQ(db, want_db);
  }
  Doubles out64(size_t(N) * OC), dx64(size_t(N) * IC), dw64(size_t(OC) * IC), db64(OC);
  scalar::bf16_linear_forward(out64.data(), x.data(), w.data(), bias, N, IC, OC);
  scalar::bf16_linear_backward(dx64.data(), dw64.data(), db64.data(), dout.data(), x.data(),
                               w.data(), N, IC, OC);
  EXPECT_LT(rel_l2(out, out64), kTol);
  EXPECT_LT(rel_l2(dw, dw64), kTol);
  if (with_dinp)
    EXPECT_LT(rel_l2(dx, dx64), kTol);
  else
    EXPECT_EQ(dx, Floats(size_t(N) * IC, 5.0f));  // null dinp: nothing written
  if (with_bias)
    EXPECT_LT(rel_l2(db, db64), kTol);
  else
    EXPECT_EQ(db, Floats(OC, 5.0f));

  // The float64 reference on unrounded operands must be visibly different from the bf16
  // result: otherwise this test would pass for a kernel that never rounds.
  Doubles plain(size_t(N) * OC);
  const Doubles x64(x.begin(), x.end()), w64(w.begin(), w.end()), b64(b.begin(), b.end());
  forge::kernels::scalar::linear_forward(plain.data(), x64.data(), w64.data(),
                                         with_bias ? b64.data() : nullptr, N, IC, OC);
  EXPECT_GT(rel_l2(out, plain), kRoundingVisible);
}

TEST(Bf16, LinearMatchesFloat64OnRoundedOperands) {
  check_bf16_linear(7 * 13, 37, 111, true, true);
  check_bf16_linear(7 * 13, 37, 61, false, true);
  check_bf16_linear(53, 101, 37, true, false);
  check_bf16_linear(1, 3, 1, true, true);
  // Large enough for the threaded rounding and the GEMM's blocked paths (K > 256).
  check_bf16_linear(300, 257, 129, true, true);
  // Whole AMX tiles: on AMX the forward runs on forge's kernel (cpu/amx_gemm.h).
  check_bf16_linear(64, 96, 160, true, true);
  check_bf16_linear(96, 32, 64, false, false);
}

// Sibling layers in place (bf16_linear_forward_parts / backward_parts): each layer's output
// and output gradient in its own buffer give the bits of the stacked layer followed by
// split_columns, and of join_columns followed by the stacked backward, since the AMX kernel
// sums each element the same way wherever it writes it. Widths that are not whole tiles, or
// more parts than the kernel takes, are refused.
TEST(AmxGemm, SiblingPartsMatchTheStackedLayerBitForBit) {
  for (int threads : {1, 3}) {
    if (!cpu::amx_linear_available()) GTEST_SKIP() << "forge's AMX kernels do not run here";
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(threads);
    const int N = 96, IC = 64;
    const std::vector<int> widths = {64, 32, 96};
    const int OC = 192;
    EXPECT_TRUE(cpu::bf16_linear_parts_run(N, IC, widths));
    EXPECT_FALSE(cpu::bf16_linear_parts_run(N, IC, std::vector<int>{64, 48}));
    EXPECT_FALSE(cpu::bf16_linear_parts_run(N, IC, std::vector<int>{32, 32, 32, 32, 32}));
    EXPECT_FALSE(cpu::bf16_linear_parts_run(N + 16, IC, widths));
    const Floats x = random_floats(size_t(N) * IC, 60), w = random_floats(size_t(OC) * IC, 61),
                 dout = random_floats(size_t(N) * OC, 62);
    Floats scratch(cpu::bf16_linear_scratch_floats(N, IC, OC), 0.0f);
    Floats saved(cpu::bf16_linear_saved_floats(N, IC, OC), 0.0f);
    // The stacked layer, split and joined as numerics/stacked_linear.h does without parts.
    Floats out(size_t(N) * OC), dx(size_t(N) * IC), dw(size_t(OC) * IC);
    cpu::bf16_linear_forward(out.data(), saved.data(), x.data(), w.data(), nullptr, N, IC, OC,
                             scratch.data());
    cpu::bf16_linear_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(),
                              saved.data(), N, IC, OC, scratch.data());
    std::vector<Floats> outs, douts;
    for (int width : widths) {
      outs.emplace_back(size_t(N) * width, std::numeric_limits<float>::quiet_NaN());
      douts.emplace_back(size_t(N) * width);
    }
    std::vector<float*> out_parts, dout_parts;
    for (size_t i = 0; i < widths.size(); ++i)
      out_parts.push_back(outs[i].data()), dout_parts.push_back(douts[i].data());
    cpu::split_columns(dout_parts.data(), widths.data(), 3, dout.data(), N);
    // In place: fresh saved state and scratch, NaN where they are read before being written.
    Floats scratch2(scratch.size(), std::numeric_limits<float>::quiet_NaN());
    Floats saved2(saved.size(), std::numeric_limits<float>::quiet_NaN());
    Floats dx2(dx.size(), 7.0f), dw2(dw.size(), 7.0f);
    cpu::bf16_linear_forward_parts(out_parts, widths, saved2.data(), x.data(), w.data(), N, IC,
                                   scratch2.data());
    const std::vector<const float*> dout_in(dout_parts.begin(), dout_parts.end());
    cpu::bf16_linear_backward_parts(dx2.data(), dw2.data(), dout_in, widths, x.data(), w.data(),
                                    saved2.data(), N, IC, scratch2.data());
    omp_set_num_threads(saved_threads);
    Floats joined(out.size());
    cpu::join_columns(joined.data(), out_parts.data(), widths.data(), 3, N);
    EXPECT_EQ(std::memcmp(joined.data(), out.data(), out.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(dx2.data(), dx.data(), dx.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(dw2.data(), dw.data(), dw.size() * sizeof(float)), 0);
  }
}

// c_fc's backward with GELU's backward done as its output gradient is rounded into the tiles
// and summed into the bias gradient: the bits of gelu_backward and then the linear backward,
// with and without a bias and dinp, on teams of 1 and 3 threads. OC = 160 ends in a chunk of
// 32 columns (the sums take 64 at a time).
TEST(AmxGemm, GeluInTheGradientRoundingMatchesTheTwoKernelsBitForBit) {
  if (!cpu::amx_linear_available()) GTEST_SKIP() << "forge's AMX kernels do not run here";
  const int N = 96, IC = 64, OC = 160;
  const size_t NO = size_t(N) * OC;
  // pre spread into GELU's tails, where its gradient is 0 or 1.
  const Floats x = random_floats(size_t(N) * IC, 80), w = random_floats(size_t(OC) * IC, 81, 0.1f),
               pre = random_floats(NO, 82, 3.0f), dact = random_floats(NO, 83);
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 3})
    for (bool with_bias : {false, true})
      for (bool with_dinp : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << threads << " threads, bias " << with_bias << ", dinp " << with_dinp);
        omp_set_num_threads(threads);
        Floats scratch(cpu::bf16_linear_scratch_floats(N, IC, OC),
                       std::numeric_limits<float>::quiet_NaN());
        Floats saved(cpu::bf16_linear_saved_floats(N, IC, OC)),
            operand(cpu::bf16_operand_floats(size_t(OC) * IC)), out(NO);
        cpu::bf16_linear_forward(out.data(), saved.data(), x.data(), w.data(), nullptr, N, IC, OC,
                                 scratch.data(), false, operand.data());
        Floats dout(NO), want_dx(size_t(N) * IC, 7.0f), want_dw(w.size(), 7.0f), want_db(OC, 7.0f);
        cpu::gelu_backward(dout.data(), pre.data(), dact.data(), NO);
        cpu::bf16_linear_backward(with_dinp ? want_dx.data() : nullptr, want_dw.data(),
                                  with_bias ? want_db.data() : nullptr, dout.data(), x.data(),
                                  w.data(), saved.data(), N, IC, OC, scratch.data(),
                                  operand.data());
        Floats dx(want_dx.size(), 7.0f), dw(want_dw.size(), 5.0f), db(OC, 7.0f);
        cpu::bf16_gelu_linear_backward(with_dinp ? dx.data() : nullptr, dw.data(),
                                       with_bias ? db.data() : nullptr, dact.data(), pre.data(),
                                       x.data(), w.data(), saved.data(), N, IC, OC, scratch.data(),
                                       operand.data());
        EXPECT_EQ(std::memcmp(dx.data(), want_dx.data(), dx.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(dw.data(), want_dw.data(), dw.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(db.data(), want_db.data(), db.size() * sizeof(float)), 0);
        if (with_bias) {  // and in bias_gradient's order, from the unrounded gradient
          Floats sums(OC);
          cpu::bias_gradient(sums.data(), dout.data(), N, OC);
          EXPECT_EQ(db, sums);
        }
      }
  omp_set_num_threads(saved_threads);
  EXPECT_THROW(cpu::bf16_gelu_linear_backward(nullptr, nullptr, nullptr, dact.data(), pre.data(),
                                              x.data(), w.data(), nullptr, N, IC, OC - 16, nullptr),
               forge::Error);
}

// The residual's add after a block's last linear layer: the bits of bf16_linear_forward and
// then add, with and without a bias, on shapes of whole tiles (on a CPU with AMX the add runs
// in the product's epilogue; 576 output columns at K = 1024 take two passes over A) and off
// them, on 1 and 3 threads (a team that splits the rows unevenly), into an output that starts
// as NaN. Both bf16 paths (this file also runs with FORGE_BF16_NATIVE=0).
TEST(Bf16, ResidualAddedToTheProductMatchesTheTwoKernelsBitForBit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int seed = 200;
  for (auto [N, IC, OC] :
       {std::tuple{96, 1024, 576}, std::tuple{64, 160, 64}, std::tuple{37, 45, 29}})
    for (bool with_bias : {false, true})
      for (int threads : {1, 3}) {
        SCOPED_TRACE(testing::Message() << "N=" << N << " IC=" << IC << " OC=" << OC
                                        << " bias=" << with_bias << " threads=" << threads);
        const int saved_threads = omp_get_max_threads();
        omp_set_num_threads(threads);
        const Floats x = random_floats(size_t(N) * IC, seed++),
                     w = random_floats(size_t(OC) * IC, seed++), b = random_floats(OC, seed++),
                     residual = random_floats(size_t(N) * OC, seed++, 3.0f);
        const float* bias = with_bias ? b.data() : nullptr;
        Floats scratch(cpu::bf16_linear_scratch_floats(N, IC, OC), 0.0f);
        Floats saved(cpu::bf16_linear_saved_floats(N, IC, OC), 0.0f);
        Floats product(size_t(N) * OC), want(product.size());
        cpu::bf16_linear_forward(product.data(), saved.data(), x.data(), w.data(), bias, N, IC, OC,
                                 scratch.data());
        cpu::add(want.data(), residual.data(), product.data(), want.size());
        Floats out(want.size(), nan), saved2(saved.size(), nan), scratch2(scratch.size(), nan);
        cpu::bf16_linear_residual_forward(out.data(), saved2.data(), x.data(), residual.data(),
                                          w.data(), bias, N, IC, OC, scratch2.data());
        omp_set_num_threads(saved_threads);
        EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0);
        const size_t operand_bytes =
            size_t(N) * IC * (cpu::native_bf16_available() ? sizeof(uint16_t) : sizeof(float));
        EXPECT_EQ(std::memcmp(saved2.data(), saved.data(), operand_bytes), 0);
        EXPECT_GT(rel_l2(out, widen(product)), 0.05);  // not vacuous: the residual is in it
      }
  Floats a(32 * 32, 1.0f);
  Floats scratch(cpu::bf16_linear_scratch_floats(32, 32, 32));
  EXPECT_THROW(cpu::bf16_linear_residual_forward(a.data(), nullptr, a.data(), a.data(), a.data(),
                                                 nullptr, 32, 32, 32, scratch.data()),
               forge::Error);  // the residual is the output
  EXPECT_THROW(cpu::bf16_linear_residual_forward(a.data(), nullptr, a.data(), nullptr, a.data(),
                                                 nullptr, 32, 32, 32, scratch.data()),
               forge::Error);  // no residual
}

// The down projection with SwiGLU rounded straight into its input operand: out and the saved
// operand carry the bits of swiglu_forward and then the linear forward, and backward from that
// saved state never reads the (unwritten) fp32 input. Shapes on the AMX kernel and off it
// (oneDNN), with N F past one 4096-value block and not a multiple of 16 (a scalar tail); and
// with the residual stream's update added, the bits of add after it.
TEST(Bf16, NativeSwigluIntoTheDownProjectionMatchesTheTwoKernelsBitForBit) {
  if (!cpu::native_bf16_available()) GTEST_SKIP() << "no bf16 dot products on this CPU";
  int seed = 90;
  for (auto [N, F, OC] :
       {std::tuple{96, 160, 64}, std::tuple{37, 45, 29}, std::tuple{64, 32, 96}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " F=" << F << " OC=" << OC);
    const size_t NF = size_t(N) * F;
    const Floats gate = random_floats(NF, seed++, 4.0f), up = random_floats(NF, seed++),
                 w = random_floats(size_t(OC) * F, seed++),
                 dout = random_floats(size_t(N) * OC, seed++);
    Floats scratch(cpu::bf16_linear_scratch_floats(N, F, OC), 0.0f);
    Floats act(NF), out(size_t(N) * OC), saved(cpu::bf16_linear_saved_floats(N, F, OC), 0.0f);
    cpu::swiglu_forward(act.data(), gate.data(), up.data(), NF);
    cpu::bf16_linear_forward(out.data(), saved.data(), act.data(), w.data(), nullptr, N, F, OC,
                             scratch.data());
    Floats out2(out.size(), 5.0f), saved2(saved.size(), 5.0f);
    cpu::bf16_swiglu_linear_forward(out2.data(), saved2.data(), gate.data(), up.data(), w.data(), N,
                                    F, OC, scratch.data());
    EXPECT_EQ(std::memcmp(out2.data(), out.data(), out.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(saved2.data(), saved.data(), NF * sizeof(uint16_t)), 0);  // its N F bf16
    // Backward from the fused forward's saved state, its fp32 input all NaN: the same bits.
    Floats dx(act.size()), dw(w.size()), dx2(act.size()), dw2(w.size());
    const Floats nan_input(NF, std::numeric_limits<float>::quiet_NaN());
    cpu::bf16_linear_backward(dx.data(), dw.data(), nullptr, dout.data(), act.data(), w.data(),
                              saved.data(), N, F, OC, scratch.data());
    cpu::bf16_linear_backward(dx2.data(), dw2.data(), nullptr, dout.data(), nan_input.data(),
                              w.data(), saved2.data(), N, F, OC, scratch.data());
    EXPECT_EQ(std::memcmp(dx2.data(), dx.data(), dx.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(dw2.data(), dw.data(), dw.size() * sizeof(float)), 0);
    // With the residual stream's update: out + residual, as add gives it.
    const Floats residual = random_floats(out.size(), seed++, 3.0f);
    Floats want(out.size()), out3(out.size(), 5.0f), saved3(saved.size(), 5.0f);
    cpu::add(want.data(), residual.data(), out.data(), want.size());
    cpu::bf16_swiglu_linear_forward(out3.data(), saved3.data(), gate.data(), up.data(), w.data(), N,
                                    F, OC, scratch.data(), nullptr, residual.data());
    EXPECT_EQ(std::memcmp(out3.data(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(saved3.data(), saved.data(), NF * sizeof(uint16_t)), 0);
  }
  EXPECT_THROW(cpu::bf16_swiglu_linear_forward(nullptr, nullptr, nullptr, nullptr, nullptr, 32, 32,
                                               32, nullptr),
               forge::Error);
}

// gate | up's backward with SwiGLU's backward done as the output gradients are rounded into
// the tiles: the bits of swiglu_backward and then the parts backward, on teams of 1 and 3
// threads (rows split unevenly), with the weight's operand kept from forward and without.
// F = 288 is not a multiple of the 256-column runs the fused conversion takes at a time.
TEST(AmxGemm, SwigluInTheGradientRoundingMatchesTheTwoKernelsBitForBit) {
  if (!cpu::amx_linear_available()) GTEST_SKIP() << "forge's AMX kernels do not run here";
  const int N = 160, IC = 96, F = 288, OC = 2 * F;
  const std::vector<int> widths = {F, F};
  const size_t NF = size_t(N) * F;
  // gate spread wide enough that the sigmoid saturates at both ends.
  const Floats x = random_floats(size_t(N) * IC, 70), w = random_floats(size_t(OC) * IC, 71, 0.1f),
               gate = random_floats(NF, 72, 4.0f), up = random_floats(NF, 73),
               dact = random_floats(NF, 74);
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 3})
    for (bool kept : {false, true}) {
      SCOPED_TRACE(testing::Message() << threads << " threads, weight operand "
                                      << (kept ? "kept" : "converted in backward"));
      omp_set_num_threads(threads);
      Floats scratch(cpu::bf16_linear_scratch_floats(N, IC, OC),
                     std::numeric_limits<float>::quiet_NaN());
      Floats saved(cpu::bf16_linear_saved_floats(N, IC, OC)),
          operand(cpu::bf16_operand_floats(size_t(OC) * IC));
      float* weight_operand = kept ? operand.data() : nullptr;
      Floats out_gate(NF), out_up(NF);
      const std::vector<float*> outs = {out_gate.data(), out_up.data()};
      cpu::bf16_linear_forward_parts(outs, widths, saved.data(), x.data(), w.data(), N, IC,
                                     scratch.data(), weight_operand);
      // Apart: dgate and dup in fp32, then the parts backward.
      Floats dgate(NF), dup(NF), want_dx(size_t(N) * IC, 7.0f), want_dw(size_t(OC) * IC, 7.0f);
      cpu::swiglu_backward(dgate.data(), dup.data(), dact.data(), gate.data(), up.data(), NF);
      const std::vector<const float*> douts = {dgate.data(), dup.data()};
      cpu::bf16_linear_backward_parts(want_dx.data(), want_dw.data(), douts, widths, x.data(),
                                      w.data(), saved.data(), N, IC, scratch.data(),
                                      weight_operand);
      Floats dx(want_dx.size(), 5.0f), dw(want_dw.size(), 5.0f);
      cpu::bf16_swiglu_linear_backward(dx.data(), dw.data(), dact.data(), gate.data(), up.data(), F,
                                       x.data(), w.data(), saved.data(), N, IC, scratch.data(),
                                       weight_operand);
      EXPECT_EQ(std::memcmp(dx.data(), want_dx.data(), dx.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(dw.data(), want_dw.data(), dw.size() * sizeof(float)), 0);
      // Not vacuous: SwiGLU's gradient reached both parts of dw.
      EXPECT_NE(dw[0], 0.0f);
      EXPECT_NE(dw[size_t(F) * IC], 0.0f);
    }
  omp_set_num_threads(saved_threads);
  EXPECT_THROW(
      cpu::bf16_swiglu_linear_backward(nullptr, nullptr, dact.data(), gate.data(), up.data(), 48,
                                       x.data(), w.data(), nullptr, N, IC, nullptr),
      forge::Error);
}

// c_fc with GELU in the AMX product's epilogue: the same bits as the linear kernel and then
// GELU's own. K is wide enough that the product takes its columns in two passes (the epilogue
// runs once per block of rows and pass), and the team has an odd size.
TEST(AmxGemm, GeluInTheEpilogueMatchesTheTwoKernelsBitForBit) {
  if (!cpu::amx_linear_available()) GTEST_SKIP() << "forge's AMX kernels do not run here";
  const int N = 96, C = 1024, H = 576;  // c_fc: C -> H; 512 columns per pass at K = 1024
  ASSERT_TRUE(cpu::amx_linear_forward_runs(N, H, C));
  for (int threads : {1, 3}) {
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(threads);
    // Inputs of a few units so that GELU sees its curved middle and both tails.
    Floats x = random_floats(size_t(N) * C, 70), w = random_floats(size_t(H) * C, 71),
           b = random_floats(H, 72);
    for (float& v : x) v *= 4.0f;
    Floats scratch(cpu::bf16_linear_scratch_floats(N, C, H), 0.0f);
    Floats saved(cpu::bf16_linear_saved_floats(N, C, H));
    Floats pre(size_t(N) * H), act(pre.size());
    cpu::bf16_linear_forward(pre.data(), saved.data(), x.data(), w.data(), b.data(), N, C, H,
                             scratch.data());
    cpu::gelu_forward(act.data(), pre.data(), act.size());
    // Fused, into buffers and scratch that start as NaN.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Floats scratch2(scratch.size(), nan), saved2(saved.size(), nan);
    Floats pre2(pre.size(), nan), act2(pre.size(), nan);
    cpu::bf16_linear_gelu_forward(pre2.data(), act2.data(), saved2.data(), x.data(), w.data(),
                                  b.data(), N, C, H, scratch2.data());
    omp_set_num_threads(saved_threads);
    EXPECT_EQ(std::memcmp(pre2.data(), pre.data(), pre.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(act2.data(), act.data(), act.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(saved2.data(), saved.data(), saved.size() * sizeof(float)), 0);
    // And near the float64 reference: the bf16 layer's math, then GELU's.
    Doubles pre_ref(pre.size()), act_ref(pre.size());
    scalar::bf16_linear_forward(pre_ref.data(), x.data(), w.data(), b.data(), N, C, H);
    scalar::gelu_forward(act_ref.data(), pre_ref.data(), act_ref.size());
    EXPECT_LT(rel_l2(act2, act_ref), 1e-5);
    // Not vacuous: GELU changed the values.
    EXPECT_GT(rel_l2(act, widen(pre)), 0.1);
  }
}

// The fused op refuses shapes off the AMX kernel rather than run without its epilogue.
TEST(AmxGemm, GeluEpilogueRefusesShapesOffTheKernel) {
  if (!cpu::amx_linear_available()) GTEST_SKIP() << "forge's AMX kernels do not run here";
  const int N = 40, C = 64, H = 128;  // 40 rows: not whole tiles
  Floats x(size_t(N) * C, 0.5f), w(size_t(H) * C, 0.25f), out(size_t(N) * H), act(out.size());
  Floats scratch(cpu::bf16_linear_scratch_floats(N, C, H));
  EXPECT_THROW(cpu::bf16_linear_gelu_forward(out.data(), act.data(), nullptr, x.data(), w.data(),
                                             nullptr, N, C, H, scratch.data()),
               forge::Error);
}

// forge's AMX products run with the AVX-512 kernel set only: FORGE_CPU_ISA=avx2 or generic
// stands for a CPU without AVX-512, which has no AMX either.
TEST(AmxGemm, RunsWithTheAvx512KernelSetOnly) {
  for_each_isa([&] {
    const bool avx512 = cpu::active_isa() == cpu::Isa::kAvx512;
    EXPECT_EQ(cpu::amx_linear_available(),
              avx512 && cpu::native_bf16_available() && cpu::amx_tiles_available());
    EXPECT_EQ(cpu::amx_linear_forward_runs(64, 64, 64), cpu::amx_linear_available());
    EXPECT_EQ(cpu::amx_linear_backward_runs(64, 96, 32), cpu::amx_linear_available());
    EXPECT_FALSE(cpu::amx_linear_forward_runs(64, 48, 64));
    EXPECT_FALSE(cpu::amx_linear_backward_runs(64, 64, 48));
  });
}

// The AMX product against float64 on the same bf16 operands, for every way the linear layer
// hands it A (rows; columns, as dout^T; already in the tiles' order, or the tiles of A^T) and B
// (from B^T: the weight of x W^T, or from B's rows), with row strides wider than the rows:
// fp32 accumulation's error only, every element of C written and nothing beside it, and the
// same bits on 1, 2 and 3 threads. Shapes: one tile block, several blocks each way (more row
// blocks than threads, and fewer), K long enough for many K steps, and columns wider than one
// pass over A (columns_per_pass).
TEST(AmxGemm, ProductMatchesFloat64OnEveryTeam) {
  if (!cpu::amx_tiles_available()) GTEST_SKIP() << "no usable AMX tiles on this CPU";
  EXPECT_FALSE(cpu::amx_gemm_fits(32, 48, 32));
  EXPECT_FALSE(cpu::amx_gemm_fits(33, 32, 32));
  EXPECT_FALSE(cpu::amx_gemm_fits(32, 32, 0));
  using cpu::AmxLayout;
  const char* const layout_names[] = {"rows", "columns", "tiles", "tiles of A^T"};
  const int saved_threads = omp_get_max_threads();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int seed = 80;
  for (auto [M, N, K] : {std::tuple{32, 32, 32}, std::tuple{96, 64, 160}, std::tuple{32, 160, 64},
                         std::tuple{256, 96, 1536}, std::tuple{64, 1088, 1024}}) {
    for (AmxLayout layout :
         {AmxLayout::kRows, AmxLayout::kColumns, AmxLayout::kTiles, AmxLayout::kTilesOfTranspose})
      for (bool b_transposed : {false, true}) {
        const bool with_bias = layout != AmxLayout::kColumns || b_transposed;
        SCOPED_TRACE(testing::Message()
                     << M << " x " << N << " x " << K << " A "
                     << layout_names[static_cast<int>(layout)] << ", B "
                     << (b_transposed ? "from B^T" : "rows") << (with_bias ? ", bias" : ""));
        ASSERT_TRUE(cpu::amx_gemm_fits(M, N, K));
        // A [M, K] and B [K, N] as float64 references, stored the way the product reads them,
        // with 32 (A) and 16 (B) elements of padding per stored row where it has rows.
        const bool a_columns = layout == AmxLayout::kColumns;
        const int lda = (a_columns ? M : K) + 32, ldb = (b_transposed ? K : N) + 16;
        const Floats a = random_floats(size_t(M) * K, seed++),
                     b = random_floats(size_t(K) * N, seed++), bias = random_floats(N, seed++);
        std::vector<uint16_t> a_stored(size_t(a_columns ? K : M) * lda, 0xFFFF),
            b_stored(size_t(b_transposed ? N : K) * ldb, 0xFFFF);  // padding: bf16 NaN
        std::vector<double> a_rounded(a.size()), b_rounded(b.size());
        for (int m = 0; m < M; ++m)
          for (int k = 0; k < K; ++k) {
            const uint16_t v = scalar::bf16_bits(a[size_t(m) * K + k]);
            a_rounded[size_t(m) * K + k] = scalar::bf16_to_float(v);
            switch (layout) {
              case AmxLayout::kRows:
                a_stored[size_t(m) * lda + k] = v;
                break;
              case AmxLayout::kColumns:
                a_stored[size_t(k) * lda + m] = v;
                break;
              case AmxLayout::kTiles:
                a_stored[cpu::amx_tiles_index(m, k / 32 * 32, K) + k % 32] = v;
                break;
              case AmxLayout::kTilesOfTranspose:
                a_stored[cpu::amx_tiles_index(k, m / 32 * 32, M) + m % 32] = v;
                break;
            }
          }
        for (int k = 0; k < K; ++k)
          for (int n = 0; n < N; ++n) {
            const uint16_t v = scalar::bf16_bits(b[size_t(k) * N + n]);
            b_rounded[size_t(k) * N + n] = scalar::bf16_to_float(v);
            b_stored[b_transposed ? size_t(n) * ldb + k : size_t(k) * ldb + n] = v;
          }
        Floats b_packed(cpu::amx_packed_floats(N, K), nan);
        Floats a_room(cpu::amx_packed_floats(M, K), nan);
        if (b_transposed)
          cpu::amx_pack_b_transposed(b_packed.data(), b_stored.data(), ldb, K, N);
        else
          cpu::amx_pack_b(b_packed.data(), b_stored.data(), ldb, K, N);
        const int ldc = N + 8;
        std::vector<Floats> outs;
        for (int threads = 1; threads <= 3; ++threads) {
          omp_set_num_threads(threads);
          Floats out(size_t(M) * ldc, nan);
          cpu::amx_gemm(
              cpu::amx_c(out.data(), ldc, N),
              {a_stored.data(), lda, layout, layout == AmxLayout::kTiles ? nullptr : a_room.data()},
              b_packed.data(), with_bias ? bias.data() : nullptr, M, N, K);
          outs.push_back(std::move(out));
        }
        omp_set_num_threads(saved_threads);
        double worst = 0.0;
        for (int m = 0; m < M; ++m) {
          for (int n = 0; n < N; ++n) {
            double want = with_bias ? bias[n] : 0.0;
            for (int k = 0; k < K; ++k)
              want += a_rounded[size_t(m) * K + k] * b_rounded[size_t(k) * N + n];
            const float got = outs[0][size_t(m) * ldc + n];
            ASSERT_FALSE(std::isnan(got)) << "C[" << m << ", " << n << "] not written";
            worst = std::max(worst, std::fabs(got - want) / (1.0 + std::fabs(want)));
          }
          for (int n = N; n < ldc; ++n)
            ASSERT_TRUE(std::isnan(outs[0][size_t(m) * ldc + n])) << "wrote beside C's row " << m;
        }
        // K products of unit-scale operands, summed in fp32: errors of a few ulp of the sum.
        EXPECT_LT(worst, 1e-5 * std::sqrt(double(K)));
        for (int t : {1, 2}) {
          ASSERT_EQ(outs[t].size(), outs[0].size());
          EXPECT_EQ(std::memcmp(outs[t].data(), outs[0].data(), outs[0].size() * sizeof(float)), 0)
              << (t + 1) << " threads";
        }
      }
  }
}

// A huge K over a narrow C, where amx_k_chunk splits K (the tied classifier's dout W): the
// bits of the whole-K product, with a bias and an epilogue that reads a residual, for the
// automatic chunk and one that leaves a short last chunk, on 1 and 3 threads; and near
// float64.
TEST(AmxGemm, KInChunksGivesTheWholeSumsBitForBit) {
  if (!cpu::amx_tiles_available()) GTEST_SKIP() << "no usable AMX tiles on this CPU";
  const int M = 96, N = 96, K = 12288;
  for (int threads : {1, 2, 3}) EXPECT_LT(cpu::amx_k_chunk(M, N, K, threads), K);
  EXPECT_EQ(cpu::amx_k_chunk(2048, 2816, 512, 2), 512);  // llama-small's gate | up: whole
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint16_t> a(size_t(M) * K), bt(size_t(N) * K);
  const Floats af = random_floats(a.size(), 97), bf = random_floats(bt.size(), 98),
               bias = random_floats(N, 99), residual = random_floats(size_t(M) * N, 100);
  for (size_t i = 0; i < a.size(); ++i) a[i] = scalar::bf16_bits(af[i]);
  for (size_t i = 0; i < bt.size(); ++i) bt[i] = scalar::bf16_bits(bf[i]);
  Floats b_packed(cpu::amx_packed_floats(N, K)), room(cpu::amx_packed_floats(M, K));
  cpu::amx_pack_b_transposed(b_packed.data(), bt.data(), K, K, N);
  struct AddResidual {
    float* c;
    const float* r;
    static void apply(const void* context, int m0, int m1, int n0, int n1) {
      const auto& e = *static_cast<const AddResidual*>(context);
      for (int m = m0; m < m1; ++m)
        for (int n = n0; n < n1; ++n) e.c[size_t(m) * N + n] += e.r[size_t(m) * N + n];
    }
  };
  const auto product = [&](int k_chunk) {
    Floats c(size_t(M) * N, nan);
    const AddResidual add{c.data(), residual.data()};
    cpu::amx_gemm(cpu::amx_c(c.data(), N, N), {a.data(), K, cpu::AmxLayout::kRows, room.data()},
                  b_packed.data(), bias.data(), M, N, K,
                  {&AddResidual::apply, &add, residual.data(), size_t(N)}, k_chunk);
    return c;
  };
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Floats whole = product(K);
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    for (int k_chunk : {0, 5000 / 32 * 32}) {
      SCOPED_TRACE(testing::Message() << threads << " threads, chunk " << k_chunk);
      const Floats split = product(k_chunk);
      EXPECT_EQ(std::memcmp(split.data(), whole.data(), whole.size() * sizeof(float)), 0);
    }
  }
  omp_set_num_threads(saved_threads);
  double worst = 0.0;
  for (int m = 0; m < M; m += 7)
    for (int n = 0; n < N; ++n) {
      double want = double(bias[n]) + residual[size_t(m) * N + n];
      for (int k = 0; k < K; ++k)
        want += double(scalar::bf16_to_float(a[size_t(m) * K + k])) *
                scalar::bf16_to_float(bt[size_t(n) * K + k]);
      worst = std::max(worst, std::fabs(whole[size_t(m) * N + n] - want) / (1.0 + std::fabs(want)));
    }
  EXPECT_LT(worst, 1e-5 * std::sqrt(double(K)));
  EXPECT_THROW(product(48), forge::Error);  // not a multiple of 32
}

// Paired output parts (gate | up): the kernel walks part 0's columns and part 1's same columns
// together, giving each element the bits of the plain two-part product; the epilogue sees
// every row block once per pass, its columns part 0's, with the same columns of both parts
// final by then. 320-column parts at K = 1024 take two passes of 8 blocks and 2; 1 and 3
// threads.
TEST(AmxGemm, PairedPartsMatchThePlainPartsBitForBit) {
  if (!cpu::amx_tiles_available()) GTEST_SKIP() << "no usable AMX tiles on this CPU";
  const int M = 96, F = 320, K = 1024;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint16_t> a(size_t(M) * K), bt(size_t(2 * F) * K);
  const Floats af = random_floats(a.size(), 95), bf = random_floats(bt.size(), 96);
  for (size_t i = 0; i < a.size(); ++i) a[i] = scalar::bf16_bits(af[i]);
  for (size_t i = 0; i < bt.size(); ++i) bt[i] = scalar::bf16_bits(bf[i]);
  Floats b_packed(cpu::amx_packed_floats(2 * F, K)), room(cpu::amx_packed_floats(M, K));
  cpu::amx_pack_b_transposed(b_packed.data(), bt.data(), K, K, 2 * F);
  // The epilogue checks that both parts' columns are final and counts the cells it is given.
  // (Each thread its own rows: count's cells are never shared; not_final only ever set.)
  struct Seen {
    const Floats *p0, *p1;
    std::vector<int> count;
    int F;
    std::atomic<bool> not_final{false};
    static void apply(const void* context, int m0, int m1, int n0, int n1) {
      auto& s = *const_cast<Seen*>(static_cast<const Seen*>(context));
      for (int m = m0; m < m1; ++m)
        for (int n = n0; n < n1; ++n) {
          if (std::isnan((*s.p0)[size_t(m) * s.F + n]) || std::isnan((*s.p1)[size_t(m) * s.F + n]))
            s.not_final = true;
          ++s.count[size_t(m) * s.F + n];
        }
    }
  };
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 3}) {
    SCOPED_TRACE(testing::Message() << threads << " threads");
    omp_set_num_threads(threads);
    std::vector<Floats> plain(2, Floats(size_t(M) * F, nan)), paired = plain;
    for (bool is_paired : {false, true}) {
      std::vector<Floats>& out = is_paired ? paired : plain;
      cpu::AmxC c;
      c.count = 2, c.paired = is_paired;
      for (int i = 0; i < 2; ++i) c.out[i] = out[i].data(), c.width[i] = c.ld[i] = F;
      Seen seen{&out[0], &out[1], std::vector<int>(size_t(M) * F, 0), F};
      const cpu::AmxEpilogue watch{&Seen::apply, &seen};  // its columns: the paired kind's
      cpu::amx_gemm(c, {a.data(), K, cpu::AmxLayout::kRows, room.data()}, b_packed.data(), nullptr,
                    M, 2 * F, K, is_paired ? watch : cpu::AmxEpilogue{});
      if (is_paired) {
        EXPECT_FALSE(seen.not_final);
        EXPECT_TRUE(
            std::all_of(seen.count.begin(), seen.count.end(), [](int n) { return n == 1; }));
      }
    }
    for (int i = 0; i < 2; ++i)
      EXPECT_EQ(std::memcmp(paired[i].data(), plain[i].data(), plain[i].size() * sizeof(float)), 0)
          << "part " << i;
  }
  omp_set_num_threads(saved_threads);
  cpu::AmxC uneven;
  Floats o(size_t(M) * 64);
  uneven.count = 2, uneven.paired = true;
  uneven.out[0] = uneven.out[1] = o.data();
  uneven.width[0] = uneven.ld[0] = uneven.ld[1] = 64, uneven.width[1] = 32;
  EXPECT_THROW(cpu::amx_gemm(uneven, {a.data(), K, cpu::AmxLayout::kRows, room.data()},
                             b_packed.data(), nullptr, M, 96, K),
               forge::Error);
}

// Llama's MLP forward with SwiGLU in gate | up's product (bf16_swiglu_mlp_forward): gate, up,
// out and both saved states carry the bits of the stacked layer's parts and then the fused
// SwiGLU + down projection + residual, on shapes of one pass and of two (C = 1024), on 1 and 3
// threads, into buffers that start as NaN.
TEST(AmxGemm, SwigluInTheGateUpEpilogueMatchesTheOpsApartBitForBit) {
  if (!cpu::amx_linear_available()) GTEST_SKIP() << "forge's AMX kernels do not run here";
  EXPECT_FALSE(cpu::bf16_swiglu_mlp_forward_runs(96, 64, 48));  // F not whole tiles
  EXPECT_FALSE(cpu::bf16_swiglu_mlp_forward_runs(40, 64, 64));  // rows not whole tiles
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int seed = 700;
  for (auto [N, C, F] : {std::tuple{96, 64, 160}, std::tuple{64, 1024, 320}})
    for (int threads : {1, 3}) {
      SCOPED_TRACE(testing::Message()
                   << "N=" << N << " C=" << C << " F=" << F << ", " << threads << " threads");
      ASSERT_TRUE(cpu::bf16_swiglu_mlp_forward_runs(N, C, F));
      const int saved_threads = omp_get_max_threads();
      omp_set_num_threads(threads);
      const Floats x = random_floats(size_t(N) * C, seed++),
                   w_gu = random_floats(size_t(2 * F) * C, seed++),
                   w_down = random_floats(size_t(C) * F, seed++),
                   residual = random_floats(size_t(N) * C, seed++);
      const size_t scratch_floats = std::max(cpu::bf16_linear_scratch_floats(N, C, 2 * F),
                                             cpu::bf16_linear_scratch_floats(N, F, C));
      const size_t NF = size_t(N) * F;
      // Apart: the stacked layer's parts, then SwiGLU into the down projection with the add.
      Floats scratch(scratch_floats, 0.0f), gu_saved(cpu::bf16_linear_saved_floats(N, C, 2 * F)),
          down_saved(cpu::bf16_linear_saved_floats(N, F, C)), gate(NF), up(NF), out(size_t(N) * C);
      const int widths[] = {F, F};
      float* parts[] = {gate.data(), up.data()};
      cpu::bf16_linear_forward_parts(parts, widths, gu_saved.data(), x.data(), w_gu.data(), N, C,
                                     scratch.data());
      cpu::bf16_swiglu_linear_forward(out.data(), down_saved.data(), gate.data(), up.data(),
                                      w_down.data(), N, F, C, scratch.data(), nullptr,
                                      residual.data());
      // Fused.
      Floats scratch2(scratch_floats, nan), gu_saved2(gu_saved.size(), nan),
          down_saved2(down_saved.size(), nan), gate2(NF, nan), up2(NF, nan), out2(out.size(), nan);
      cpu::bf16_swiglu_mlp_forward(out2.data(), gate2.data(), up2.data(), gu_saved2.data(),
                                   down_saved2.data(), x.data(), w_gu.data(), w_down.data(),
                                   residual.data(), N, C, F, scratch2.data());
      omp_set_num_threads(saved_threads);
      EXPECT_EQ(std::memcmp(gate2.data(), gate.data(), NF * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(up2.data(), up.data(), NF * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(out2.data(), out.data(), out.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(gu_saved2.data(), gu_saved.data(), size_t(N) * C * sizeof(uint16_t)),
                0);
      EXPECT_EQ(std::memcmp(down_saved2.data(), down_saved.data(), NF * sizeof(uint16_t)), 0);
    }
  Floats a(32 * 64, 1.0f), scratch(cpu::bf16_linear_scratch_floats(32, 32, 64));
  EXPECT_THROW(
      cpu::bf16_swiglu_mlp_forward(a.data(), a.data(), a.data(), a.data(), nullptr, a.data(),
                                   a.data(), a.data(), a.data(), 32, 32, 32, scratch.data()),
      forge::Error);  // no saved state for the down projection
}

// dout's operand in the AMX tiles' order (bf16_gradient_tiles): every element where
// amx_tiles_index puts it, with the bits of bf16_gradient_rows' g, and the same bias gradient,
// on any team.
TEST(AmxGemm, GradientTilesHoldTheRowsOperandBitForBit) {
  const int saved_threads = omp_get_max_threads();
  for (auto [N, OC] : {std::pair{32, 32}, std::pair{96, 160}, std::pair{64, 1088}})
    for (bool with_bias : {false, true})
      for (int threads : {1, 3}) {
        SCOPED_TRACE(testing::Message()
                     << N << " x " << OC << (with_bias ? " bias " : " ") << threads << " threads");
        omp_set_num_threads(threads);
        const Floats dout = random_floats(size_t(N) * OC, 70);
        std::vector<uint16_t> rows(dout.size()), tiles(dout.size(), 0xFFFF);
        Floats db_rows(OC, 5.0f), db_tiles(OC, 5.0f);
        cpu::bf16_gradient_rows(rows.data(), with_bias ? db_rows.data() : nullptr, dout.data(), N,
                                OC);
        cpu::bf16_gradient_tiles(tiles.data(), with_bias ? db_tiles.data() : nullptr, dout.data(),
                                 N, OC);
        for (int n = 0; n < N; ++n)
          for (int o = 0; o < OC; ++o)
            ASSERT_EQ(tiles[cpu::amx_tiles_index(n, o / 32 * 32, OC) + o % 32],
                      rows[size_t(n) * OC + o])
                << "(" << n << ", " << o << ")";
        EXPECT_EQ(db_tiles, db_rows);
      }
  omp_set_num_threads(saved_threads);
  EXPECT_THROW(cpu::bf16_gradient_tiles(nullptr, nullptr, nullptr, 48, 32), forge::Error);
}

// A GPT-2-like step of 2 x 5 tokens, C = 12, 3 heads, for the profile tests.
forge::StepShape small_shape() {
  forge::StepShape s;
  s.B = 2, s.T = 5, s.C = 12, s.NH = 3, s.V = 30, s.Vp = 32, s.L = 1;
  s.n_kv_head = 3, s.head_dim = 4, s.ffn = 48;
  return s;
}

TEST(Bf16, ProfileUsesBf16LinearAndFailsOnUnplannedShapes) {
  auto nx = forge::make_numerics("bf16");
  EXPECT_EQ(nx->name(), "bf16");
  const forge::StepShape s = small_shape();
  nx->plan(s);
  const int N = s.B * s.T;
  // The classifier, the widest shape: through the profile it must equal the kernel.
  for (auto [IC, OC] : {std::pair{s.C, s.Vp}, std::pair{s.ffn, s.C}, std::pair{s.C, 3 * s.C}}) {
    const Floats x = random_floats(size_t(N) * IC, 50), w = random_floats(size_t(OC) * IC, 51);
    Floats got(size_t(N) * OC), want(size_t(N) * OC);
    Floats scratch(cpu::bf16_linear_scratch_floats(N, IC, OC));
    EXPECT_EQ(nx->linear_saved_floats(N, IC, OC), cpu::bf16_linear_saved_floats(N, IC, OC));
    nx->linear_forward(got.data(), nullptr, x.data(), w.data(), nullptr, N, IC, OC);
    cpu::bf16_linear_forward(want.data(), nullptr, x.data(), w.data(), nullptr, N, IC, OC,
                             scratch.data());
    EXPECT_EQ(got, want) << "IC=" << IC << " OC=" << OC;
  }
  // Two layers reading one input through one saved buffer (Llama's q, k, v): the second
  // converts nothing, and both backwards read the shared copy.
  {
    const int IC = s.C, OC1 = 3 * s.C, OC2 = s.C;
    const Floats x = random_floats(size_t(N) * IC, 52), w1 = random_floats(size_t(OC1) * IC, 53),
                 w2 = random_floats(size_t(OC2) * IC, 54);
    Floats saved(nx->linear_saved_floats(N, IC, OC1)), out1(size_t(N) * OC1), out2(size_t(N) * OC2),
        want2(size_t(N) * OC2);
    nx->linear_forward(out1.data(), saved.data(), x.data(), w1.data(), nullptr, N, IC, OC1);
    const Floats after_first = saved;
    nx->linear_forward_same_input(out2.data(), saved.data(), x.data(), w2.data(), nullptr, N, IC,
                                  OC2);
    EXPECT_EQ(saved, after_first);
    nx->linear_forward(want2.data(), nullptr, x.data(), w2.data(), nullptr, N, IC, OC2);
    EXPECT_EQ(out2, want2);
    // Had it converted again it would not matter; that it reads the copy shows in a garbage
    // inp giving the same output.
    const Floats garbage(x.size(), 7.0f);
    nx->linear_forward_same_input(out2.data(), saved.data(), garbage.data(), w2.data(), nullptr, N,
                                  IC, OC2);
    EXPECT_EQ(out2, want2);
  }
  // A shape plan() did not reserve for is an error, not an allocation inside a step.
  const int big = 4 * s.Vp;
  Floats x(size_t(N) * s.ffn), w(size_t(big) * s.ffn), out(size_t(N) * big);
  EXPECT_THROW(nx->linear_forward(out.data(), nullptr, x.data(), w.data(), nullptr, N, s.ffn, big),
               forge::Error);
}

// With bf16 dot products the profile keeps each planned weight's operand from forward for
// backward: a weight changed after forward shows that backward read the kept operand, not the
// weight. Planned for one weight, a second is an error (the scratch has no room for its
// operand), and so is a backward of a weight that had no forward. Without them it keeps none.
TEST(Bf16, ProfileKeepsPlannedWeightOperandsFromForwardToBackward) {
  auto nx = forge::make_numerics("bf16");
  forge::StepShape s = small_shape();
  const int N = s.B * s.T, IC = s.C, OC = 3 * s.C;
  s.linear_weights = 1;
  s.linear_weight_floats = size_t(OC) * IC;
  nx->plan(s);
  const Floats x = random_floats(size_t(N) * IC, 60), dout = random_floats(size_t(N) * OC, 61);
  Floats w1 = random_floats(size_t(OC) * IC, 62), w2 = random_floats(size_t(OC) * IC, 63);
  // What backward gives from the weight as it was in forward.
  Floats want_dx1(size_t(N) * IC), dw(size_t(OC) * IC),
      scratch(cpu::bf16_linear_scratch_floats(N, IC, OC));
  cpu::bf16_linear_backward(want_dx1.data(), dw.data(), nullptr, dout.data(), x.data(), w1.data(),
                            nullptr, N, IC, OC, scratch.data());
  Floats out(size_t(N) * OC), saved1(nx->linear_saved_floats(N, IC, OC)), saved2(saved1.size());
  Floats dx1(size_t(N) * IC), dx2(size_t(N) * IC);
  if (!cpu::native_bf16_available()) {
    // Without bf16 dot products an operand is an fp32 copy as large as the weight: none is
    // kept, so any number of weights may come, and backward rounds the weight as it is then.
    nx->linear_forward(out.data(), saved1.data(), x.data(), w1.data(), nullptr, N, IC, OC);
    nx->linear_forward(out.data(), saved2.data(), x.data(), w2.data(), nullptr, N, IC, OC);
    const Floats changed = random_floats(w1.size(), 65);
    std::copy(changed.begin(), changed.end(), w1.begin());
    Floats want(size_t(N) * IC);
    cpu::bf16_linear_backward(want.data(), dw.data(), nullptr, dout.data(), x.data(), w1.data(),
                              nullptr, N, IC, OC, scratch.data());
    ASSERT_NE(want, want_dx1);
    nx->linear_backward(dx1.data(), dw.data(), nullptr, dout.data(), x.data(), w1.data(),
                        saved1.data(), N, IC, OC);
    EXPECT_EQ(dx1, want);
    return;
  }
  EXPECT_THROW(nx->linear_backward(dx1.data(), dw.data(), nullptr, dout.data(), x.data(), w1.data(),
                                   saved1.data(), N, IC, OC),
               forge::Error);
  nx->linear_forward(out.data(), saved1.data(), x.data(), w1.data(), nullptr, N, IC, OC);
  EXPECT_THROW(
      nx->linear_forward(out.data(), saved2.data(), x.data(), w2.data(), nullptr, N, IC, OC),
      forge::Error);
  for (float& v : w1) v = 0.0f;
  nx->linear_backward(dx1.data(), dw.data(), nullptr, dout.data(), x.data(), w1.data(),
                      saved1.data(), N, IC, OC);
  EXPECT_EQ(dx1, want_dx1);  // the kept operand
  // Every forward converts afresh: given new values in the same place (an optimizer step),
  // backward follows them.
  const Floats fresh = random_floats(w1.size(), 64);
  std::copy(fresh.begin(), fresh.end(), w1.begin());  // in place: the same slot
  Floats want_dx3(size_t(N) * IC);
  cpu::bf16_linear_backward(want_dx3.data(), dw.data(), nullptr, dout.data(), x.data(), w1.data(),
                            nullptr, N, IC, OC, scratch.data());
  ASSERT_NE(want_dx3, want_dx1);
  nx->linear_forward(out.data(), saved1.data(), x.data(), w1.data(), nullptr, N, IC, OC);
  nx->linear_backward(dx1.data(), dw.data(), nullptr, dout.data(), x.data(), w1.data(),
                      saved1.data(), N, IC, OC);
  EXPECT_EQ(dx1, want_dx3);
}

}  // namespace

// The native path (oneDNN's bf16 matmul on avx512_bf16 / AMX) on every transpose and both
// betas, against float64 over the same bf16 values. On a CPU without bf16 instructions the
// linear kernels take the rounded-fp32 path, which the tests above cover.
TEST(Bf16, NativeGemmMatchesFloat64OnEveryTranspose) {
  if (!cpu::native_bf16_available()) GTEST_SKIP() << "no bf16 dot-product instructions here";
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f})
        for (bool with_bias : {false, true}) {
          const int M = 67, N = 45, K = 301;  // odd sizes: tails in every dimension
          const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
          SCOPED_TRACE(testing::Message()
                       << "ta=" << ta << " tb=" << tb << " beta=" << beta << " bias=" << with_bias);
          const Floats bias = random_floats(N, 53);
          const Floats a = random_floats(size_t(ta ? K : M) * lda, 50),
                       b = random_floats(size_t(tb ? N : K) * ldb, 51);
          std::vector<uint16_t> a16(a.size()), b16(b.size());
          cpu::to_bf16(a16.data(), a.data(), a.size());
          cpu::to_bf16(b16.data(), b.data(), b.size());
          Floats c = random_floats(size_t(M) * ldc, 52);
          const Floats c0 = c;
          cpu::gemm_bf16(ta, tb, M, N, K, a16.data(), lda, b16.data(), ldb, beta, c.data(), ldc,
                         with_bias ? bias.data() : nullptr);
          Doubles want(size_t(M) * N), got(size_t(M) * N);
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double acc = beta * c0[size_t(i) * ldc + j] + (with_bias ? bias[j] : 0.0);
              for (int k = 0; k < K; ++k) {
                const uint16_t av = ta ? a16[size_t(k) * lda + i] : a16[size_t(i) * lda + k];
                const uint16_t bv = tb ? b16[size_t(j) * ldb + k] : b16[size_t(k) * ldb + j];
                acc += double(scalar::bf16_to_float(av)) * scalar::bf16_to_float(bv);
              }
              want[size_t(i) * N + j] = acc;
              got[size_t(i) * N + j] = c[size_t(i) * ldc + j];
            }
          EXPECT_LT(rel_l2(Floats(got.begin(), got.end()), want), kTol);
          // the padding between rows of C is not written
          for (int i = 0; i < M; ++i)
            for (int j = N; j < ldc; ++j)
              EXPECT_EQ(c[size_t(i) * ldc + j], c0[size_t(i) * ldc + j]);
        }
}

TEST(Bf16, GradientOperandsMatchScalarBitForBit) {
  // Awkward sizes: partial 32-row bands and 16-column blocks, more columns than one thread's
  // 512-column accumulator run, and values the rounding treats specially. Every element of g
  // and gt is compared, so one landing at the wrong place, or not written, fails. The same
  // for bf16_gradient_rows (g and dbias without gt, the path for oneDNN on AMX).
  for_each_isa([&] {
    for (auto [N, OC] : {std::pair{1, 1}, std::pair{16, 16}, std::pair{17, 15}, std::pair{33, 48},
                         std::pair{45, 301}, std::pair{96, 32}, std::pair{130, 1100},
                         std::pair{2048, 37}, std::pair{64, 1152}}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(testing::Message() << N << " x " << OC << (with_bias ? " bias" : ""));
        std::mt19937 rng(static_cast<unsigned>(N * 7919 + OC));
        std::normal_distribution<float> normal(0.0f, 1e-3f);
        std::vector<float> dout(size_t(N) * OC);
        for (float& x : dout) x = normal(rng);
        const float specials[] = {1e-40f,
                                  -3e-39f,
                                  std::numeric_limits<float>::infinity(),
                                  3.4e38f,
                                  from_bits(0x7f800001u),
                                  -0.0f,
                                  1.0039062f};
        for (size_t i = 0; i < std::size(specials) && i * 97 < dout.size(); ++i)
          dout[i * 97] = specials[i];
        std::vector<uint16_t> g(dout.size(), 1), gt(dout.size(), 2), g_ref(dout.size()),
            gt_ref(dout.size());
        std::vector<uint16_t> g_rows(dout.size(), 3);
        std::vector<float> dbias(OC, 5.0f), dbias_rows(OC, 5.0f), dbias_ref(OC);
        cpu::bf16_gradient_operands(g.data(), gt.data(), with_bias ? dbias.data() : nullptr,
                                    dout.data(), N, OC);
        cpu::bf16_gradient_rows(g_rows.data(), with_bias ? dbias_rows.data() : nullptr, dout.data(),
                                N, OC);
        scalar::bf16_gradient_operands(g_ref.data(), gt_ref.data(), dbias_ref.data(), dout.data(),
                                       N, OC);
        for (size_t i = 0; i < gt.size(); ++i) {
          ASSERT_EQ(gt[i], gt_ref[i])
              << "gt[" << i << "] (column " << i % N << " of row " << i / N << ")";
          ASSERT_EQ(g[i], g_ref[i]) << "g[" << i << "] of " << dout[i];
          ASSERT_EQ(g_rows[i], g_ref[i]) << "rows: g[" << i << "] of " << dout[i];
        }
        for (int o = 0; o < OC; ++o) {
          for (const std::vector<float>* sums : {&dbias, &dbias_rows}) {
            if (!with_bias) {
              ASSERT_EQ((*sums)[o], 5.0f) << "dbias written without a bias";
              continue;
            }
            if (std::isnan(dbias_ref[o])) {
              ASSERT_TRUE(std::isnan((*sums)[o])) << "dbias[" << o << "]";
            } else {
              ASSERT_EQ(to_bits((*sums)[o]), to_bits(dbias_ref[o])) << "dbias[" << o << "]";
            }
          }
        }
      }
    }
  });
}
