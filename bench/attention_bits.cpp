// Writes the fused fp32 attention kernels' outputs (forward and backward, GPT-2's and
// grouped-query), and the bf16 grouped-query kernels' where the CPU has avx512_bf16 (on
// VDPBF16PS, then on AMX tiles where it has those: last, so that a file of a build before AMX is
// a prefix of this one's), on fixed
// pseudo-random inputs of awkward shapes to one binary file, so that two builds can be compared
// byte for byte: a change meant to keep the same arithmetic (a new loop order, a product that
// overwrites instead of accumulating onto zeros) must leave `cmp` silent.
//
//   cmake --build build --target attention_bits && build/attention_bits new.bin
//   (the same in a worktree of the previous commit, then) cmp old.bin new.bin
//
// Outputs are pre-filled with 7.0 so that a row the kernel fails to write shows.
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench_util.h"
#include "forge/kernels/attention.h"
#include "forge/kernels/attention_bf16.h"
#include "forge/kernels/gqa_attention.h"

namespace {

using forge::kernels::GqaShape;
using forge_bench::random_floats;
namespace cpu = forge::kernels::cpu;

// Inputs spread wider than unit scale, so that softmax rows are far from uniform.
constexpr float kSpread = 1.5f;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: attention_bits OUT.bin\n");
    return 2;
  }
  FILE* f = std::fopen(argv[1], "wb");
  if (!f) {
    std::fprintf(stderr, "attention_bits: cannot write %s\n", argv[1]);
    return 1;
  }
  size_t written = 0;
  auto put = [&](const std::vector<float>& v) { written += std::fwrite(v.data(), 4, v.size(), f); };
  // GPT-2's kernel: B, T, NH, hd (T ragged against the 32-query and 64-key tiles, T = 1; a
  // few (sequence, head) pairs, which backward splits into key-tile and query-tile tasks).
  const int gpt2[][4] = {{2, 256, 6, 64}, {3, 97, 4, 64}, {1, 300, 2, 80}, {2, 33, 3, 8},
                         {1, 64, 1, 32},  {2, 1, 2, 16},  {1, 129, 5, 24}, {1, 257, 1, 64}};
  for (unsigned i = 0; i < std::size(gpt2); ++i) {
    const int B = gpt2[i][0], T = gpt2[i][1], NH = gpt2[i][2], C = NH * gpt2[i][3];
    const auto qkv = random_floats(size_t(B) * T * 3 * C, 1 + i, kSpread),
               dout = random_floats(size_t(B) * T * C, 100 + i, kSpread);
    std::vector<float> out(size_t(B) * T * C, 7.0f), dqkv(qkv.size(), 7.0f),
        saved(cpu::attention_saved_floats(B, T, C, NH));
    cpu::attention_forward(out.data(), saved.data(), qkv.data(), B, T, C, NH);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), B, T, C,
                            NH);
    put(out);
    put(dqkv);
  }
  // The grouped-query kernel: B, T, NH, KVH, hd (1 to 4 query heads per kv head).
  const GqaShape gqa[] = {{2, 256, 8, 2, 64}, {1, 97, 6, 3, 32}, {2, 45, 4, 1, 16},
                          {1, 130, 4, 4, 64}, {1, 1, 2, 1, 8},   {3, 200, 6, 2, 40},
                          {1, 200, 4, 1, 64}};
  for (unsigned i = 0; i < std::size(gqa); ++i) {
    const GqaShape& s = gqa[i];
    const size_t rows = size_t(s.B) * s.T, qn = rows * s.NH * s.hd, kn = rows * s.KVH * s.hd;
    const auto q = random_floats(qn, 200 + i, kSpread), k = random_floats(kn, 300 + i, kSpread),
               v = random_floats(kn, 400 + i, kSpread), dout = random_floats(qn, 500 + i, kSpread);
    std::vector<float> out(qn, 7.0f), dq(qn, 7.0f), dk(kn, 7.0f), dv(kn, 7.0f),
        saved(cpu::gqa_attention_saved_floats(s));
    cpu::gqa_attention_forward(out.data(), saved.data(), q.data(), k.data(), v.data(), s);
    cpu::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                v.data(), out.data(), saved.data(), s);
    put(out);
    put(dq);
    put(dk);
    put(dv);
  }
  // The bf16 kernels (where the CPU has avx512_bf16), on the grouped-query shapes, with a
  // workspace for the team the run has.
  std::vector<cpu::Bf16Products> bf16_products;
  if (cpu::attention_bf16_available()) bf16_products.push_back(cpu::Bf16Products::kDotProducts);
  if (cpu::attention_bf16_available() && cpu::amx_tiles_available())
    bf16_products.push_back(cpu::Bf16Products::kAmxTiles);
  for (cpu::Bf16Products products : bf16_products)
    for (unsigned i = 0; i < std::size(gqa); ++i) {
      const GqaShape& s = gqa[i];
      const size_t rows = size_t(s.B) * s.T, qn = rows * s.NH * s.hd, kn = rows * s.KVH * s.hd;
      const auto q = random_floats(qn, 600 + i, kSpread), k = random_floats(kn, 700 + i, kSpread),
                 v = random_floats(kn, 800 + i, kSpread),
                 dout = random_floats(qn, 900 + i, kSpread);
      const int threads = omp_get_max_threads();
      std::vector<float> out(qn, 7.0f), dq(qn, 7.0f), dk(kn, 7.0f), dv(kn, 7.0f),
          saved(cpu::attention_bf16_saved_floats(s.B, s.T, s.NH)),
          workspace(cpu::attention_bf16_workspace_floats(s.T, s.hd, threads));
      cpu::gqa_attention_forward_bf16(out.data(), saved.data(), q.data(), k.data(), v.data(), s,
                                      workspace.data(), threads, products);
      cpu::gqa_attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                       k.data(), v.data(), out.data(), saved.data(), s,
                                       workspace.data(), threads, products);
      put(out);
      put(dq);
      put(dk);
      put(dv);
    }
  if (std::fclose(f) != 0) {
    std::fprintf(stderr, "attention_bits: writing %s failed\n", argv[1]);
    return 1;
  }
  std::printf("attention_bits: %zu floats in %s\n", written, argv[1]);
  return 0;
}
