#include "forge/model/model.h"

#include "forge/core/error.h"
#include "forge/model/gpt2.h"
#include "forge/model/llama.h"

namespace forge {

std::unique_ptr<Model> make_model(const ModelConfig& config, int B, int T, Numerics& numerics) {
  if (config.family == "gpt2") return std::make_unique<Gpt2>(config, B, T, numerics);
  if (config.family == "llama") return std::make_unique<Llama>(config, B, T, numerics);
  fail("model.family: expected \"gpt2\" or \"llama\", got \"{}\"", config.family);
}

}  // namespace forge
