// The bf16 attention kernels (kernels/attention_bf16.h), multi-head and grouped-query,
// against float64 attention: within bf16 error, and visibly not fp32 (so that a kernel which
// never rounds cannot pass).
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <utility>
#include <vector>

#include "forge/core/error.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/attention_bf16.h"
#include "forge/kernels/gqa_attention.h"
#include "test_util.h"

namespace {

using forge::kernels::GqaShape;
using namespace forge_test;
namespace cpu = forge::kernels::cpu;
namespace scalar = forge::kernels::scalar;

// Every test runs on both kinds of products (attention_bf16.h): VDPBF16PS and AMX tiles.
class AttentionBf16 : public testing::TestWithParam<cpu::Bf16Products> {
 protected:
  void SetUp() override {
    if (!cpu::attention_bf16_available()) GTEST_SKIP() << "no avx512_bf16 on this CPU";
    if (GetParam() == cpu::Bf16Products::kAmxTiles && !cpu::amx_tiles_available())
      GTEST_SKIP() << "no usable AMX tiles on this CPU";
  }
};

// bf16 keeps 8 significant bits: each rounded operand is off by up to 2^-9 (2e-3) relative,
// and the softmax's exp turns a score's error into the same relative error in p, growing
// with the spread of the scores: measured 2e-3 to 7.5e-3 on the shapes below. 1e-2 is half
// of EQUIVALENCE.md's bf16 bound. Above kRoundingVisible, operands were really rounded.
constexpr double kBf16Tol = 1e-2;
constexpr double kRoundingVisible = 1e-4;

// A workspace as an earlier use may leave it: NaN in every word, as fp32 and as both bf16
// halves. Padding a product sums over (AMX reads whole tiles) must be written, not assumed
// zero: a pad word that held a NaN would spread it over whole rows of the output.
Floats stale_workspace(size_t floats) { return Floats(floats, std::bit_cast<float>(0x7FC07FC0u)); }

void check_bf16_attention(cpu::Bf16Products products, int B, int T, int C, int NH, float spread) {
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
  const Floats qkv = random_floats(size_t(B) * T * 3 * C, 60, spread),
               dout = random_floats(size_t(B) * T * C, 61);
  const int threads = omp_get_max_threads();
  Floats out(size_t(B) * T * C), saved(cpu::attention_bf16_saved_floats(B, T, NH)),
      dqkv(size_t(B) * T * 3 * C, 9.0f),
      workspace = stale_workspace(cpu::attention_bf16_workspace_floats(T, C / NH, threads));
  cpu::attention_forward_bf16(out.data(), saved.data(), qkv.data(), B, T, C, NH, workspace.data(),
                              threads, products);
  cpu::attention_backward_bf16(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), B, T,
                               C, NH, workspace.data(), threads, products);

  const Doubles qkv64(qkv.begin(), qkv.end()), dout64(dout.begin(), dout.end());
  Doubles out64(size_t(B) * T * C), probs(scalar::attention_saved_floats(B, T, NH)),
      dqkv64(size_t(B) * T * 3 * C);
  scalar::attention_forward(out64.data(), probs.data(), qkv64.data(), B, T, C, NH);
  scalar::attention_backward(dqkv64.data(), dout64.data(), qkv64.data(), probs.data(), B, T, C, NH);
  const double out_err = rel_l2(out, out64), dqkv_err = rel_l2(dqkv, dqkv64);
  EXPECT_LT(out_err, kBf16Tol);
  EXPECT_LT(dqkv_err, kBf16Tol);
  EXPECT_GT(out_err, kRoundingVisible);
  EXPECT_GT(dqkv_err, kRoundingVisible);
  // Every element of dqkv was written (the 9.0 fill is gone wherever the reference is not 9).
  size_t untouched = 0;
  for (size_t i = 0; i < dqkv.size(); ++i) untouched += dqkv[i] == 9.0f && dqkv64[i] != 9.0;
  EXPECT_EQ(untouched, 0u);
}

TEST_P(AttentionBf16, MatchesFloat64WithinBf16Error) {
  const cpu::Bf16Products products = GetParam();
  // Odd head dims (a zero partner in every row pair), T not a multiple of either tile, T
  // larger than the key tile with scores spread enough that later tiles raise the running
  // maximum, a head dim over 64 (two column blocks), and odd T (a zero partner position).
  check_bf16_attention(products, 2, 13, 3 * 7, 3, 1.0f);
  check_bf16_attention(products, 1, 150, 2 * 19, 2, 2.0f);
  check_bf16_attention(products, 2, 67, 64, 1, 1.0f);
  check_bf16_attention(products, 1, 97, 2 * 80, 2, 1.0f);
  check_bf16_attention(products, 1, 256, 4 * 64, 4, 1.0f);
}

