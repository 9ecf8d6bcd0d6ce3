// The fused kernels read nothing past their operands. Each operand is placed so that its last
// element sits right before a page the process may not touch (PROT_NONE): a read past the end
// faults every time, instead of only when the heap happens to end an allocation at a page
// boundary. This is how GCC 12's loop vectorizer was caught loading rows past the last one in
// the generic tile products (see kernels/cpu/for_each_isa.inc); the kernels run under every
// instruction set this CPU has. A fault ends the test binary, which ctest reports as failed.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "forge/kernels/attention.h"
#include "forge/kernels/cross_entropy.h"
#include "forge/kernels/gelu.h"
#include "forge/kernels/gqa_attention.h"
#include "forge/kernels/layernorm.h"
#include "test_util.h"

namespace {

namespace cpu = forge::kernels::cpu;
using namespace forge_test;  // random_floats, for_each_isa

// n floats whose last one ends where a PROT_NONE page begins.
class Guarded {
 public:
  explicit Guarded(size_t n, const Floats& init = {}) : n_(n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    bytes_ = (n * sizeof(float) + page - 1) / page * page + page;
    void* region =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) throw std::runtime_error("mmap failed");
    region_ = static_cast<char*>(region);
    if (mprotect(region_ + bytes_ - page, page, PROT_NONE) != 0)
      throw std::runtime_error("mprotect failed");
    data_ = reinterpret_cast<float*>(region_ + bytes_ - page) - n;
    for (size_t i = 0; i < n; ++i) data_[i] = init.empty() ? 0.0f : init[i];
  }
  ~Guarded() { munmap(region_, bytes_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  float* data() { return data_; }
  size_t size() const { return n_; }

 private:
  char* region_ = nullptr;
  float* data_ = nullptr;
  size_t n_, bytes_ = 0;
};

TEST(GuardedOperands, FusedAttentionReadsNothingPastItsOperands) {
  // The shape of the original fault (the last batch's rows end qkv and dout), and an awkward one.
  for (auto [B, T, C, NH] : {std::tuple{2, 256, 384, 6}, std::tuple{1, 67, 42, 3}}) {
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
    const size_t rows = static_cast<size_t>(B) * T;
    for_each_isa([&, B = B, T = T, C = C, NH = NH] {
      Guarded qkv(rows * 3 * C, random_floats(rows * 3 * C, 1)),
          dout(rows * C, random_floats(rows * C, 2)), out(rows * C), dqkv(rows * 3 * C),
          saved(cpu::attention_saved_floats(B, T, C, NH));
      cpu::attention_forward(out.data(), saved.data(), qkv.data(), B, T, C, NH);
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), B, T,
                              C, NH);
      EXPECT_TRUE(std::isfinite(dqkv.data()[dqkv.size() - 1]));
    });
  }
}

TEST(GuardedOperands, GroupedQueryAttentionReadsNothingPastItsOperands) {
  // gqa_attention.cpp uses the tile products of the build's own ISA (no run-time dispatch).
  for (forge::kernels::GqaShape s :
       {forge::kernels::GqaShape{2, 130, 4, 2, 32}, forge::kernels::GqaShape{1, 37, 6, 3, 10}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                    << " KVH=" << s.KVH << " hd=" << s.hd);
    const size_t rows = static_cast<size_t>(s.B) * s.T, dq = rows * s.NH * s.hd,
                 dkv = rows * s.KVH * s.hd;
    Guarded q(dq, random_floats(dq, 3)), k(dkv, random_floats(dkv, 4)),
        v(dkv, random_floats(dkv, 5)), dout(dq, random_floats(dq, 6)), out(dq),
        lse(cpu::gqa_attention_saved_floats(s)), gq(dq), gk(dkv), gv(dkv);
    cpu::gqa_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    cpu::gqa_attention_backward(gq.data(), gk.data(), gv.data(), dout.data(), q.data(), k.data(),
                                v.data(), out.data(), lse.data(), s);
    EXPECT_TRUE(std::isfinite(gv.data()[gv.size() - 1]));
  }
}

TEST(GuardedOperands, NormGeluAndLossReadNothingPastTheirOperands) {
  const int N = 131, C = 77, V = 67, Vp = 80;
  for_each_isa([&] {
    Guarded x(N * C, random_floats(N * C, 7)), w(C, random_floats(C, 8)), b(C), y(N * C), mean(N),
        rstd(N), dy(N * C, random_floats(N * C, 9)), dx(N * C), dw(C), db(C);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                           1e-5f);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    cpu::gelu_forward(y.data(), x.data(), x.size());
    cpu::gelu_backward(dx.data(), x.data(), dy.data(), x.size());
    Guarded logits(N * Vp, random_floats(N * Vp, 10)), lse(cpu::cross_entropy_saved_floats(N)),
        dlogits(N * Vp);
    std::vector<int32_t> targets(N);
    for (int i = 0; i < N; ++i) targets[i] = (i * 31) % V;
    const float loss =
        cpu::cross_entropy_forward(lse.data(), logits.data(), targets.data(), N, V, Vp);
    cpu::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), N, V, Vp,
                                1.0f);
    EXPECT_TRUE(std::isfinite(loss));
  });
}

}  // namespace
