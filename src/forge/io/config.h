// The run configuration: one JSON file read by both the engine and the PyTorch reference.
// Every field is checked: unknown fields, wrong types and out-of-range values are errors
// naming the file and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace forge {

struct ModelConfig {
  std::string family = "gpt2";  // "gpt2" | "llama"
  int vocab_size = 256;         // real vocabulary (targets are < vocab_size)
  int padded_vocab_size = 0;    // rows of the embedding / logits; 0 means = vocab_size
  int n_layer = 2;
  int n_head = 4;
  int n_kv_head = 0;  // llama only; 0 means = n_head
  int n_embd = 64;
  int block_size = 64;          // max sequence length (rows of wpe)
  int ffn_hidden = 0;           // llama only (SwiGLU width); gpt2 uses 4*n_embd
  double rope_theta = 10000.0;  // llama only
  double norm_eps = 1e-5;

  int vocab_rows() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_embd / n_head; }
  // The MLP's hidden width: llama's SwiGLU width, GPT-2's 4 * n_embd (ffn_hidden 0 or that).
  int ffn_width() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
};

struct TrainConfig {
  int batch_size = 4;        // B, sequences per micro-batch (per rank)
  int seq_len = 64;          // T
  int grad_accum_steps = 1;  // micro-batches per optimizer step
  int steps = 100;           // optimizer steps
  double lr = 1e-3;          // peak learning rate
  double min_lr = 1e-4;      // floor of the cosine decay
  int warmup_steps = 10;
  double weight_decay = 0.1;  // on 2-D weights only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global gradient norm; 0 disables clipping
  uint64_t seed = 1337;
  int threads = 0;              // 0 = all cores
  int eval_interval = 50;       // steps between validation passes; 0 = only at the end
  int eval_batches = 8;         // validation micro-batches per pass
  int checkpoint_interval = 0;  // steps between checkpoints; 0 = only at the end
  int log_interval = 1;
};

struct DataConfig {
  std::string train;  // token shard (forge, nanoGPT .bin or llm.c format)
  std::string val;
};

struct Config {
  std::string path;  // where it was read from, for error messages
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
  std::string out_dir = "runs/default";
  std::string numerics = "fast";  // "fast" | "torch-cpu" | "bf16"
};

// Reads and validates a config file. Throws forge::Error naming the file and the field.
Config load_config(const std::string& path);
// Parses an already-read JSON object ("where" names its source in errors).
Config parse_config(const nlohmann::json& j, const std::string& where);
nlohmann::json config_to_json(const Config& c);
// Validates cross-field constraints (n_embd % n_head, seq_len <= block_size, ...).
void validate_config(const Config& c);
// The model's part of validate_config, for a ModelConfig made in code (an HF config.json, tests)
// as well as one read from a file; "where" names the source in errors.
void validate_model_config(const ModelConfig& m, const std::string& where);

}  // namespace forge
