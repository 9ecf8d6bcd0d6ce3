// Kernel benchmarks (Google Benchmark) on the shapes of configs small (B=8, T=256, C=384,
// NH=6, V=256) and gpt2-124m (B=4, T=256, C=768, NH=12, V=50304), and llama-small's GEMMs:
//  - every linear layer's three GEMMs (forward, dinp, dweight): OpenBLAS vs oneDNN (matmul
//    primitive and dnnl_sgemm; built with FORGE_HAVE_DNNL) vs forge's own packed kernel;
//  - attention, layernorm and the classifier: forge's fused kernels against the unfused
//    sequence of GEMMs and passes a framework would run; attention also in bf16 (the `bf16`
//    profile's kernel, on CPUs with avx512_bf16).
// Counters: GFLOP/s for GEMMs and attention (causal half counted), GB/s for memory-bound ops.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "forge/kernels/attention.h"
#include "forge/kernels/attention_bf16.h"
#include "forge/kernels/bf16_gemm.h"
#include "forge/kernels/cpu/amx.h"
#include "forge/kernels/cpu/amx_gemm.h"
#ifdef FORGE_HAVE_DNNL
#include "forge/kernels/cpu/onednn_matmul.h"
#endif
#include "bench_util.h"
#include "forge/kernels/cross_entropy.h"
#include "forge/kernels/gelu.h"
#include "forge/kernels/gemm.h"
#include "forge/kernels/gqa_attention.h"
#include "forge/kernels/layernorm.h"

namespace {

namespace cpu = forge::kernels::cpu;

using forge_bench::Aligned;
using forge_bench::random_floats;

// --- GEMMs ---------------------------------------------------------------------------

struct LinearShape {
  const char* name;
  int N, IC, OC;
};

// N = B*T rows.
const LinearShape kShapes[] = {
    {"small/qkv", 2048, 384, 1152},
    {"small/attn_proj", 2048, 384, 384},
    {"small/fc", 2048, 384, 1536},
    {"small/mlp_proj", 2048, 1536, 384},
    {"small/lm_head", 2048, 384, 256},
    {"124m/qkv", 1024, 768, 2304},
    {"124m/attn_proj", 1024, 768, 768},
    {"124m/fc", 1024, 768, 3072},
    {"124m/mlp_proj", 1024, 3072, 768},
    {"124m/lm_head", 1024, 768, 50304},
    // llama-small (B=8, T=256, C=512, 8 heads over 2 KV heads, SwiGLU 1408): q | k | v and
    // gate | up stacked as `fast` runs them, and k (or v) alone for the unstacked comparison.
    {"llama/qkv", 2048, 512, 768},
    {"llama/k", 2048, 512, 128},
    {"llama/o_proj", 2048, 512, 512},
    {"llama/gate_up", 2048, 512, 2816},
    {"llama/down", 2048, 1408, 512},
};

enum class Pass { kForward, kDinp, kDweight };
const char* pass_name(Pass p) {
  return p == Pass::kForward ? "fwd" : p == Pass::kDinp ? "dinp" : "dweight";
}

// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] for each pass of y = x W^T.
struct GemmProblem {
  int M, N, K;
  bool transA, transB;
  const float *A, *B;
  float* C;
  int lda, ldb;
};

struct LinearBuffers {
  Aligned<float> x, w, y, dy, dx, dw;
  explicit LinearBuffers(const LinearShape& s)
      : x(random_floats(size_t(s.N) * s.IC, 1)),
        w(random_floats(size_t(s.OC) * s.IC, 2, 0.02f)),
        y(size_t(s.N) * s.OC),
        dy(random_floats(size_t(s.N) * s.OC, 3)),
        dx(size_t(s.N) * s.IC),
        dw(size_t(s.OC) * s.IC) {}
  GemmProblem problem(const LinearShape& s, Pass p) {
    switch (p) {
      case Pass::kForward:  // y[N,OC] = x[N,IC] w[OC,IC]^T
        return {s.N, s.OC, s.IC, false, true, x.data(), w.data(), y.data(), s.IC, s.IC};
      case Pass::kDinp:  // dx[N,IC] = dy[N,OC] w[OC,IC]
        return {s.N, s.IC, s.OC, false, false, dy.data(), w.data(), dx.data(), s.OC, s.IC};
      default:  // dw[OC,IC] = dy[N,OC]^T x[N,IC]
        return {s.OC, s.IC, s.N, true, false, dy.data(), x.data(), dw.data(), s.OC, s.IC};
    }
  }
};

void set_gemm_counters(benchmark::State& state, const GemmProblem& g) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * g.M * g.N * g.K * state.iterations(), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

void BM_GemmOpenBLAS(benchmark::State& state, LinearShape s, Pass p) {
  LinearBuffers buf(s);
  const GemmProblem g = buf.problem(s, p);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, g.transA ? CblasTrans : CblasNoTrans,
                g.transB ? CblasTrans : CblasNoTrans, g.M, g.N, g.K, 1.0f, g.A, g.lda, g.B, g.ldb,
                0.0f, g.C, g.N);
    benchmark::ClobberMemory();
  }
  set_gemm_counters(state, g);
}

