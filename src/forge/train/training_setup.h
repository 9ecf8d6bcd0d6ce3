// One process's training state for timing or testing the step outside `forge train`: the
// profile (wrapped in the TimedNumerics of `forge bench --breakdown` when asked), the model
// with its initial weights, and its gradient and AdamW buffers with their ParamRefs, all made
// once, so that the steps themselves only run. `forge bench`'s engine side and the unit tests
// of whole steps build it; `forge train` keeps its own (gradient accumulation, data parallel).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "forge/core/float_buffer.h"
#include "forge/model/model.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/timed.h"

namespace forge {

struct TrainingSetup {
  TrainingSetup(std::unique_ptr<Numerics> numerics, bool timed, const ModelConfig& config, int B,
                int T, uint64_t seed);
  // Forward and backward of one micro-batch (the gradients into grads); returns the loss.
  float forward_backward(const int32_t* tokens, const int32_t* targets);
  // Clip + AdamW as optimizer step `hp.step`.
  void update(const OptimizerStep& hp);

  std::unique_ptr<Numerics> nx;
  TimedNumerics* timer;  // null unless timed
  std::unique_ptr<Model> model;
  int B, T;
  FloatBuffer grads, m, v;
  std::vector<ParamRef> refs;
};

}  // namespace forge
