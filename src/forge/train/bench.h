// The engine side of `forge bench`: the real training step (forward, backward, clipping,
// AdamW) on random tokens, timed step by step after a warm-up.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "forge/io/config.h"

namespace forge {

struct EngineTiming {
  std::vector<double> step_seconds;
  int tokens_per_step = 0;
  double flops_per_token = 0;
  size_t peak_rss_bytes = 0;
  std::map<std::string, double> op_seconds;     // per step, when a breakdown was asked for
  std::map<std::string, double> op_gemm_flops;  // per step, of the ops holding GEMMs, likewise
  std::string arithmetic;                       // Numerics::arithmetic() of the profile run
  std::string matmul_dtype;                     // Numerics::matmul_dtype(): "fp32" or "bf16"
};

EngineTiming time_engine_steps(const Config& config, const std::string& profile, int warmup,
                               int steps, bool breakdown);
size_t peak_rss_bytes();  // of this process so far

// BENCHMARKS.md's tuned settings for the PyTorch side (glibc malloc keeps large activations
// instead of returning them to the kernel every step): the environment of `forge bench`'s
// reference processes and of the perf gate's reference run.
const std::map<std::string, std::string>& torch_malloc_tuning();

}  // namespace forge
