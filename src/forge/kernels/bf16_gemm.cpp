#include "forge/kernels/bf16_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#ifdef FORGE_HAVE_DNNL
#include <dnnl.h>
#endif

#include "forge/core/error.h"
#include "forge/kernels/cpu/dispatch.h"
#include "forge/kernels/gemm.h"

namespace forge::kernels {

namespace scalar {

template <typename Real>
void bf16_linear_forward(Real* out, const float* inp, const float* weight, const float* bias,
                         int N, int IC, int OC) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      Real acc = bias ? Real(bias[o]) : Real(0);
      for (int i = 0; i < IC; ++i)
        acc += Real(bf16_round(inp[static_cast<size_t>(n) * IC + i])) *
               Real(bf16_round(weight[static_cast<size_t>(o) * IC + i]));
      out[static_cast<size_t>(n) * OC + o] = acc;
    }
}

template <typename Real>
void bf16_linear_backward(Real* dinp, Real* dweight, Real* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int IC, int OC) {
  auto g = [&](int n, int o) { return Real(bf16_round(dout[static_cast<size_t>(n) * OC + o])); };
  if (dinp)
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < IC; ++i) {
        Real acc = 0;
        for (int o = 0; o < OC; ++o)
          acc += g(n, o) * Real(bf16_round(weight[static_cast<size_t>(o) * IC + i]));
        dinp[static_cast<size_t>(n) * IC + i] = acc;
      }
  for (int o = 0; o < OC; ++o)
    for (int i = 0; i < IC; ++i) {
      Real acc = 0;
      for (int n = 0; n < N; ++n)
        acc += g(n, o) * Real(bf16_round(inp[static_cast<size_t>(n) * IC + i]));
      dweight[static_cast<size_t>(o) * IC + i] = acc;
    }
  // The bias gradient sums the unrounded fp32 gradient: it is no matmul operand.
  if (dbias)
    for (int o = 0; o < OC; ++o) {
      Real acc = 0;
      for (int n = 0; n < N; ++n) acc += Real(dout[static_cast<size_t>(n) * OC + o]);
      dbias[o] = acc;
    }
}

template void bf16_linear_forward<double>(double*, const float*, const float*, const float*, int,
                                          int, int);
template void bf16_linear_backward<double>(double*, double*, double*, const float*, const float*,
                                           const float*, int, int, int);

}  // namespace scalar

namespace cpu {

namespace {

// The rounding is memory-bound; below this many elements a thread team costs more than it saves.
constexpr size_t kParallelMin = size_t{1} << 16;

// 8 lanes of scalar::bf16_bits, left in the high half of each 32-bit lane (the low half zero),
// i.e. the bf16 value as an fp32 bit pattern.
__attribute__((target("avx2"))) inline __m256i round_lanes_avx2(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  // NaN: carrying into the exponent could turn a NaN whose payload sits in the low bits into
  // Inf, so NaNs take the truncated value with the quiet bit set instead.
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
  return _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
}

__attribute__((target("avx2"))) void round_bf16_avx2(float* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_castsi256_ps(round_lanes_avx2(_mm256_loadu_ps(in + i))));
  for (; i < n; ++i) out[i] = scalar::bf16_round(in[i]);
}

__attribute__((target("avx2"))) void to_bf16_avx2(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_srli_epi32(round_lanes_avx2(_mm256_loadu_ps(in + i)), 16);
    const __m256i b = _mm256_srli_epi32(round_lanes_avx2(_mm256_loadu_ps(in + i + 8)), 16);
    // packus works per 128-bit lane: a0 b0 a1 b1 -> restore a0 a1 b0 b1.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = scalar::bf16_bits(in[i]);
}

void round_bf16_generic(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = scalar::bf16_round(in[i]);
}

void to_bf16_generic(uint16_t* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = scalar::bf16_bits(in[i]);
}

bool use_avx2() { return active_isa() != Isa::kGeneric; }

// Splits [0, n) over the OpenMP team in chunks of whole cache lines.
template <typename F>
void parallel_chunks(size_t n, F&& f) {
  if (n < kParallelMin) {
    f(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const size_t parts = static_cast<size_t>(omp_get_num_threads());
    const size_t id = static_cast<size_t>(omp_get_thread_num());
    const size_t per = ((n + parts - 1) / parts + 15) / 16 * 16;
    const size_t lo = std::min(n, id * per), hi = std::min(n, lo + per);
    if (lo < hi) f(lo, hi);
  }
}

}  // namespace

void round_bf16(float* out, const float* in, size_t n) {
  const bool avx2 = use_avx2();
  parallel_chunks(n, [&](size_t lo, size_t hi) {
    if (avx2)
      round_bf16_avx2(out + lo, in + lo, hi - lo);
    else
      round_bf16_generic(out + lo, in + lo, hi - lo);
  });
}

void to_bf16(uint16_t* out, const float* in, size_t n) {
  const bool avx2 = use_avx2();
  parallel_chunks(n, [&](size_t lo, size_t hi) {
    if (avx2)
      to_bf16_avx2(out + lo, in + lo, hi - lo);
    else
      to_bf16_generic(out + lo, in + lo, hi - lo);
  });
}

size_t bf16_linear_scratch_floats(int N, int IC, int OC) {
  const size_t n = static_cast<size_t>(N), ic = static_cast<size_t>(IC),
               oc = static_cast<size_t>(OC);
  return n * ic + n * oc + oc * ic;
}

#ifdef FORGE_HAVE_DNNL

namespace {

// One oneDNN matmul primitive per (shape, strides, beta), made on first use and kept: a
// training step repeats the same few shapes, so after the first step nothing is created.
struct MatmulKey {
  bool ta, tb;
  int M, N, K, lda, ldb, ldc;
  bool accumulate;
  auto operator<=>(const MatmulKey&) const = default;
};

struct Matmul {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
};

void check(dnnl_status_t st, const char* what) {
  FORGE_CHECK(st == dnnl_success, "oneDNN {} failed with status {}", what, static_cast<int>(st));
}

class MatmulCache {
 public:
  MatmulCache() {
    check(dnnl_engine_create(&engine_, dnnl_cpu, 0), "engine_create");
    check(dnnl_stream_create(&stream_, engine_, dnnl_stream_default_flags), "stream_create");
  }
  ~MatmulCache() {
    for (auto& [key, m] : cache_) {
      dnnl_memory_destroy(m.a);
      dnnl_memory_destroy(m.b);
      dnnl_memory_destroy(m.c);
      dnnl_primitive_destroy(m.prim);
    }
    dnnl_stream_destroy(stream_);
    dnnl_engine_destroy(engine_);
  }