// Through forge's own dispatcher: kForge is forge's packed kernel, kOneDNN is dnnl_sgemm (the
// BLAS-like entry point), kOneDnnMatmul oneDNN's matmul primitive (kernels/cpu/onednn_matmul.h).
void BM_GemmVia(benchmark::State& state, LinearShape s, Pass p, cpu::GemmBackend backend) {
  LinearBuffers buf(s);
  const GemmProblem g = buf.problem(s, p);
  for (auto _ : state) {
    cpu::gemm_with(backend, g.transA, g.transB, g.M, g.N, g.K, g.A, g.lda, g.B, g.ldb, 0.0f, g.C,
                   g.N);
    benchmark::ClobberMemory();
  }
  set_gemm_counters(state, g);
}

// The same three GEMMs on packed bf16 operands (oneDNN's bf16 matmul, fp32 accumulation), and
// dweight and dinp also from dout stored transposed, [OC, N] (dweight then a plain NN product).
void BM_GemmBf16(benchmark::State& state, LinearShape s, Pass p, bool dweight_nn, bool dinp_tn) {
  if (!cpu::native_bf16_available()) {
    state.SkipWithError("no bf16 dot products on this CPU");
    return;
  }
  LinearBuffers buf(s);
  GemmProblem g = buf.problem(s, p);
  // dweight_nn: dw = dy^T x with dy^T stored [OC, N]; dinp_tn: dx = (dy^T)^T w from it.
  Aligned<float> a_t;
  if (dweight_nn || dinp_tn) {
    a_t.resize(size_t(s.N) * s.OC);
    for (int n = 0; n < s.N; ++n)
      for (int o = 0; o < s.OC; ++o) a_t[size_t(o) * s.N + n] = buf.dy[size_t(n) * s.OC + o];
    g.A = a_t.data();
    g.transA = dinp_tn;
    g.lda = s.N;
  }
  const size_t a_size = size_t(g.M) * g.K, b_size = size_t(g.K) * g.N;
  Aligned<uint16_t> a(a_size), b(b_size);
  cpu::to_bf16(a.data(), g.A, a_size);
  cpu::to_bf16(b.data(), g.B, b_size);
  for (auto _ : state) {
    cpu::gemm_bf16(g.transA, g.transB, g.M, g.N, g.K, a.data(), g.lda, b.data(), g.ldb, 0.0f, g.C,
                   g.N);
    benchmark::ClobberMemory();
  }
  set_gemm_counters(state, g);
}

