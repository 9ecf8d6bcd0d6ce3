#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "forge/cli/commands.h"
#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/train/checkpoint.h"
#include "forge/train/loaded_model.h"

namespace forge::cli {

namespace {

// transformers' GPT2Config for the model forge trained (dropout off: forge trains without it).
nlohmann::json hf_gpt2_config(const ModelConfig& m) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", m.vocab_rows()},
          {"n_positions", m.block_size},
          {"n_ctx", m.block_size},
          {"n_embd", m.n_embd},
          {"n_layer", m.n_layer},
          {"n_head", m.n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", m.norm_eps},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"bos_token_id", m.vocab_size - 1},
          {"eos_token_id", m.vocab_size - 1},
          {"torch_dtype", "float32"}};
}

// transformers' LlamaConfig: the same fields as reference/forge_ref/llama.py's hf_config().
// The tensor names already are LlamaForCausalLM's and nn.Linear's [out, in] layout is the
// file layout, so the weights go out as they are.
nlohmann::json hf_llama_config(const ModelConfig& m) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", m.vocab_rows()},
          {"hidden_size", m.n_embd},
          {"intermediate_size", m.ffn_hidden},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"num_key_value_heads", m.kv_heads()},
          {"head_dim", m.head_dim()},
          {"max_position_embeddings", m.block_size},
          {"rms_norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"attention_dropout", 0.0},
          {"tie_word_embeddings", false},
          {"initializer_range", 0.02},
          {"bos_token_id", m.vocab_size - 1},
          {"eos_token_id", m.vocab_size - 1},
          {"torch_dtype", "float32"}};
}

}  // namespace

void register_export(CLI::App& app) {
  struct Opts {
    std::string checkpoint, config, hf_dir;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("export", "write a checkpoint in another framework's format");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint directory")->required();
  cmd->add_option("--config", o->config, "config JSON (default: the checkpoint's own)");
  cmd->add_option("--hf", o->hf_dir, "folder for transformers' from_pretrained")->required();
  cmd->callback([o] {
    LoadedModel lm = load_trained_model(o->checkpoint, o->config, 1, 1);
    ensure_writable_dir(o->hf_dir);
    const ModelConfig& m = lm.config.model;
    if (m.family != "gpt2" && m.family != "llama")
      fail("export --hf: family '{}' is not exportable (expected gpt2 or llama)", m.family);
    save_params(o->hf_dir + "/model.safetensors", lm.model->layout(), lm.model->params());
    const nlohmann::json hf = m.family == "llama" ? hf_llama_config(m) : hf_gpt2_config(m);
    write_text_atomic(o->hf_dir + "/config.json", hf.dump(2) + "\n");
    fmt::print("exported {} -> {}/config.json, {}/model.safetensors\n", o->checkpoint, o->hf_dir,
               o->hf_dir);
  });
}

}  // namespace forge::cli
