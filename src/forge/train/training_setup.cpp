#include "forge/train/training_setup.h"

#include "forge/model/params.h"

namespace forge {

TrainingSetup::TrainingSetup(std::unique_ptr<Numerics> numerics, bool timed,
                             const ModelConfig& config, int B_, int T_, uint64_t seed)
    : nx(std::move(numerics)),
      timer(timed ? TimedNumerics::wrap(nx) : nullptr),
      model(make_model(config, B_, T_, *nx)),
      B(B_),
      T(T_) {
  model->init_weights(seed);
  const ParamLayout& layout = model->layout();
  grads.resize(layout.total_floats());
  m.resize(layout.total_floats());
  v.resize(layout.total_floats());
  refs = param_refs(layout, model->params(), grads.data(), m.data(), v.data());
}

float TrainingSetup::forward_backward(const int32_t* tokens, const int32_t* targets) {
  const float loss = model->forward(tokens, targets, B, T);
  model->backward(1.0f, grads.data());
  return loss;
}

void TrainingSetup::update(const OptimizerStep& hp) {
  nx->optimizer_step(refs.data(), static_cast<int>(refs.size()), hp);
}

}  // namespace forge
