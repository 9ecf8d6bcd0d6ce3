// Learning-rate schedule: linear warm-up, then cosine decay to a floor (nanoGPT's).
#pragma once

#include <algorithm>
#include <cmath>

#include "forge/io/config.h"

namespace forge {

// step is 0-based. The PyTorch reference computes the same double.
inline double learning_rate(const TrainConfig& t, int step) {
  if (step < t.warmup_steps) return t.lr * (step + 1) / t.warmup_steps;
  const double ratio =
      static_cast<double>(step - t.warmup_steps) / std::max(1, t.steps - t.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, ratio)));
  return t.min_lr + coeff * (t.lr - t.min_lr);
}

}  // namespace forge