  void run(const MatmulKey& k, const uint16_t* A, const uint16_t* B, float* C) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(k);
    if (it == cache_.end()) it = cache_.emplace(k, make(k)).first;
    const Matmul& m = it->second;
    check(dnnl_memory_set_data_handle(m.a, const_cast<uint16_t*>(A)), "set_data_handle");
    check(dnnl_memory_set_data_handle(m.b, const_cast<uint16_t*>(B)), "set_data_handle");
    check(dnnl_memory_set_data_handle(m.c, C), "set_data_handle");
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, m.a}, {DNNL_ARG_WEIGHTS, m.b}, {DNNL_ARG_DST, m.c}};
    check(dnnl_primitive_execute(m.prim, stream_, 3, args), "matmul execute");
    check(dnnl_stream_wait(stream_), "stream_wait");
  }

 private:
  Matmul make(const MatmulKey& k) {
    // Transposes are strides: op(A) is [M, K] whether A is stored [M, K] or [K, M].
    const dnnl_dims_t a_dims = {k.M, k.K}, b_dims = {k.K, k.N}, c_dims = {k.M, k.N};
    const dnnl_dims_t a_str = {k.ta ? 1 : k.lda, k.ta ? k.lda : 1};
    const dnnl_dims_t b_str = {k.tb ? 1 : k.ldb, k.tb ? k.ldb : 1};
    const dnnl_dims_t c_str = {k.ldc, 1};
    dnnl_memory_desc_t a_md, b_md, c_md;
    check(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_bf16, a_str), "memory_desc A");
    check(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_bf16, b_str), "memory_desc B");
    check(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str), "memory_desc C");
    dnnl_matmul_desc_t desc;
    check(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md), "matmul_desc_init");
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attr_create");
    dnnl_post_ops_t ops = nullptr;
    if (k.accumulate) {  // beta = 1: C += A B, as a sum post-op onto the destination
      check(dnnl_post_ops_create(&ops), "post_ops_create");
      check(dnnl_post_ops_append_sum(ops, 1.0f), "append_sum");
      check(dnnl_primitive_attr_set_post_ops(attr, ops), "set_post_ops");
    }
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &desc, attr, engine_, nullptr), "matmul primitive_desc");
    Matmul m;
    check(dnnl_primitive_create(&m.prim, pd), "matmul primitive_create");
    check(dnnl_memory_create(&m.a, &a_md, engine_, DNNL_MEMORY_NONE), "memory A");
    check(dnnl_memory_create(&m.b, &b_md, engine_, DNNL_MEMORY_NONE), "memory B");
    check(dnnl_memory_create(&m.c, &c_md, engine_, DNNL_MEMORY_NONE), "memory C");
    dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    dnnl_primitive_attr_destroy(attr);
    return m;
  }

  std::mutex mu_;
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  std::map<MatmulKey, Matmul> cache_;
};

