#include "forge/train/loaded_model.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/train/checkpoint.h"

namespace fs = std::filesystem;

namespace forge {

namespace {

// A folder written by transformers' save_pretrained (or `forge export --hf`).
Config config_from_hf(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", path, e.what());
  }
  if (j.value("model_type", "") != "gpt2")
    fail("{}: field 'model_type': expected \"gpt2\", got {}", path, j.value("model_type", "none"));
  Config c;
  c.path = path;
  try {
    c.model.family = "gpt2";
    c.model.vocab_size = j.at("vocab_size").get<int>();
    c.model.block_size = j.at("n_positions").get<int>();
    c.model.n_embd = j.at("n_embd").get<int>();
    c.model.n_layer = j.at("n_layer").get<int>();
    c.model.n_head = j.at("n_head").get<int>();
    c.model.norm_eps = j.value("layer_norm_epsilon", 1e-5);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", path, e.what());
  }
  if (j.value("activation_function", "gelu_new") != "gelu_new" || !j.value("n_inner", nlohmann::json()).is_null())
    fail("{}: field 'activation_function'/'n_inner': forge's GPT-2 is gelu_new with n_inner = 4*n_embd", path);
  c.train.seq_len = c.model.block_size;
  c.train.batch_size = 1;
  return c;
}

}  // namespace

LoadedModel load_trained_model(const std::string& checkpoint, const std::string& config_path,
                               int B, int T, const std::string& numerics) {
  LoadedModel lm;
  if (!config_path.empty()) {
    lm.config = load_config(config_path);
  } else if (fs::is_directory(checkpoint) && !fs::exists(checkpoint + "/state.json") &&
             fs::exists(checkpoint + "/config.json")) {
    lm.config = config_from_hf(checkpoint + "/config.json");
  } else if (fs::is_directory(checkpoint)) {
    const std::string state = checkpoint + "/state.json";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(state));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: malformed JSON: {}", state, e.what());
    }
    if (!j.contains("config")) fail("{}: field 'config' is missing", state);
    lm.config = parse_config(j["config"], state);
  } else if (!fs::exists(checkpoint)) {
    fail("{}: no such checkpoint", checkpoint);
  } else {
    fail("{}: a safetensors file needs --config to say which model it holds", checkpoint);
  }
  validate_config(lm.config);
  if (B <= 0) B = lm.config.train.batch_size;
  if (T <= 0) T = lm.config.train.seq_len;
  T = std::min(T, lm.config.model.block_size);
  lm.numerics = make_numerics(numerics);
  lm.model = make_model(lm.config.model, B, T, *lm.numerics);
  load_params(model_file_of(checkpoint), lm.model->layout(), lm.model->params());
  return lm;
}

}  // namespace forge