// Masking, exactly: a query never sees a later key. Changing every key and value after
// position p leaves out and dq of rows up to p bit for bit as they were; changing every
// query and output gradient before p leaves dk and dv of positions from p on unchanged. Run
// on sizes that put p inside a tile, on a tile's edge and in the diagonal tile's masked
// corner, where a block that read one vector too far or too few would show.
void check_bf16_causality(cpu::Bf16Products products, int B, int T, int C, int NH, int p) {
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH
                                  << " p=" << p);
  const int threads = omp_get_max_threads();
  const size_t C3 = 3 * size_t(C);
  struct Run {
    Floats out, dqkv;
  };
  auto run = [&](const Floats& qkv, const Floats& dout) {
    Floats out(size_t(B) * T * C), saved(cpu::attention_bf16_saved_floats(B, T, NH)),
        dqkv(qkv.size()), workspace(cpu::attention_bf16_workspace_floats(T, C / NH, threads));
    cpu::attention_forward_bf16(out.data(), saved.data(), qkv.data(), B, T, C, NH, workspace.data(),
                                threads, products);
    cpu::attention_backward_bf16(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), B,
                                 T, C, NH, workspace.data(), threads, products);
    return Run{out, dqkv};
  };
  const Floats qkv = random_floats(size_t(B) * T * C3, 70, 1.5f),
               dout = random_floats(size_t(B) * T * C, 71);
  const Run base = run(qkv, dout);
  // Later keys and values replaced: rows t <= p of out and of dq unchanged.
  Floats later = qkv;
  for (int b = 0; b < B; ++b)
    for (int t = p + 1; t < T; ++t)
      for (size_t c = C; c < C3; ++c) later[(size_t(b) * T + t) * C3 + c] *= -3.0f;
  const Run after = run(later, dout);
  size_t changed = 0, moved = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t row = size_t(b) * T + t;
        const bool same = after.out[row * C + c] == base.out[row * C + c] &&
                          after.dqkv[row * C3 + c] == base.dqkv[row * C3 + c];
        if (t <= p)
          changed += !same;
        else
          moved += !same;
      }
  EXPECT_EQ(changed, 0u) << "rows up to p saw a later key";
  EXPECT_GT(moved, 0u) << "the change reached no later row at all";
  // Earlier queries and output gradients replaced: dk, dv of positions from p on unchanged.
  Floats earlier_qkv = qkv, earlier_dout = dout;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < p; ++t) {
      for (int c = 0; c < C; ++c) {
        earlier_qkv[(size_t(b) * T + t) * C3 + c] *= -2.0f;
        earlier_dout[(size_t(b) * T + t) * C + c] *= 0.5f;
      }
    }
  const Run before = run(earlier_qkv, earlier_dout);
  changed = 0;
  for (int b = 0; b < B; ++b)
    for (int t = p; t < T; ++t)
      for (size_t c = C; c < C3; ++c) {
        const size_t at = (size_t(b) * T + t) * C3 + c;
        changed += before.dqkv[at] != base.dqkv[at];
      }
  EXPECT_EQ(changed, 0u) << "keys from p on took a gradient from an earlier query";
}

TEST_P(AttentionBf16, IsExactlyCausal) {
  const cpu::Bf16Products products = GetParam();
  check_bf16_causality(products, 1, 150, 2 * 19, 2, 75);  // p inside a query tile and a key tile
  check_bf16_causality(products, 2, 97, 2 * 32, 2, 63);   // p at a key tile's last position
  check_bf16_causality(products, 1, 200, 3 * 16, 3,
                       100);                           // p where a 6-row block straddles vectors
  check_bf16_causality(products, 1, 13, 3 * 7, 3, 4);  // one tile, odd head dim
}

