// Hugging Face transformers' config.json for the two families forge trains: GPT2LMHeadModel
// and LlamaForCausalLM. The one writer (`forge export --hf`) and the one reader (eval and
// sample of a folder written by save_pretrained or by the export) live side by side so that
// what one writes the other reads.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "forge/io/config.h"

namespace forge {

// transformers' GPT2Config / LlamaConfig fields for the model (dropout off: forge trains
// without it). bos_token_id and eos_token_id are the tokenizer's end-of-text token (GPT-2's
// <|endoftext|> opens every document, as forge's shards place it), null for a tokenizer
// without one (bytes). Throws for a family transformers has no counterpart for.
nlohmann::json hf_config_json(const ModelConfig& m, std::optional<uint32_t> end_of_text);

// A forge Config for the model a config.json describes (model_type "gpt2" or "llama");
// train.batch_size = 1 and train.seq_len = the model's context. HF's vocab_size (the
// embedding rows) becomes model.padded_vocab_size, and model.vocab_size is the export's
// forge_vocab_size where present, else the same. Errors name `where` and HF's field name.
Config parse_hf_config(const nlohmann::json& j, const std::string& where);
Config load_hf_config(const std::string& path);

}  // namespace forge
