// The fused kernels read nothing past their operands. Each operand is placed so that its last
// element sits right before a page the process may not touch (PROT_NONE): a read past the end
// faults every time, instead of only when the heap happens to end an allocation at a page
// boundary. This is how GCC 12's loop vectorizer was caught loading rows past the last one in
// the generic tile products (see kernels/cpu/for_each_isa.inc); the kernels run under every
// instruction set this CPU has. A fault ends the test binary, which ctest reports as failed.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "forge/kernels/attention.h"
#include "forge/kernels/attention_bf16.h"
#include "forge/kernels/bf16_gemm.h"
#include "forge/kernels/cross_entropy.h"
#include "forge/kernels/gelu.h"
#include "forge/kernels/gqa_attention.h"
#include "forge/kernels/layernorm.h"
#include "forge/kernels/rmsnorm.h"
#include "forge/kernels/rope.h"
#include "forge/kernels/swiglu.h"
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
  for (forge::kernels::GqaShape s :
       {forge::kernels::GqaShape{2, 130, 4, 2, 32}, forge::kernels::GqaShape{1, 37, 6, 3, 10}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                    << " KVH=" << s.KVH << " hd=" << s.hd);
    const size_t rows = static_cast<size_t>(s.B) * s.T, dq = rows * s.NH * s.hd,
                 dkv = rows * s.KVH * s.hd;
    for_each_isa([&] {
      Guarded q(dq, random_floats(dq, 3)), k(dkv, random_floats(dkv, 4)),
          v(dkv, random_floats(dkv, 5)), dout(dq, random_floats(dq, 6)), out(dq),
          lse(cpu::gqa_attention_saved_floats(s)), gq(dq), gk(dkv), gv(dkv);
      cpu::gqa_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
      cpu::gqa_attention_backward(gq.data(), gk.data(), gv.data(), dout.data(), q.data(), k.data(),
                                  v.data(), out.data(), lse.data(), s);
      EXPECT_TRUE(std::isfinite(gv.data()[gv.size() - 1]));
    });
  }
}

TEST(GuardedOperands, LlamaNormRopeAndSwigluReadNothingPastTheirOperands) {
  const int B = 3, T = 11, NH = 5, hd = 38, N = B * T, C = NH * hd;
  for_each_isa([&] {
    Guarded x(N * C, random_floats(N * C, 20)), w(C, random_floats(C, 21)), y(N * C), rstd(N),
        dy(N * C, random_floats(N * C, 22)), dup(N * C), dx(N * C), dw(C), cos(T * hd / 2),
        sin(T * hd / 2);
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    cpu::rope_tables(cos.data(), sin.data(), T, hd, 10000.0);
    cpu::rope_forward(y.data(), x.data(), cos.data(), sin.data(), B, T, NH, hd);
    cpu::rope_backward(dx.data(), dy.data(), cos.data(), sin.data(), B, T, NH, hd);
    cpu::swiglu_forward(y.data(), x.data(), dy.data(), x.size());
    cpu::swiglu_backward(dx.data(), dup.data(), dy.data(), x.data(), y.data(), x.size());
    EXPECT_TRUE(std::isfinite(dx.data()[dx.size() - 1]));
  });
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

TEST(GuardedOperands, Bf16KernelsReadNothingPastTheirOperands) {
  // The bf16 profile's own kernels: attention (GPT-2 and grouped-query) and the pass that
  // makes the bf16 operands of a linear layer's output gradient.
  const int N = 77, OC = 54;
  Guarded dout(N * OC, random_floats(N * OC, 11)), g((N * OC + 1) / 2), gt((N * OC + 1) / 2),
      dbias(OC);
  cpu::bf16_gradient_operands(reinterpret_cast<uint16_t*>(g.data()),
                              reinterpret_cast<uint16_t*>(gt.data()), dbias.data(), dout.data(), N,
                              OC);
  EXPECT_TRUE(std::isfinite(dbias.data()[OC - 1]));
  if (!cpu::attention_bf16_available())
    GTEST_SKIP() << "no avx512_bf16: the bf16 attention kernels do not run here";
  const int threads = omp_get_max_threads();
  const int B = 2, T = 70, C = 48, NH = 3;
  const size_t rows = static_cast<size_t>(B) * T;
  Guarded qkv(rows * 3 * C, random_floats(rows * 3 * C, 12)),
      go(rows * C, random_floats(rows * C, 13)), out(rows * C), dqkv(rows * 3 * C),
      saved(cpu::attention_bf16_saved_floats(B, T, NH)),
      ws(cpu::attention_bf16_workspace_floats(T, C / NH, threads));
  cpu::attention_forward_bf16(out.data(), saved.data(), qkv.data(), B, T, C, NH, ws.data(),
                              threads);
  cpu::attention_backward_bf16(dqkv.data(), go.data(), qkv.data(), out.data(), saved.data(), B, T,
                               C, NH, ws.data(), threads);
  EXPECT_TRUE(std::isfinite(dqkv.data()[dqkv.size() - 1]));
  const forge::kernels::GqaShape s{1, 45, 4, 2, 16};
  const size_t dq = static_cast<size_t>(s.B) * s.T * s.NH * s.hd,
               dkv = static_cast<size_t>(s.B) * s.T * s.KVH * s.hd;
  Guarded q(dq, random_floats(dq, 14)), k(dkv, random_floats(dkv, 15)),
      v(dkv, random_floats(dkv, 16)), gout(dq, random_floats(dq, 17)), o(dq),
      lse(cpu::attention_bf16_saved_floats(s.B, s.T, s.NH)), gq(dq), gk(dkv), gv(dkv),
      gws(cpu::attention_bf16_workspace_floats(s.T, s.hd, threads));
  cpu::gqa_attention_forward_bf16(o.data(), lse.data(), q.data(), k.data(), v.data(), s, gws.data(),
                                  threads);
  cpu::gqa_attention_backward_bf16(gq.data(), gk.data(), gv.data(), gout.data(), q.data(), k.data(),
                                   v.data(), o.data(), lse.data(), s, gws.data(), threads);
  EXPECT_TRUE(std::isfinite(gv.data()[gv.size() - 1]));
}

}  // namespace
