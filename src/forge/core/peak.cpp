#include "forge/core/peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace forge {

namespace {

using Clock = std::chrono::steady_clock;

volatile double g_sink;  // where the timed kernels' results go

// 12 independent accumulators hide the FMA latency (4 cycles x 2 ports + slack).
#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vset(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
#else
using Vec = float;
constexpr int kLanes = 1;
inline Vec vset(float x) { return x; }
inline Vec vfma(Vec a, Vec b, Vec c) { return a * b + c; }
#endif

// The lanes of a vector (or a float) added through memory: _mm512_reduce_add_ps makes g++ 12
// warn inside its own header.
template <typename V>
float vsum(V v) {
  float lanes[sizeof(V) / sizeof(float)];
  std::memcpy(lanes, &v, sizeof v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

double fma_kernel(long iters) {
  Vec acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = vset(0.001f * i);
  const Vec a = vset(0.999999f), b = vset(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = vfma(acc[i], a, b);
  float s = 0;
  for (int i = 0; i < 12; ++i) s += vsum(acc[i]);
  return s;
}

#if defined(__AVX512BF16__)
// 24 chains: vdpbf16ps has a longer latency than the FMA, and on the machine where this was set
// 12 chains read about a tenth under 16 or more. How many it can issue a cycle differs by CPU
// (a later Xeon read half its fp32 FMA rate with 24), so the reading is the machine's own.
constexpr int kBf16Chains = 24;
double bf16_kernel(long iters) {
  __m512 acc[kBf16Chains];
  for (int i = 0; i < kBf16Chains; ++i) acc[i] = _mm512_set1_ps(0.0f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kBf16Chains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, a);
  }
  __m512 total = acc[0];
  for (int i = 1; i < kBf16Chains; ++i) total = _mm512_add_ps(total, acc[i]);
  return vsum(total);
}
#endif

// Seconds one pass of the kernel takes on every thread.
template <typename Kernel>
double timed_pass(Kernel kernel, int threads, long iters) {
  double sink = 0;
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  sink += kernel(iters);
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  g_sink = sink;  // so that the kernel cannot be optimised away
  return dt;
}

// The best rate of `trials` passes of about `seconds` each. The pass length is found once, by
// doubling a short pass until it takes a quarter of that and scaling it up, and kept for every
// trial. Growing each trial from a short pass again took about twice the window: a one-step
// `forge train` (which measures at start-up and at the end) spent 2.6 s in these loops, now
// 1.4 s (perf samples).
template <typename Kernel>
double measure(Kernel kernel, double flops_per_iter_per_thread, int threads, double seconds,
               int trials) {
  long iters = 1 << 16;
  double dt = timed_pass(kernel, threads, iters);
  while (dt < seconds / 4) {
    iters *= 2;
    dt = timed_pass(kernel, threads, iters);
  }
  iters = std::max(iters, static_cast<long>(static_cast<double>(iters) * 1.1 * seconds / dt));
  double best = 0;
  for (int t = 0; t < trials; ++t) {
    dt = timed_pass(kernel, threads, iters);
    best = std::max(best, flops_per_iter_per_thread * static_cast<double>(iters) * threads / dt);
  }
  return best;
}

}  // namespace

Peak measure_peak(int threads, double seconds) {
  // A peak is the best the cores do: on a shared host one window can lose its time slices
  // (this project's machines have measured 222 GFLOP/s in one run and 447 in the next), so
  // the window is split into kTrials and the fastest trial counts.
  constexpr int kTrials = 5;
  Peak p;
  p.threads = threads;
  p.fp32_flops = measure(fma_kernel, 12.0 * kLanes * 2, threads, seconds / kTrials, kTrials);
#if defined(__AVX512BF16__)
  // vdpbf16ps: 16 lanes x 2 products x (multiply + add)
  p.bf16_flops = measure(bf16_kernel, kBf16Chains * 16.0 * 4, threads, seconds / kTrials, kTrials);
#endif
  return p;
}

}  // namespace forge
