// A trained model ready for evaluation, sampling or export: config, numerics and
// parameters, loaded from a checkpoint directory (its state.json holds the config) or from
// a safetensors file plus a config.
#pragma once

#include <memory>
#include <string>

#include "forge/io/config.h"
#include "forge/model/model.h"
#include "forge/numerics/numerics.h"

namespace forge {

struct LoadedModel {
  Config config;
  std::unique_ptr<Numerics> numerics;
  std::unique_ptr<Model> model;
  bool hf = false;  // read from a Hugging Face folder (config.json), which names no data
};

// config_path may be empty when checkpoint is a directory. B, T: largest micro-batch;
// B, T <= 0 mean the config's train.batch_size and train.seq_len.
// numerics: the profile the model computes with; `fast`'s fused attention takes head
// dimensions up to kernels::cpu::kMaxHeadDim, and a model with wider heads (which torch-cpu trains)
// falls back to torch-cpu rather than being refused.
LoadedModel load_trained_model(const std::string& checkpoint, const std::string& config_path, int B,
                               int T, const std::string& numerics = "fast");

}  // namespace forge