// Grouped-query attention (Llama): the same kernels over separate q, k, v; dk and dv sum over
// each kv head's group of query heads.
void check_bf16_gqa(cpu::Bf16Products products, GqaShape s) {
  SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                  << " KVH=" << s.KVH << " hd=" << s.hd);
  const size_t rows = size_t(s.B) * s.T, dq = size_t(s.NH) * s.hd, dkv = size_t(s.KVH) * s.hd;
  const Floats q = random_floats(rows * dq, 63), k = random_floats(rows * dkv, 64),
               v = random_floats(rows * dkv, 65), dout = random_floats(rows * dq, 66);
  const int threads = omp_get_max_threads();
  Floats out(rows * dq), saved(cpu::attention_bf16_saved_floats(s.B, s.T, s.NH)),
      gq(rows * dq, 9.0f), gk(rows * dkv, 9.0f), gv(rows * dkv, 9.0f),
      workspace = stale_workspace(cpu::attention_bf16_workspace_floats(s.T, s.hd, threads));
  cpu::gqa_attention_forward_bf16(out.data(), saved.data(), q.data(), k.data(), v.data(), s,
                                  workspace.data(), threads, products);
  cpu::gqa_attention_backward_bf16(gq.data(), gk.data(), gv.data(), dout.data(), q.data(), k.data(),
                                   v.data(), out.data(), saved.data(), s, workspace.data(), threads,
                                   products);
  const Doubles q64(q.begin(), q.end()), k64(k.begin(), k.end()), v64(v.begin(), v.end()),
      dout64(dout.begin(), dout.end());
  Doubles out64(rows * dq), probs(scalar::gqa_attention_saved_floats(s)), gq64(rows * dq),
      gk64(rows * dkv), gv64(rows * dkv);
  scalar::gqa_attention_forward(out64.data(), probs.data(), q64.data(), k64.data(), v64.data(), s);
  scalar::gqa_attention_backward(gq64.data(), gk64.data(), gv64.data(), dout64.data(), q64.data(),
                                 k64.data(), v64.data(), probs.data(), s);
  for (auto [got, want] : {std::pair{&out, &out64}, std::pair{&gq, &gq64}, std::pair{&gk, &gk64},
                           std::pair{&gv, &gv64}}) {
    const double err = rel_l2(*got, *want);
    EXPECT_LT(err, kBf16Tol);
    EXPECT_GT(err, kRoundingVisible);
  }
}

// Like the fp32 kernel (LlamaKernels.GqaAttentionRefusesKvHeadsThatDoNotDivideQueryHeads),
// the bf16 one refuses kv heads that do not divide the query heads before touching a buffer:
// the check is in the layout both build.
TEST_P(AttentionBf16, RefusesKvHeadsThatDoNotDivideQueryHeads) {
  const cpu::Bf16Products products = GetParam();
  const GqaShape s{1, 4, 6, 4, 8};  // 6 query heads, 4 kv heads
  float* none = nullptr;
  EXPECT_THROW(cpu::gqa_attention_forward_bf16(none, none, none, none, none, s, none, 1, products),
               forge::Error);
  EXPECT_THROW(cpu::gqa_attention_backward_bf16(none, none, none, none, none, none, none, none,
                                                none, s, none, 1, products),
               forge::Error);
}

TEST_P(AttentionBf16, GroupedQueryMatchesFloat64WithinBf16Error) {
  const cpu::Bf16Products products = GetParam();
  check_bf16_gqa(products, {2, 37, 4, 2, 7});
  check_bf16_gqa(products, {1, 130, 6, 2, 16});
  check_bf16_gqa(products, {2, 64, 3, 3, 64});
  check_bf16_gqa(products, {1, 97, 8, 1, 24});
}

// The thread count must not change a bit (a resumed run may use another). With few
// (sequence, kv head) pairs forward's tasks are single query heads instead of whole kv heads
// (the 4 pairs of the second shape take whole kv heads on one thread and single heads on
// two), and backward's are runs of key tiles, then runs of query tiles, instead of pairs (the
// shapes with one pair, from two threads on: T = 200 and 259 give runs of several key tiles,
// T = 131 and 259 an odd last row).
TEST_P(AttentionBf16, IsTheSameOnAnyThreadCount) {
  const cpu::Bf16Products products = GetParam();
  const int saved_threads = omp_get_max_threads(), planned = 3;
  for (const GqaShape& s :
       {GqaShape{1, 200, 4, 1, 64}, GqaShape{2, 70, 4, 2, 16}, GqaShape{3, 45, 6, 2, 24},
        GqaShape{1, 131, 1, 1, 40}, GqaShape{1, 259, 3, 1, 24}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                    << " KVH=" << s.KVH << " hd=" << s.hd);
    const size_t nq = size_t(s.B) * s.T * s.NH * s.hd, nk = size_t(s.B) * s.T * s.KVH * s.hd;
    const Floats q = random_floats(nq, 67), k = random_floats(nk, 68), v = random_floats(nk, 69),
                 dout = random_floats(nq, 70);
    Floats workspace = stale_workspace(cpu::attention_bf16_workspace_floats(s.T, s.hd, planned));
    std::vector<Floats> results;
    for (int threads = 1; threads <= planned; ++threads) {
      omp_set_num_threads(threads);
      Floats out(nq), saved(cpu::attention_bf16_saved_floats(s.B, s.T, s.NH)), dq(nq, 7.0f),
          dk(nk, 7.0f), dv(nk, 7.0f);
      cpu::gqa_attention_forward_bf16(out.data(), saved.data(), q.data(), k.data(), v.data(), s,
                                      workspace.data(), planned, products);
      cpu::gqa_attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                       k.data(), v.data(), out.data(), saved.data(), s,
                                       workspace.data(), planned, products);
      for (Floats* r : {&out, &dq, &dk, &dv}) results.push_back(std::move(*r));
    }
    for (size_t i = 4; i < results.size(); ++i) EXPECT_EQ(results[i], results[i % 4]) << i;
  }
  omp_set_num_threads(saved_threads);
}

