#include "forge/train/bench.h"

#include <sys/resource.h>

#include <chrono>

#include "forge/core/rng.h"
#include "forge/core/threads.h"
#include "forge/model/model.h"
#include "forge/numerics/timed.h"

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
  TimedNumerics* timer = breakdown ? TimedNumerics::wrap(nx) : nullptr;
  auto model = make_model(cfg.model, B, T, *nx);
  model->init_weights(cfg.train.seed);
  const ParamLayout& layout = model->layout();
  FloatBuffer grads(layout.total_floats()), m(layout.total_floats()), v(layout.total_floats());
  std::vector<ParamRef> refs =
      param_refs(layout, model->params(), grads.data(), m.data(), v.data());
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  Rng rng(0);
  EngineTiming out;
  out.tokens_per_step = B * T;
  out.flops_per_token = model->train_flops_per_token(T);
  out.arithmetic = nx->arithmetic();
  for (int s = 0; s < warmup + steps; ++s) {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>(rng.next_u64() % cfg.model.vocab_size);
      y[i] = static_cast<int32_t>(rng.next_u64() % cfg.model.vocab_size);
    }
    if (timer && s == warmup) timer->reset();
    const auto t0 = std::chrono::steady_clock::now();
    model->forward(x.data(), y.data(), B, T);
    model->backward(1.0f, grads.data());
    OptimizerStep hp{cfg.train.lr,  cfg.train.beta1,        cfg.train.beta2,
                     cfg.train.eps, cfg.train.weight_decay, cfg.train.grad_clip,
                     s + 1};
    nx->optimizer_step(refs.data(), static_cast<int>(refs.size()), hp);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) out.step_seconds.push_back(dt);
  }
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