// Each product of the bf16 linear layer on forge's AMX kernel (cpu/amx_gemm.h): B packed into
// the kernel's tiles on every call (counted), A packed inside amx_gemm from its rows (the
// forward, dout W) or columns (dout^T x), the forward with its bias; against gemm/onednn_bf16
// (and for the forward gemm/onednn_bf16_blocked, oneDNN with its reorder). The step hands the
// backward's A already in tiles (bf16_gradient_tiles, in the gradient's rounding pass), so
// there dout W packs nothing and dout^T x transposes from tiles. pack_only: B's packing alone.
void BM_GemmAmx(benchmark::State& state, LinearShape s, Pass p, bool pack_only) {
  if (!cpu::amx_tiles_available()) {
    state.SkipWithError("no usable AMX tiles on this CPU");
    return;
  }
  LinearBuffers buf(s);
  const GemmProblem g = buf.problem(s, p);
  if (!cpu::amx_gemm_fits(g.M, g.N, g.K)) {
    state.SkipWithError("not whole AMX tiles");
    return;
  }
  Aligned<uint16_t> a(size_t(g.M) * g.K), b(size_t(g.K) * g.N);
  cpu::to_bf16(a.data(), g.A, a.size());
  cpu::to_bf16(b.data(), g.B, b.size());
  const auto bias = random_floats(g.N, 9);
  Aligned<float> b_packed(cpu::amx_packed_floats(g.N, g.K)),
      a_room(cpu::amx_packed_floats(g.M, g.K));
  for (auto _ : state) {
    if (g.transB)
      cpu::amx_pack_b_transposed(b_packed.data(), b.data(), g.ldb, g.K, g.N);
    else
      cpu::amx_pack_b(b_packed.data(), b.data(), g.ldb, g.K, g.N);
    if (!pack_only)
      cpu::amx_gemm(cpu::amx_c(g.C, g.N, g.N),
                    {a.data(), g.lda, g.transA ? cpu::AmxLayout::kColumns : cpu::AmxLayout::kRows,
                     a_room.data()},
                    b_packed.data(), p == Pass::kForward ? bias.data() : nullptr, g.M, g.N, g.K);
    benchmark::ClobberMemory();
  }
  if (!pack_only) set_gemm_counters(state, g);
}

#ifdef FORGE_HAVE_DNNL
// oneDNN's matmul with B first reordered into the primitive's own layout (onednn_matmul's
// b_blocked), the reorder counted: against gemm/onednn_matmul and gemm/onednn_bf16 above, what
// the linear layers' forward gains from it. Below 1024 rows the call reads B as it is.
void BM_GemmOneDnnBlocked(benchmark::State& state, LinearShape s, Pass p, bool bf16) {
  if (bf16 && !cpu::native_bf16_available()) {
    state.SkipWithError("no bf16 dot products on this CPU");
    return;
  }
  LinearBuffers buf(s);
  const GemmProblem g = buf.problem(s, p);
  const auto type = bf16 ? cpu::OneDnnType::kBf16 : cpu::OneDnnType::kF32;
  const size_t a_size = size_t(g.M) * g.K, b_size = size_t(g.K) * g.N;
  Aligned<uint16_t> a16(bf16 ? a_size : 0), b16(bf16 ? b_size : 0);
  if (bf16) {
    cpu::to_bf16(a16.data(), g.A, a_size);
    cpu::to_bf16(b16.data(), g.B, b_size);
  }
  const void* A = bf16 ? static_cast<const void*>(a16.data()) : g.A;
  const void* B = bf16 ? static_cast<const void*>(b16.data()) : g.B;
  std::vector<uint8_t> blocked(cpu::onednn_blocked_b_bytes(type, g.K, g.N));
  for (auto _ : state) {
    cpu::onednn_matmul(type, g.transA, g.transB, g.M, g.N, g.K, A, g.lda, B, g.ldb, 0.0f, g.C, g.N,
                       nullptr, blocked.data());
    benchmark::ClobberMemory();
  }
  set_gemm_counters(state, g);
}
#endif

