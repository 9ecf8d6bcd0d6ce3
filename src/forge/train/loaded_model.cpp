#include "forge/train/loaded_model.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "forge/core/error.h"
#include "forge/core/threads.h"
#include "forge/io/atomic_file.h"
#include "forge/io/hf_config.h"
#include "forge/kernels/attention.h"
#include "forge/train/checkpoint.h"

namespace fs = std::filesystem;

namespace forge {

LoadedModel load_trained_model(const std::string& path, const std::string& config_path, int B,
                               int T, const std::string& numerics) {
  const std::string checkpoint = resolve_checkpoint(path);
  LoadedModel lm;
  if (!config_path.empty()) {
    lm.config = load_config(config_path);
  } else if (fs::is_directory(checkpoint) && !fs::exists(checkpoint + "/state.json") &&
             fs::exists(checkpoint + "/config.json")) {
    // A folder written by transformers' save_pretrained or `forge export --hf`.
    lm.config = load_hf_config(checkpoint + "/config.json");
    lm.hf = true;
  } else if (fs::is_directory(checkpoint)) {
    // state.json as --resume reads it: its format and version checked.
    lm.config = parse_config(read_checkpoint_state(checkpoint).config, checkpoint + "/state.json");
  } else if (!fs::exists(checkpoint)) {
    fail("{}: no such checkpoint", checkpoint);
  } else {
    fail("{}: a safetensors file needs --config to say which model it holds", checkpoint);
  }
  validate_config(lm.config);
  if (B <= 0) B = lm.config.train.batch_size;
  if (T <= 0) T = lm.config.train.seq_len;
  T = std::min(T, lm.config.model.block_size);
  const bool too_wide =
      numerics == "fast" && lm.config.model.head_dim() > kernels::cpu::kMaxHeadDim;
  lm.numerics = make_numerics(too_wide ? "torch-cpu" : numerics);
  set_subnormals_flushed(lm.numerics->flushes_subnormals());
  lm.model = make_model(lm.config.model, B, T, *lm.numerics);
  load_params(model_file_of(checkpoint), lm.model->layout(), lm.model->params());
  return lm;
}

}  // namespace forge
