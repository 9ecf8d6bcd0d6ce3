#include "forge/model/model.h"

#include "forge/core/error.h"
#include "forge/model/gpt2.h"

namespace forge {

std::unique_ptr<Model> make_model(const ModelConfig& config, int B, int T, Numerics& numerics) {
  if (config.family == "gpt2") return std::make_unique<Gpt2>(config, B, T, numerics);
  fail("model.family: expected \"gpt2\" (llama is not built yet), got \"{}\"", config.family);
}

}  // namespace forge
