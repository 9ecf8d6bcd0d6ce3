// transformers' config.json: what `forge export --hf` writes, the reader of eval and sample
// reads back into the same model; the fields forge does not implement are refused in one
// message naming the file and HF's field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/io/hf_config.h"
#include "test_util.h"

using forge_test::error_of;
using nlohmann::json;

namespace {

forge::ModelConfig llama_tiny() {
  forge::ModelConfig m;
  m.family = "llama";
  m.vocab_size = 256;
  m.padded_vocab_size = 272;
  m.n_layer = 3;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 64;
  m.ffn_hidden = 176;
  m.block_size = 48;
  m.rope_theta = 500000.0;
  m.norm_eps = 1e-6;
  return m;
}

// The fields of a LlamaConfig as transformers 5 saves it (rope_theta inside rope_parameters).
json transformers5_llama() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "dtype": "float32", "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 176,
    "max_position_embeddings": 64, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    "tie_word_embeddings": false, "transformers_version": "5.24.0", "use_cache": true,
    "vocab_size": 272})");
}

// The message of parsing j, which must be an error.
std::string hf_error(const json& j) {
  return error_of([&] { forge::parse_hf_config(j, "hf/config.json"); });
}

}  // namespace

TEST(HfConfig, LlamaRoundTripsThroughTheExport) {
  const forge::ModelConfig m = llama_tiny();
  const json hf = forge::hf_config_json(m, std::nullopt);
  EXPECT_EQ(hf["model_type"], "llama");
  // A byte vocabulary has no end-of-text token: none named.
  EXPECT_TRUE(hf["bos_token_id"].is_null());
  EXPECT_TRUE(hf["eos_token_id"].is_null());
  EXPECT_EQ(hf["tie_word_embeddings"], false);
  const forge::Config c = forge::parse_hf_config(hf, "hf/config.json");
  EXPECT_EQ(c.path, "hf/config.json");
  EXPECT_EQ(c.model.family, "llama");
  // HF's vocab_size is the embedding rows; the export records the real vocabulary beside it.
  EXPECT_EQ(hf["vocab_size"], 272);
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.model.vocab_rows(), 272);
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.model.kv_heads(), 2);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.model.ffn_hidden, 176);
  EXPECT_EQ(c.model.block_size, 48);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  EXPECT_EQ(c.train.batch_size, 1);
  EXPECT_EQ(c.train.seq_len, 48);
}

TEST(HfConfig, Gpt2RoundTripsThroughTheExport) {
  forge::ModelConfig m;
  m.vocab_size = 50257;
  m.padded_vocab_size = 50304;
  m.n_layer = 2;
  m.n_head = 3;
  m.n_embd = 48;
  m.block_size = 40;
  m.norm_eps = 1e-5;
  const json hf = forge::hf_config_json(m, 50256);
  // GPT-2's <|endoftext|>, not the last of the padded rows nor of the vocabulary by rule.
  EXPECT_EQ(hf["bos_token_id"], 50256);
  EXPECT_EQ(hf["eos_token_id"], 50256);
  const forge::Config c = forge::parse_hf_config(hf, "hf/config.json");
  EXPECT_EQ(c.model.family, "gpt2");
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.vocab_rows(), 50304);
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_head, 3);
  EXPECT_EQ(c.model.n_embd, 48);
  EXPECT_EQ(c.model.block_size, 40);
  EXPECT_EQ(c.train.seq_len, 40);
  // A tokenizer whose end-of-text token the model cannot produce is refused.
  EXPECT_NE(error_of([&] {
              forge::hf_config_json(m, 50257);
            }).find("end-of-text token 50257 is outside field 'model.vocab_size' (50257)"),
            std::string::npos);
}

TEST(HfConfig, ReadsWhatTransformersWrites) {
  forge::Config c = forge::parse_hf_config(transformers5_llama(), "hf/config.json");
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000.0);  // from rope_parameters
  EXPECT_EQ(c.model.vocab_size, 272);              // no forge_vocab_size: every row is a token
  EXPECT_EQ(c.model.vocab_rows(), 272);
  EXPECT_EQ(c.model.kv_heads(), 2);
  // transformers 4.x: rope_theta at the top, rope_scaling null; absent fields take
  // LlamaConfig's defaults (multi-head attention, theta 10000, eps 1e-6).
  json j = transformers5_llama();
  j.erase("rope_parameters");
  j.erase("num_key_value_heads");
  j.erase("rms_norm_eps");
  j.erase("tie_word_embeddings");
  j.erase("head_dim");
  j["rope_scaling"] = nullptr;
  c = forge::parse_hf_config(j, "hf/config.json");
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 10000.0);
  EXPECT_EQ(c.model.kv_heads(), 4);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  j["rope_theta"] = 250000.0;
  j["rope_scaling"] = {{"type", "default"}};
  EXPECT_DOUBLE_EQ(forge::parse_hf_config(j, "hf/config.json").model.rope_theta, 250000.0);
}