// The `bf16` profile's whole linear layer (conversions included), forward or backward, so
// that the difference from the GEMMs above is what the conversions cost.
void BM_LinearBf16(benchmark::State& state, LinearShape s, bool backward) {
  LinearBuffers buf(s);
  auto bias = random_floats(s.OC, 4);
  // As the step runs it: forward keeps inp's and the weight's operands, backward reads them.
  Aligned<float> db(s.OC), saved(cpu::bf16_linear_saved_floats(s.N, s.IC, s.OC)),
      scratch(cpu::bf16_linear_scratch_floats(s.N, s.IC, s.OC, true)),
      weight_operand(cpu::bf16_operand_floats(size_t(s.OC) * s.IC));
  cpu::bf16_linear_forward(buf.y.data(), saved.data(), buf.x.data(), buf.w.data(), bias.data(), s.N,
                           s.IC, s.OC, scratch.data(), false, weight_operand.data());
  for (auto _ : state) {
    if (backward)
      cpu::bf16_linear_backward(buf.dx.data(), buf.dw.data(), db.data(), buf.dy.data(),
                                buf.x.data(), buf.w.data(), saved.data(), s.N, s.IC, s.OC,
                                scratch.data(), weight_operand.data());
    else
      cpu::bf16_linear_forward(buf.y.data(), saved.data(), buf.x.data(), buf.w.data(), bias.data(),
                               s.N, s.IC, s.OC, scratch.data(), false, weight_operand.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * s.N * s.IC * s.OC * (backward ? 2 : 1) * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The bf16 linear layer's operand passes on their own: the input rounded to bf16 (forward),
// and dout rounded, transposed and summed into dbias in one read (backward). Bytes counted
// are the fp32 read plus the bf16 written, so GB/s compares with the machine's bandwidth.
void BM_Bf16Operands(benchmark::State& state, LinearShape s, bool gradient) {
  const int cols = gradient ? s.OC : s.IC;
  const size_t n = size_t(s.N) * cols;
  auto src = random_floats(n, 5);
  Aligned<uint16_t> a(n), at(gradient ? n : 0);
  Aligned<float> db(cols);
  for (auto _ : state) {
    if (gradient)
      cpu::bf16_gradient_operands(a.data(), at.data(), db.data(), src.data(), s.N, cols);
    else
      cpu::to_bf16(a.data(), src.data(), n);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(n) * (4 + 2 * (gradient ? 2 : 1)) * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// An MLP block's forward as the step runs it: GEMM, then an OpenMP kernel, then GEMM. With
// OpenBLAS two thread pools (its pthreads and the OpenMP team) take turns on the same cores
// and each spins while the other works; with oneDNN or forge's kernel one team does all.
void BM_MlpForwardSequence(benchmark::State& state, cpu::GemmBackend backend) {
  const int N = 2048, C = 384, H = 4 * C;  // small
  auto x = random_floats(size_t(N) * C, 1), w1 = random_floats(size_t(H) * C, 2, 0.02f),
       w2 = random_floats(size_t(C) * H, 3, 0.02f);
  Aligned<float> h(size_t(N) * H), g(size_t(N) * H), y(size_t(N) * C);
  for (auto _ : state) {
    cpu::gemm_with(backend, false, true, N, H, C, x.data(), C, w1.data(), C, 0.0f, h.data(), H);
    cpu::gelu_forward(g.data(), h.data(), h.size());
    cpu::gemm_with(backend, false, true, N, C, H, g.data(), H, w2.data(), H, 0.0f, y.data(), C);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * N * C * H * state.iterations(), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

// --- attention -----------------------------------------------------------------------

struct AttentionShape {
  const char* name;
  int B, T, C, NH;
};
const AttentionShape kAttention[] = {{"small", 8, 256, 384, 6}, {"124m", 4, 256, 768, 12}};

double attention_flops(const AttentionShape& a, bool backward) {
  // QK^T and PV, causal half: 2 GEMMs of T*T/2*hd MACs per head; backward has 5.
  const double per_gemm = 2.0 * a.B * a.NH * (a.T * (a.T + 1) / 2.0) * (a.C / a.NH);
  return per_gemm * (backward ? 5 : 2);
}

void BM_AttentionFused(benchmark::State& state, AttentionShape a, bool backward) {
  const size_t rows = size_t(a.B) * a.T;
  auto qkv = random_floats(rows * 3 * a.C, 5);
  auto dout = random_floats(rows * a.C, 6);
  Aligned<float> out(rows * a.C), lse(cpu::attention_saved_floats(a.B, a.T, a.C, a.NH)),
      dqkv(rows * 3 * a.C);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), a.B, a.T, a.C, a.NH);
  for (auto _ : state) {
    if (backward)
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), a.B,
                              a.T, a.C, a.NH);
    else
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), a.B, a.T, a.C, a.NH);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(attention_flops(a, backward) * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Whether this CPU runs the bf16 attention with these products; says why not to the state.
bool bf16_attention_runs(benchmark::State& state, cpu::Bf16Products products) {
  if (!cpu::attention_bf16_available()) {
    state.SkipWithError("no avx512_bf16 on this CPU");
    return false;
  }
  if (products == cpu::Bf16Products::kAmxTiles && !cpu::amx_tiles_available()) {
    state.SkipWithError("no usable AMX tiles on this CPU");
    return false;
  }
  return true;
}

// The bf16 kernels (the `bf16` profile's GPT-2 attention), on VDPBF16PS or AMX tiles, same
// counters.
void BM_AttentionBf16(benchmark::State& state, AttentionShape a, bool backward,
                      cpu::Bf16Products products) {
  if (!bf16_attention_runs(state, products)) return;
  const size_t rows = size_t(a.B) * a.T;
  const int threads = omp_get_max_threads();
  auto qkv = random_floats(rows * 3 * a.C, 5);
  auto dout = random_floats(rows * a.C, 6);
  Aligned<float> out(rows * a.C), lse(cpu::attention_bf16_saved_floats(a.B, a.T, a.NH)),
      dqkv(rows * 3 * a.C), ws(cpu::attention_bf16_workspace_floats(a.T, a.C / a.NH, threads));
  cpu::attention_forward_bf16(out.data(), lse.data(), qkv.data(), a.B, a.T, a.C, a.NH, ws.data(),
                              threads, products);
  for (auto _ : state) {
    if (backward)
      cpu::attention_backward_bf16(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                   a.B, a.T, a.C, a.NH, ws.data(), threads, products);
    else
      cpu::attention_forward_bf16(out.data(), lse.data(), qkv.data(), a.B, a.T, a.C, a.NH,
                                  ws.data(), threads, products);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(attention_flops(a, backward) * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The grouped-query attention (Llama) of the `fast` and `bf16` profiles, on llama-small's shape: 8
// query heads sharing 2 kv heads; and one sequence of multi-query attention (one kv head), where
// backward has a single (sequence, kv head) pair to share among the threads. Same counters
// as the GPT-2 kernels: the FLOPs count the query heads (not backward's recomputation).
struct GqaBenchShape {
  const char* name;
  forge::kernels::GqaShape s;
};
const GqaBenchShape kGqa[] = {{"llama", {8, 256, 8, 2, 64}}, {"mqa-b1", {1, 512, 8, 1, 64}}};

// bf16: the `bf16` profile's kernels (attention_bf16.h) with these products instead of the
// fp32 ones.
void BM_GqaAttention(benchmark::State& state, GqaBenchShape g, bool backward, bool bf16,
                     cpu::Bf16Products products) {
  if (bf16 && !bf16_attention_runs(state, products)) return;
  const forge::kernels::GqaShape& s = g.s;
  const size_t rows = size_t(s.B) * s.T, qw = size_t(s.NH) * s.hd, kvw = size_t(s.KVH) * s.hd;
  const int threads = omp_get_max_threads();
  auto q = random_floats(rows * qw, 5), k = random_floats(rows * kvw, 6),
       v = random_floats(rows * kvw, 7), dout = random_floats(rows * qw, 8);
  Aligned<float> out(rows * qw),
      saved(bf16 ? cpu::attention_bf16_saved_floats(s.B, s.T, s.NH)
                 : cpu::gqa_attention_saved_floats(s)),
      dq(rows * qw), dk(rows * kvw), dv(rows * kvw),
      ws(bf16 ? cpu::attention_bf16_workspace_floats(s.T, s.hd, threads) : 0);
  auto forward = [&] {
    if (bf16)
      cpu::gqa_attention_forward_bf16(out.data(), saved.data(), q.data(), k.data(), v.data(), s,
                                      ws.data(), threads, products);
    else
      cpu::gqa_attention_forward(out.data(), saved.data(), q.data(), k.data(), v.data(), s);
  };
  forward();
  for (auto _ : state) {
    if (!backward)
      forward();
    else if (bf16)
      cpu::gqa_attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                       k.data(), v.data(), out.data(), saved.data(), s, ws.data(),
                                       threads, products);
    else
      cpu::gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                  v.data(), out.data(), saved.data(), s);
    benchmark::ClobberMemory();
  }
  const AttentionShape as{g.name, s.B, s.T, s.NH * s.hd, s.NH};
  state.counters["GFLOP/s"] =
      benchmark::Counter(attention_flops(as, backward) * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The bf16 attention's two kinds of products, by benchmark name.
const std::pair<const char*, cpu::Bf16Products> kBf16Attention[] = {
    {"bf16", cpu::Bf16Products::kDotProducts}, {"bf16_amx", cpu::Bf16Products::kAmxTiles}};

// The unfused forward a framework runs: per head, scores = Q K^T by GEMM into a T x T
// matrix, masked softmax, out = P V by GEMM (full, not causally trimmed: GEMMs can't skip).
void BM_AttentionUnfused(benchmark::State& state, AttentionShape a) {
  const int hd = a.C / a.NH, T = a.T;
  const size_t rows = size_t(a.B) * T, C3 = 3 * size_t(a.C);
  auto qkv = random_floats(rows * C3, 5);
  Aligned<float> out(rows * a.C), probs(size_t(a.B) * a.NH * T * T);
  const float scale = 1.0f / std::sqrt(float(hd));
  for (auto _ : state) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < a.B; ++b)
      for (int h = 0; h < a.NH; ++h) {
        const float* q = qkv.data() + size_t(b) * T * C3 + h * hd;
        float* p = probs.data() + (size_t(b) * a.NH + h) * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, C3, q + a.C, C3,
                    0.0f, p, T);
        for (int i = 0; i < T; ++i) {
          float* row = p + size_t(i) * T;
          float m = row[0];
          for (int j = 1; j <= i; ++j) m = std::max(m, row[j]);
          float z = 0.0f;
          for (int j = 0; j <= i; ++j) z += row[j] = std::exp(row[j] - m);
          for (int j = 0; j <= i; ++j) row[j] /= z;
          for (int j = i + 1; j < T; ++j) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, q + 2 * a.C,
                    C3, 0.0f, out.data() + size_t(b) * T * a.C + h * hd, a.C);
      }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(attention_flops(a, false) * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// --- layernorm -----------------------------------------------------------------------

void BM_LayerNormFused(benchmark::State& state, int N, int C, bool backward) {
  auto x = random_floats(size_t(N) * C, 7), w = random_floats(C, 8), b = random_floats(C, 9),
       dy = random_floats(size_t(N) * C, 10);
  Aligned<float> y(size_t(N) * C), mean(N), rstd(N), dx(size_t(N) * C), dw(C), db(C);
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5f);
  for (auto _ : state) {
    if (backward)
      cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                              mean.data(), rstd.data(), N, C);
    else
      cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                             1e-5f);
    benchmark::ClobberMemory();
  }
  const double bytes = double(N) * C * 4 * (backward ? 3 : 2);
  state.counters["GB/s"] = benchmark::Counter(
      bytes * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The unfused forward: mean pass, variance pass, normalise pass, affine pass, each a
// separate sweep over the tensor as separate framework ops would make.
void BM_LayerNormUnfused(benchmark::State& state, int N, int C) {
  auto x = random_floats(size_t(N) * C, 7), w = random_floats(C, 8), b = random_floats(C, 9);
  Aligned<float> y(size_t(N) * C), mean(N), rstd(N);
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      float s = 0.0f;
      for (int c = 0; c < C; ++c) s += x[size_t(n) * C + c];
      mean[n] = s / C;
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      float s = 0.0f;
      for (int c = 0; c < C; ++c) {
        const float d = x[size_t(n) * C + c] - mean[n];
        s += d * d;
      }
      rstd[n] = 1.0f / std::sqrt(s / C + 1e-5f);
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) y[size_t(n) * C + c] = (x[size_t(n) * C + c] - mean[n]) * rstd[n];
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) y[size_t(n) * C + c] = y[size_t(n) * C + c] * w[c] + b[c];
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(N) * C * 8 * state.iterations(), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

// --- classifier ----------------------------------------------------------------------

void BM_ClassifierFused(benchmark::State& state, int N, int V, int Vp) {
  auto logits = random_floats(size_t(N) * Vp, 11, 2.0f);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 7919) % V;
  Aligned<float> lse(N), dlogits(size_t(N) * Vp);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        cpu::cross_entropy_forward(lse.data(), logits.data(), targets.data(), N, V, Vp));
    cpu::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), N, V, Vp,
                                1.0f);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(N) * Vp * 12 * state.iterations(), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

// The unfused sequence: softmax into a probability tensor, loss from it, gradient from it.
void BM_ClassifierUnfused(benchmark::State& state, int N, int V, int Vp) {
  auto logits = random_floats(size_t(N) * Vp, 11, 2.0f);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 7919) % V;
  Aligned<float> probs(size_t(N) * Vp), dlogits(size_t(N) * Vp);
  for (auto _ : state) {
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; ++n) {
      const float* x = logits.data() + size_t(n) * Vp;
      float* p = probs.data() + size_t(n) * Vp;
      float m = x[0];
      for (int v = 1; v < V; ++v) m = std::max(m, x[v]);
      float z = 0.0f;
      for (int v = 0; v < V; ++v) z += p[v] = std::exp(x[v] - m);
      for (int v = 0; v < V; ++v) p[v] /= z;
      loss -= std::log(p[targets[n]]);
    }
    benchmark::DoNotOptimize(loss);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* p = probs.data() + size_t(n) * Vp;
      float* d = dlogits.data() + size_t(n) * Vp;
      for (int v = 0; v < V; ++v) d[v] = (p[v] - (v == targets[n])) / N;
      for (int v = V; v < Vp; ++v) d[v] = 0.0f;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(N) * Vp * 12 * state.iterations(), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

// Every benchmark reports microseconds of wall time: the kernels run on an OpenMP team, so CPU
// time would add up the threads.
template <typename... Args>
void add(const std::string& name, Args&&... args) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

void register_all() {
  for (const LinearShape& s : kShapes)
    for (Pass p : {Pass::kForward, Pass::kDinp, Pass::kDweight}) {
      const std::string suffix = std::string(s.name) + "/" + pass_name(p);
      add("gemm/openblas/" + suffix, BM_GemmOpenBLAS, s, p);
#ifdef FORGE_HAVE_DNNL
      add("gemm/onednn_matmul/" + suffix, BM_GemmVia, s, p, cpu::GemmBackend::kOneDnnMatmul);
      add("gemm/onednn/" + suffix, BM_GemmVia, s, p, cpu::GemmBackend::kOneDNN);
      add("gemm/onednn_matmul_blocked/" + suffix, BM_GemmOneDnnBlocked, s, p, false);
      add("gemm/onednn_bf16_blocked/" + suffix, BM_GemmOneDnnBlocked, s, p, true);
#endif
      add("gemm/forge/" + suffix, BM_GemmVia, s, p, cpu::GemmBackend::kForge);
      add("gemm/onednn_bf16/" + suffix, BM_GemmBf16, s, p, false, false);
      add("gemm/amx_bf16/" + suffix, BM_GemmAmx, s, p, false);
      add("gemm/amx_bf16_pack/" + suffix, BM_GemmAmx, s, p, true);
    }
  for (const LinearShape& s : kShapes) {
    const std::string n = s.name;
    add("gemm/onednn_bf16/" + n + "/dweight_nn", BM_GemmBf16, s, Pass::kDweight, true, false);
    add("gemm/onednn_bf16/" + n + "/dinp_tn", BM_GemmBf16, s, Pass::kDinp, false, true);
    for (bool backward : {false, true})
      add("linear/bf16/" + n + (backward ? "/bwd" : "/fwd"), BM_LinearBf16, s, backward);
    for (bool gradient : {false, true})
      add("bf16_operands/" + n + (gradient ? "/gradient" : "/input"), BM_Bf16Operands, s, gradient);
  }
  for (cpu::GemmBackend b : {cpu::GemmBackend::kOpenBLAS, cpu::GemmBackend::kOneDNN,
                             cpu::GemmBackend::kOneDnnMatmul, cpu::GemmBackend::kForge})
    if (cpu::gemm_backend_available(b))
      add((std::string("mlp_fwd_sequence/") + cpu::gemm_backend_name(b) + "/small"),
          BM_MlpForwardSequence, b);
  for (const AttentionShape& a : kAttention) {
    const std::string n = a.name;
    add("attention/fused/fwd/" + n, BM_AttentionFused, a, false);
    add("attention/unfused/fwd/" + n, BM_AttentionUnfused, a);
    add("attention/fused/bwd/" + n, BM_AttentionFused, a, true);
    for (auto [kind, products] : kBf16Attention)
      for (bool backward : {false, true})
        add(std::string("attention/") + kind + "/" + (backward ? "bwd/" : "fwd/") + n,
            BM_AttentionBf16, a, backward, products);
  }
  for (const GqaBenchShape& g : kGqa) {
    for (bool backward : {false, true})
      add(std::string("attention/gqa_fused/") + (backward ? "bwd/" : "fwd/") + g.name,
          BM_GqaAttention, g, backward, false, cpu::Bf16Products::kDotProducts);
    for (auto [kind, products] : kBf16Attention)
      for (bool backward : {false, true})
        add(std::string("attention/gqa_") + kind + "/" + (backward ? "bwd/" : "fwd/") + g.name,
            BM_GqaAttention, g, backward, true, products);
  }
  for (auto [name, N, C] : {std::tuple{"small", 2048, 384}, std::tuple{"124m", 1024, 768}}) {
    const std::string n = name;
    add("layernorm/fused/fwd/" + n, BM_LayerNormFused, N, C, false);
    add("layernorm/unfused/fwd/" + n, BM_LayerNormUnfused, N, C);
    add("layernorm/fused/bwd/" + n, BM_LayerNormFused, N, C, true);
  }
  for (auto [name, N, V, Vp] :
       {std::tuple{"small", 2048, 256, 256}, std::tuple{"124m", 1024, 50257, 50304}}) {
    const std::string n = name;
    add("classifier/fused/" + n, BM_ClassifierFused, N, V, Vp);
    add("classifier/unfused/" + n, BM_ClassifierUnfused, N, V, Vp);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
