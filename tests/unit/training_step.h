// A model ready for training steps in a unit test: forge's TrainingSetup (train/
// training_setup.h: the profile, timed when asked, the model, its gradient and AdamW buffers)
// and a micro-batch of fixed tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "forge/numerics/numerics.h"
#include "forge/train/training_setup.h"

namespace forge_test {

struct TrainingStep : forge::TrainingSetup {
  TrainingStep(const forge::ModelConfig& cfg, const std::string& profile, int B_, int T_,
               uint64_t seed, bool timed = false)
      : forge::TrainingSetup(forge::make_numerics(profile), timed, cfg, B_, T_, seed),
        x(static_cast<size_t>(B_) * T_),
        y(x.size()) {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>((i * 37 + 11) % cfg.vocab_size);
      y[i] = static_cast<int32_t>((i * 53 + 7) % cfg.vocab_size);
    }
  }
  // Forward and backward of the fixed tokens; returns the loss.
  float forward_backward() { return TrainingSetup::forward_backward(x.data(), y.data()); }
  // Clip + AdamW as optimizer step `step` (1-based).
  void update(int step) { TrainingSetup::update({1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, step}); }

  std::vector<int32_t> x, y;
};

}  // namespace forge_test