MatmulCache& matmuls() {
  static MatmulCache cache;
  return cache;
}

}  // namespace

bool native_bf16_available() {
  static const bool yes = [] {
    if (const char* v = std::getenv("FORGE_BF16_NATIVE"); v && std::string(v) == "0") return false;
    return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_bf16;
  }();
  return yes;
}

void gemm_bf16(bool transA, bool transB, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  FORGE_CHECK(beta == 0.0f || beta == 1.0f, "gemm_bf16: beta must be 0 or 1, got {}", beta);
  FORGE_CHECK(native_bf16_available(), "gemm_bf16 without bf16 instructions");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta C
    if (beta == 0.0f)
      for (int i = 0; i < M; ++i) std::fill(C + static_cast<size_t>(i) * ldc, C + static_cast<size_t>(i) * ldc + N, 0.0f);
    return;
  }
  matmuls().run({transA, transB, M, N, K, lda, ldb, ldc, beta != 0.0f}, A, B, C);
}

#else

bool native_bf16_available() { return false; }

void gemm_bf16(bool, bool, int, int, int, const uint16_t*, int, const uint16_t*, int, float,
               float*, int) {
  fail("gemm_bf16: forge was built without oneDNN");
}

#endif

void bf16_linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                         int N, int IC, int OC, float* scratch) {
  const size_t n = static_cast<size_t>(N), ic = static_cast<size_t>(IC),
               oc = static_cast<size_t>(OC);
  if (native_bf16_available()) {
    uint16_t* xb = reinterpret_cast<uint16_t*>(scratch);
    uint16_t* wb = xb + n * ic;
    to_bf16(xb, inp, n * ic);
    to_bf16(wb, weight, oc * ic);
    float beta = 0.0f;
    if (bias) {
      for (size_t r = 0; r < n; ++r) std::copy(bias, bias + oc, out + r * oc);
      beta = 1.0f;
    }
    gemm_bf16(false, true, N, OC, IC, xb, IC, wb, IC, beta, out, OC);
    return;
  }
  float* xb = scratch;
  float* wb = scratch + n * ic;
  round_bf16(xb, inp, n * ic);
  round_bf16(wb, weight, oc * ic);
  float beta = 0.0f;
  if (bias) {
    for (size_t r = 0; r < n; ++r) std::copy(bias, bias + oc, out + r * oc);
    beta = 1.0f;
  }
  gemm(false, true, N, OC, IC, xb, IC, wb, IC, beta, out, OC);
}

void bf16_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int IC, int OC,
                          float* scratch) {
  const size_t n = static_cast<size_t>(N), ic = static_cast<size_t>(IC),
               oc = static_cast<size_t>(OC);
  if (native_bf16_available()) {
    uint16_t* gb = reinterpret_cast<uint16_t*>(scratch);
    uint16_t* xb = gb + n * oc;
    uint16_t* wb = xb + n * ic;
    to_bf16(gb, dout, n * oc);
    if (dinp) {
      to_bf16(wb, weight, oc * ic);
      gemm_bf16(false, false, N, IC, OC, gb, OC, wb, IC, 0.0f, dinp, IC);  // dout @ W
    }
    to_bf16(xb, inp, n * ic);
    gemm_bf16(true, false, OC, IC, N, gb, OC, xb, IC, 0.0f, dweight, IC);  // dout^T @ inp
  } else {
    float* gb = scratch;
    float* xb = gb + n * oc;
    float* wb = xb + n * ic;
    round_bf16(gb, dout, n * oc);
    if (dinp) {
    round_bf16(wb, weight, oc * ic);
      gemm(false, false, N, IC, OC, gb, OC, wb, IC, 0.0f, dinp, IC);  // dout @ W
    }
    round_bf16(xb, inp, n * ic);
    gemm(true, false, OC, IC, N, gb, OC, xb, IC, 0.0f, dweight, IC);  // dout^T @ inp
  }
  // The bias gradient sums the unrounded fp32 gradient: it is no matmul operand.
  if (dbias) {
    std::fill(dbias, dbias + oc, 0.0f);
    for (size_t r = 0; r < n; ++r) {
      const float* g = dout + r * oc;
      for (size_t o = 0; o < oc; ++o) dbias[o] += g[o];
    }
  }
}

}  // namespace cpu
}  // namespace forge::kernels