// Softmax's gradient sums to zero over a row. When every key is one vector k and every value
// one vector v, each row's scores are equal, out_i = v, dP_ij = dO_i . v = D_i, so dS = 0
// and the query gradient vanishes. In bf16 that holds only if backward's D_i = dO_i . out_i
// sees dO rounded as dP = dO V^T does: with D from the unrounded dO, every dS_ij of row i
// kept the residue P_ij (bf16(dO_i) - dO_i) . v, of one sign along the row, and dq came
// out at 8.5e-3 of its usual size here (and drifted the query weights step after step).
// Measured against dq of the same run with random keys and values.
TEST_P(AttentionBf16, QueryGradientVanishesWhenKeysAndValuesAreAllTheSame) {
  const cpu::Bf16Products products = GetParam();
  const int B = 2, T = 70, C = 2 * 32, NH = 2, threads = omp_get_max_threads();
  const Floats dout = random_floats(size_t(B) * T * C, 64);
  auto query_gradient_rms = [&](const Floats& qkv) {
    Floats out(size_t(B) * T * C), saved(cpu::attention_bf16_saved_floats(B, T, NH)),
        dqkv(size_t(B) * T * 3 * C),
        workspace(cpu::attention_bf16_workspace_floats(T, C / NH, threads));
    cpu::attention_forward_bf16(out.data(), saved.data(), qkv.data(), B, T, C, NH, workspace.data(),
                                threads, products);
    cpu::attention_backward_bf16(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), B,
                                 T, C, NH, workspace.data(), threads, products);
    double sum = 0.0;
    for (size_t row = 0; row < size_t(B) * T; ++row)
      for (int c = 0; c < C; ++c) sum += double(dqkv[row * 3 * C + c]) * dqkv[row * 3 * C + c];
    return std::sqrt(sum / (double(B) * T * C));
  };
  Floats qkv = random_floats(size_t(B) * T * 3 * C, 63);
  const double usual = query_gradient_rms(qkv);
  for (size_t row = 1; row < size_t(B) * T; ++row)  // every key and value is row 0's
    for (int c = C; c < 3 * C; ++c) qkv[row * 3 * C + c] = qkv[c];
  const double same = query_gradient_rms(qkv);
  EXPECT_GT(usual, 1e-3);
  EXPECT_LT(same, 1e-5 * usual);
}

TEST_P(AttentionBf16, RefusesATeamLargerThanPlanned) {
  const cpu::Bf16Products products = GetParam();
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "needs two threads";
  const int B = 1, T = 8, C = 8, NH = 2;
  Floats qkv = random_floats(size_t(B) * T * 3 * C, 62), out(size_t(B) * T * C),
         saved(cpu::attention_bf16_saved_floats(B, T, NH)),
         workspace(cpu::attention_bf16_workspace_floats(T, C / NH, 1));
  EXPECT_THROW(cpu::attention_forward_bf16(out.data(), saved.data(), qkv.data(), B, T, C, NH,
                                           workspace.data(), 1, products),
               forge::Error);
}

INSTANTIATE_TEST_SUITE_P(Products, AttentionBf16,
                         testing::Values(cpu::Bf16Products::kDotProducts,
                                         cpu::Bf16Products::kAmxTiles),
                         [](const testing::TestParamInfo<cpu::Bf16Products>& info) {
                           return info.param == cpu::Bf16Products::kAmxTiles ? "AmxTiles"
                                                                             : "DotProducts";
                         });

}  // namespace
