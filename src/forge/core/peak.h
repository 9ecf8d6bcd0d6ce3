// The machine's arithmetic peak, measured in the same run as the figures it divides
// (BENCHMARKS.md): independent FMA chains on every thread, long enough to be steady.
#pragma once

namespace forge {

struct Peak {
  double fp32_flops = 0;  // FLOP/s, fused multiply-add = 2 FLOPs
  double bf16_flops = 0;  // FLOP/s of avx512_bf16 dot products (0 where absent)
  int threads = 0;
};

// seconds: how long each kind (fp32, bf16) is measured, split into five trials of which the
// fastest counts.
Peak measure_peak(int threads, double seconds = 0.25);

}  // namespace forge
