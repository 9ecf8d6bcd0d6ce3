// oneDNN's matmul with B reordered into the primitive's own layout first (b_blocked) against
// the same matmul reading B where it is: the reorder only moves B, so every bit must agree.
// Awkward K and N pad the blocked layout (64 columns by 16 or 32 rows per block), and M is
// large enough that the reorder is used at all.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "forge/kernels/bf16_gemm.h"
#include "forge/kernels/linear.h"
#include "test_util.h"

#ifdef FORGE_HAVE_DNNL
#include <dnnl.h>

#include <cstdlib>
#include <string_view>

#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/cpu/onednn_matmul.h"

namespace {

namespace cpu = forge::kernels::cpu;
using forge_test::Floats;
using forge_test::random_floats;

struct Shape {
  int M, N, K;
};
// M from 1024 rows reorders in bf16, from 2048 in fp32 as well.
constexpr Shape kShapes[] = {{2053, 37, 100}, {2100, 216, 72}, {1024, 45, 301}, {2048, 129, 64}};

bool same_bits(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OneDnnMatmul, BlockedBChangesNoBit) {
  for (auto type : {cpu::OneDnnType::kF32, cpu::OneDnnType::kBf16}) {
    const bool bf16 = type == cpu::OneDnnType::kBf16;
    if (bf16 && !cpu::native_bf16_available()) continue;  // oneDNN's bf16 needs the ISA
    for (const Shape& s : kShapes)
      for (bool tb : {true, false})
        for (float beta : {0.0f, 1.0f})
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << (bf16 ? "bf16" : "fp32") << " M=" << s.M << " N=" << s.N << " K=" << s.K
                         << " tb=" << tb << " beta=" << beta << " bias=" << with_bias);
            const int lda = s.K + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 2;
            const Floats a = random_floats(size_t(s.M) * lda, 60),
                         b = random_floats(size_t(tb ? s.N : s.K) * ldb, 61),
                         bias = random_floats(s.N, 62), c0 = random_floats(size_t(s.M) * ldc, 63);
            std::vector<uint16_t> a16(a.size()), b16(b.size());
            cpu::to_bf16(a16.data(), a.data(), a.size());
            cpu::to_bf16(b16.data(), b.data(), b.size());
            const void* A = bf16 ? static_cast<const void*>(a16.data()) : a.data();
            const void* B = bf16 ? static_cast<const void*>(b16.data()) : b.data();
            const size_t room = cpu::onednn_blocked_b_bytes(type, s.K, s.N);
            // Filled with a pattern, so that padding the reorder failed to zero would show.
            std::vector<uint8_t> blocked(room, 0xA5);
            Floats plain = c0, reordered = c0;
            cpu::onednn_matmul(type, false, tb, s.M, s.N, s.K, A, lda, B, ldb, beta, plain.data(),
                               ldc, with_bias ? bias.data() : nullptr);
            cpu::onednn_matmul(type, false, tb, s.M, s.N, s.K, A, lda, B, ldb, beta,
                               reordered.data(), ldc, with_bias ? bias.data() : nullptr,
                               blocked.data());
            EXPECT_TRUE(same_bits(plain, reordered));
            EXPECT_FALSE(same_bits(plain, c0));  // the product was written at all
          }
  }
}

// The fp32 linear layer's forward through its weight workspace: the same bits as without.
TEST(OneDnnMatmul, LinearForwardWorkspaceChangesNoBit) {
  for (const Shape& s : kShapes)
    for (bool with_bias : {false, true}) {
      const int N = s.M, IC = s.K, OC = s.N;
      SCOPED_TRACE(testing::Message() << N << " x " << IC << " -> " << OC << " bias=" << with_bias);
      const Floats x = random_floats(size_t(N) * IC, 70), w = random_floats(size_t(OC) * IC, 71),
                   b = random_floats(OC, 72);
      Floats plain(size_t(N) * OC), reordered(size_t(N) * OC, 7.0f);
      Floats workspace(cpu::linear_weight_workspace_floats(IC, OC), -1.0f);
      cpu::linear_forward(plain.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IC,
                          OC);
      cpu::linear_forward(reordered.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N,
                          IC, OC, workspace.data());
      EXPECT_TRUE(same_bits(plain, reordered));
    }
}

// oneDNN's ISA values are feature sets: the questions forge asks of them (bf16 dot products,
// AMX, AVX-512) must not read a larger number as a larger ISA.
TEST(OneDnnMatmul, IsaQuestionsAreFeatureSets) {
  using cpu::onednn_isa_includes;
  // AVX2 with VNNI (Alder Lake and later laptops and desktops): no AVX-512, no bf16, no AMX,
  // although 0x407 is numerically above all three.
  EXPECT_GT(static_cast<unsigned>(dnnl_cpu_isa_avx2_vnni),
            static_cast<unsigned>(dnnl_cpu_isa_avx512_core_amx));
  EXPECT_TRUE(onednn_isa_includes(dnnl_cpu_isa_avx2_vnni, dnnl_cpu_isa_avx2));
  EXPECT_FALSE(onednn_isa_includes(dnnl_cpu_isa_avx2_vnni, dnnl_cpu_isa_avx512_core));
  EXPECT_FALSE(onednn_isa_includes(dnnl_cpu_isa_avx2_vnni, dnnl_cpu_isa_avx512_core_bf16));
  EXPECT_FALSE(onednn_isa_includes(dnnl_cpu_isa_avx2_vnni, dnnl_cpu_isa_avx512_core_amx));
  EXPECT_FALSE(onednn_isa_includes(dnnl_cpu_isa_avx2, dnnl_cpu_isa_avx512_core));
  // A Sapphire Rapids has all of them, a Zen 4 bf16 without AMX.
  EXPECT_TRUE(onednn_isa_includes(dnnl_cpu_isa_avx512_core_amx, dnnl_cpu_isa_avx512_core_bf16));
  EXPECT_TRUE(onednn_isa_includes(dnnl_cpu_isa_avx512_core_amx, dnnl_cpu_isa_avx2));
  EXPECT_TRUE(onednn_isa_includes(dnnl_cpu_isa_avx512_core_bf16, dnnl_cpu_isa_avx512_core));
  EXPECT_FALSE(onednn_isa_includes(dnnl_cpu_isa_avx512_core_bf16, dnnl_cpu_isa_avx512_core_amx));
  EXPECT_FALSE(onednn_isa_includes(dnnl_cpu_isa_avx512_core, dnnl_cpu_isa_avx512_core_bf16));

  // This process: oneDNN runs at least AVX2 wherever forge runs at all, and under
  // DNNL_MAX_CPU_ISA=AVX2 (the unit.onednn-avx2 entry) neither AVX-512 nor its bf16 products.
  if (cpu::detected_isa() != cpu::Isa::kGeneric) {
    EXPECT_TRUE(cpu::onednn_runs_isa(dnnl_cpu_isa_avx2));
  }
  const char* cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (cap && std::string_view(cap) == "AVX2") {
    EXPECT_FALSE(cpu::onednn_runs_isa(dnnl_cpu_isa_avx512_core));
    EXPECT_FALSE(cpu::native_bf16_available());
  }
  if (cpu::detected_isa() != cpu::Isa::kAvx512) {
    EXPECT_FALSE(cpu::onednn_runs_isa(dnnl_cpu_isa_avx512_core));
  }
}

}  // namespace
#endif  // FORGE_HAVE_DNNL
