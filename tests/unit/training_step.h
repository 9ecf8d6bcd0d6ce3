// A model ready for training steps in a unit test: the profile (timed as `forge bench
// --breakdown` times it, when asked), the model, its gradient and AdamW buffers and a
// micro-batch of fixed tokens, all made once, so that the steps themselves only run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forge/core/float_buffer.h"
#include "forge/model/model.h"
#include "forge/model/params.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/timed.h"

namespace forge_test {

struct TrainingStep {
  TrainingStep(const forge::ModelConfig& cfg, const std::string& profile, int B_, int T_,
               uint64_t seed, bool timed = false)
      : nx(forge::make_numerics(profile)),
        timer(timed ? forge::TimedNumerics::wrap(nx) : nullptr),
        model(forge::make_model(cfg, B_, T_, *nx)),
        B(B_),
        T(T_) {
    model->init_weights(seed);
    const forge::ParamLayout& layout = model->layout();
    grads.resize(layout.total_floats());
    m.resize(layout.total_floats());
    v.resize(layout.total_floats());
    refs = forge::param_refs(layout, model->params(), grads.data(), m.data(), v.data());
    x.resize(static_cast<size_t>(B) * T);
    y.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>((i * 37 + 11) % cfg.vocab_size);
      y[i] = static_cast<int32_t>((i * 53 + 7) % cfg.vocab_size);
    }
  }
  // Forward and backward (the gradients into grads); returns the loss.
  float forward_backward() {
    const float loss = model->forward(x.data(), y.data(), B, T);
    model->backward(1.0f, grads.data());
    return loss;
  }
  // Clip + AdamW as optimizer step `step` (1-based).
  void update(int step) {
    nx->optimizer_step(refs.data(), static_cast<int>(refs.size()),
                       {1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, step});
  }

  std::unique_ptr<forge::Numerics> nx;
  forge::TimedNumerics* timer;  // null unless timed
  std::unique_ptr<forge::Model> model;
  int B, T;
  forge::FloatBuffer grads, m, v;
  std::vector<forge::ParamRef> refs;
  std::vector<int32_t> x, y;
};

}  // namespace forge_test