TEST(HfConfig, RefusesWhatForgeDoesNotImplementNamingFileAndField) {
  struct Case {
    const char* field;
    json value;  // null: remove the field
    const char* message;
  } cases[] = {
      {"model_type", "mistral",
       "hf/config.json: field 'model_type': expected \"gpt2\" or \"llama\", got \"mistral\""},
      {"model_type", nullptr,
       "hf/config.json: field 'model_type': expected \"gpt2\" or \"llama\", got none"},
      {"tie_word_embeddings", true,
       "hf/config.json: field 'tie_word_embeddings': expected false (forge's llama has an untied "
       "lm_head), got true"},
      {"hidden_size", nullptr,
       "hf/config.json: field 'hidden_size' is missing: expected a positive integer"},
      {"intermediate_size", 0,
       "hf/config.json: field 'intermediate_size': expected a positive integer, got 0"},
      {"num_hidden_layers", "2",
       "hf/config.json: field 'num_hidden_layers': expected a positive integer, got \"2\""},
      {"num_key_value_heads", 3,
       "hf/config.json: field 'num_key_value_heads': expected a divisor of num_attention_heads "
       "(4), got 3"},
      {"head_dim", 32,
       "hf/config.json: field 'head_dim': expected 16 (hidden_size / num_attention_heads), got 32"},
      {"hidden_act", "gelu", "hf/config.json: field 'hidden_act': expected \"silu\""},
      {"attention_bias", true, "hf/config.json: field 'attention_bias': expected false"},
      {"rms_norm_eps", 0,
       "hf/config.json: field 'rms_norm_eps': expected a positive number, got 0"},
      {"forge_vocab_size", 300,
       "hf/config.json: field 'forge_vocab_size': expected at most vocab_size (272), got 300"},
      {"rope_parameters", json{{"rope_type", "llama3"}, {"rope_theta", 500000.0}},
       "hf/config.json: field 'rope_parameters.rope_type': expected \"default\""},
      {"rope_parameters", json{{"rope_type", "default"}, {"rope_theta", -1.0}},
       "hf/config.json: field 'rope_parameters.rope_theta': expected a positive number, got -1.0"},
  };
  for (const Case& c : cases) {
    json j = transformers5_llama();
    if (c.value.is_null())
      j.erase(c.field);
    else
      j[c.field] = c.value;
    const std::string msg = hf_error(j);
    EXPECT_EQ(msg.rfind(c.message, 0), 0u) << c.field << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // Rotary embeddings rotate pairs: 72 / 8 = 9 has none for the last element.
  json odd = transformers5_llama();
  odd.erase("head_dim");
  odd["hidden_size"] = 72;
  odd["num_attention_heads"] = 8;
  EXPECT_EQ(hf_error(odd).rfind(
                "hf/config.json: field 'hidden_size': expected an even head dimension", 0),
            0u)
      << hf_error(odd);

  json gpt2 = forge::hf_config_json(forge::ModelConfig{}, std::nullopt);
  gpt2["tie_word_embeddings"] = false;
  EXPECT_EQ(hf_error(gpt2).rfind("hf/config.json: field 'tie_word_embeddings': expected true", 0),
            0u);
  gpt2 = forge::hf_config_json(forge::ModelConfig{}, std::nullopt);
  gpt2["activation_function"] = "relu";
  EXPECT_EQ(
      hf_error(gpt2).rfind("hf/config.json: field 'activation_function': expected \"gelu_new\"", 0),
      0u);
  EXPECT_NE(hf_error(json::array()).find("hf/config.json"), std::string::npos);
}

TEST(HfConfig, FileErrorsNameThePath) {
  forge_test::TempDir dir;
  const std::string path = dir / "config.json";
  EXPECT_NE(error_of([&] { forge::load_hf_config(path); }).find(path), std::string::npos);
  forge::write_text_atomic(path, "{\"model_type\": ");
  const std::string msg = error_of([&] { forge::load_hf_config(path); });
  EXPECT_EQ(msg.rfind(path + ": malformed JSON", 0), 0u) << msg;
}
