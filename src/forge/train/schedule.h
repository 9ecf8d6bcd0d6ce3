// Learning-rate schedule: linear warm-up, then cosine decay to a floor (nanoGPT's).
#pragma once

#include <algorithm>
#include <cmath>

#include "forge/io/config.h"
#include "forge/numerics/numerics.h"

namespace forge {

// step is 0-based. The PyTorch reference computes the same double.
inline double learning_rate(const TrainConfig& t, int step) {
  if (step < t.warmup_steps) return t.lr * (step + 1) / t.warmup_steps;
  const double ratio =
      static_cast<double>(step - t.warmup_steps) / std::max(1, t.steps - t.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, ratio)));
  return t.min_lr + coeff * (t.lr - t.min_lr);
}

// AdamW's and the clip's settings of the config at learning rate lr, for optimizer step `step`
// (1-based).
inline OptimizerStep optimizer_step(const TrainConfig& t, double lr, int64_t step) {
  return {lr, t.beta1, t.beta2, t.eps, t.weight_decay, t.grad_clip, step};
}

}  // namespace forge
