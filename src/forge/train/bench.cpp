#include "forge/train/bench.h"

#include <sys/resource.h>

#include <chrono>

#include "forge/core/rng.h"
#include "forge/core/threads.h"
#include "forge/model/model.h"
#include "forge/numerics/timed.h"
#include "forge/train/schedule.h"
#include "forge/train/training_setup.h"

namespace forge {

size_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

EngineTiming time_engine_steps(const Config& cfg, const std::string& profile, int warmup, int steps,
                               bool breakdown) {
  const int B = cfg.train.batch_size, T = cfg.train.seq_len;
  std::unique_ptr<Numerics> nx = make_numerics(profile);
  set_subnormals_flushed(nx->flushes_subnormals());
  TrainingSetup run(std::move(nx), breakdown, cfg.model, B, T, cfg.train.seed);
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  Rng rng(0);
  EngineTiming out;
  out.tokens_per_step = B * T;
  out.flops_per_token = run.model->train_flops_per_token(T);
  out.arithmetic = run.nx->arithmetic();
  out.matmul_dtype = run.nx->matmul_dtype();
  for (int s = 0; s < warmup + steps; ++s) {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>(rng.next_u64() % cfg.model.vocab_size);
      y[i] = static_cast<int32_t>(rng.next_u64() % cfg.model.vocab_size);
    }
    if (run.timer && s == warmup) run.timer->reset();
    const auto t0 = std::chrono::steady_clock::now();
    run.forward_backward(x.data(), y.data());
    run.update(optimizer_step(cfg.train, cfg.train.lr, s + 1));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) out.step_seconds.push_back(dt);
  }
  const TimedNumerics* timer = run.timer;
  if (timer) {
    for (const auto& [op, secs] : timer->seconds()) out.op_seconds[op] = secs / steps;
    for (const auto& [op, flops] : timer->gemm_flops()) out.op_gemm_flops[op] = flops / steps;
  }
  out.peak_rss_bytes = peak_rss_bytes();
  return out;
}

const std::map<std::string, std::string>& torch_malloc_tuning() {
  static const std::map<std::string, std::string> env = {{"MALLOC_MMAP_THRESHOLD_", "33554432"},
                                                         {"MALLOC_TRIM_THRESHOLD_", "17179869184"},
                                                         {"MALLOC_TOP_PAD_", "1073741824"}};
  return env;
}

}  // namespace forge
