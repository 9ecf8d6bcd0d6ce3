#include "forge/model/model.h"

#include <fmt/format.h>

#include "forge/core/error.h"
#include "forge/model/gpt2.h"
#include "forge/model/llama.h"

namespace forge {

void Model::record(std::string_view name, const float* data, std::initializer_list<int64_t> shape) {
  if (recorder_) recorder_->record(std::string(name), data, std::vector<int64_t>(shape));
}

void Model::record(LayerDumpName where, std::string_view name, const float* data,
                   std::initializer_list<int64_t> shape) {
  if (recorder_)
    recorder_->record(fmt::format("{}.h.{}.{}", where.kind, where.layer, name), data,
                      std::vector<int64_t>(shape));
}

StepShape step_shape(const ModelConfig& config, int B, int T, const ParamLayout& layout) {
  StepShape s;
  s.B = B;
  s.T = T;
  s.C = config.n_embd;
  s.NH = config.n_head;
  s.V = config.vocab_size;
  s.Vp = config.vocab_rows();
  s.L = config.n_layer;
  s.n_kv_head = config.kv_heads();
  s.head_dim = config.head_dim();
  s.ffn = config.ffn_width();
  s.llama = config.family == "llama";
  s.linear_weights = layout.linear_weights();
  s.linear_weight_floats = layout.linear_weight_floats();
  s.linear_shapes = layout.linear_weight_shapes();
  return s;
}

std::unique_ptr<Model> make_model(const ModelConfig& config, int B, int T, Numerics& numerics) {
  if (config.family == "gpt2") return std::make_unique<Gpt2>(config, B, T, numerics);
  if (config.family == "llama") return std::make_unique<Llama>(config, B, T, numerics);
  fail("model.family: expected \"gpt2\" or \"llama\", got \"{}\"", config.family);
}

}  // namespace forge
