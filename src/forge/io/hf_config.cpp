#include "forge/io/hf_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"

namespace forge {

namespace {

using nlohmann::json;

// HF's vocab_size counts the embedding rows, padding included; forge's vocabulary (the
// columns its loss and sampler use) is recorded beside it so that eval and sample of an
// exported folder exclude the padding exactly as they do on the checkpoint. transformers
// keeps unknown config fields as attributes and saves them again.
constexpr const char* kForgeVocabSize = "forge_vocab_size";

nlohmann::json hf_gpt2_config(const ModelConfig& m, const nlohmann::json& eot) {
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
          {"bos_token_id", eot},
          {"eos_token_id", eot},
          {kForgeVocabSize, m.vocab_size},
          {"torch_dtype", "float32"}};
}

// The same fields as reference/forge_ref/llama.py's hf_config(). The tensor names already
// are LlamaForCausalLM's and nn.Linear's [out, in] layout is the file layout, so the weights
// go out as they are.
nlohmann::json hf_llama_config(const ModelConfig& m, const nlohmann::json& eot) {
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
          {"bos_token_id", eot},
          {"eos_token_id", eot},
          {kForgeVocabSize, m.vocab_size},
          {"torch_dtype", "float32"}};
}

std::string shown(const json& v) { return v.dump(); }

// HF configs carry many fields forge has no use for (dropout, token ids, ...), so unknown
// fields are ignored; the ones that change the model are checked, because accepting a
// variant forge does not implement would compute a different model without a word.
class HfFields {
 public:
  HfFields(const json& j, const std::string& where) : j_(j), where_(where) {}

  const json* find(const char* name) const {
    auto it = j_.find(name);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  int positive_int(const char* name) const {
    const json* v = find(name);
    if (!v) fail("{}: field '{}' is missing: expected a positive integer", where_, name);
    return positive_int(name, *v);
  }
  int positive_int_or(const char* name, int fallback) const {
    const json* v = find(name);
    return v ? positive_int(name, *v) : fallback;
  }
  double positive_number_or(const char* name, double fallback) const {
    return positive_number_in(j_, "", name, fallback);
  }
  // A field of a nested object such as rope_parameters (prefix "rope_parameters.").
  double positive_number_in(const json& obj, const std::string& prefix, const char* name,
                            double fallback) const {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
      fail("{}: field '{}{}': expected a positive number, got {}", where_, prefix, name,
           shown(*it));
    return it->get<double>();
  }
  // An optional field that forge supports with one value only.
  void expect(const char* name, const json& want, const char* why) const {
    const json* v = find(name);
    if (v && *v != want)
      fail("{}: field '{}': expected {} ({}), got {}", where_, name, want.dump(), why, shown(*v));
  }
  const std::string& where() const { return where_; }
  [[noreturn]] void bad(const char* name, const std::string& expected, const json& got) const {
    fail("{}: field '{}': expected {}, got {}", where_, name, expected, shown(got));
  }

 private:
  int positive_int(const char* name, const json& v) const {
    if (!v.is_number_integer() || v.get<long long>() <= 0 ||
        v.get<long long>() > std::numeric_limits<int>::max())
      fail("{}: field '{}': expected a positive integer, got {}", where_, name, shown(v));
    return static_cast<int>(v.get<long long>());
  }

  const json& j_;
  const std::string& where_;
};

void gpt2_from_hf(const HfFields& f, ModelConfig& m) {
  m.family = "gpt2";
  m.vocab_size = f.positive_int("vocab_size");
  m.block_size = f.positive_int("n_positions");
  m.n_embd = f.positive_int("n_embd");
  m.n_layer = f.positive_int("n_layer");
  m.n_head = f.positive_int("n_head");
  m.norm_eps = f.positive_number_or("layer_norm_epsilon", 1e-5);
  f.expect("activation_function", "gelu_new", "forge's GPT-2 MLP is tanh-GELU");
  f.expect("n_inner", 4 * m.n_embd, "forge's GPT-2 MLP is 4*n_embd wide");
  f.expect("tie_word_embeddings", true, "forge's GPT-2 ties the LM head to wte");
  // Two switches of transformers' GPT-2 attention that change what it computes: scores not
  // divided by sqrt(head_dim), or also by the layer's index.
  f.expect("scale_attn_weights", true, "forge's GPT-2 scales the scores by 1/sqrt(head_dim)");
  f.expect("scale_attn_by_inverse_layer_idx", false,
           "forge's GPT-2 does not scale the scores by the layer index");
  if (m.n_embd % m.n_head != 0)
    f.bad("n_embd", "a multiple of n_head (" + std::to_string(m.n_head) + ")", m.n_embd);
}

void llama_from_hf(const HfFields& f, ModelConfig& m) {
  m.family = "llama";
  m.vocab_size = f.positive_int("vocab_size");
  m.n_embd = f.positive_int("hidden_size");
  m.ffn_hidden = f.positive_int("intermediate_size");
  m.n_layer = f.positive_int("num_hidden_layers");
  m.n_head = f.positive_int("num_attention_heads");
  m.n_kv_head = f.positive_int_or("num_key_value_heads", m.n_head);  // transformers' default: MHA
  m.block_size = f.positive_int("max_position_embeddings");
  m.norm_eps = f.positive_number_or("rms_norm_eps", 1e-6);  // transformers' LlamaConfig default
  f.expect("tie_word_embeddings", false, "forge's llama has an untied lm_head");
  f.expect("hidden_act", "silu", "forge's llama MLP is SwiGLU");
  f.expect("attention_bias", false, "forge's llama projections have no bias");
  f.expect("mlp_bias", false, "forge's llama projections have no bias");
  if (m.n_embd % m.n_head != 0)
    f.bad("hidden_size", "a multiple of num_attention_heads (" + std::to_string(m.n_head) + ")",
          m.n_embd);
  if (m.n_head % m.n_kv_head != 0)
    f.bad("num_key_value_heads",
          "a divisor of num_attention_heads (" + std::to_string(m.n_head) + ")", m.n_kv_head);
  f.expect("head_dim", m.n_embd / m.n_head, "hidden_size / num_attention_heads");
  if ((m.n_embd / m.n_head) % 2 != 0)
    fail(
        "{}: field 'hidden_size': expected an even head dimension hidden_size/num_attention_heads "
        "for rotary "
        "embeddings, got {}/{} = {}",
        f.where(), m.n_embd, m.n_head, m.n_embd / m.n_head);

  // transformers 4.x writes rope_theta (+ rope_scaling); 5.x writes rope_parameters with
  // rope_theta inside. Only the plain rotary embedding is implemented.
  m.rope_theta = f.positive_number_or("rope_theta", 10000.0);
  for (const char* name : {"rope_scaling", "rope_parameters"}) {
    const json* r = f.find(name);
    if (!r) continue;
    if (!r->is_object()) f.bad(name, "an object or null", *r);
    auto type = r->find("rope_type");
    if (type == r->end()) type = r->find("type");  // transformers 4.x's older spelling
    if (type != r->end() && *type != "default")
      fail(
          "{}: field '{}.rope_type': expected \"default\" (forge implements plain RoPE only), got "
          "{}",
          f.where(), name, shown(*type));
    m.rope_theta = f.positive_number_in(*r, std::string(name) + ".", "rope_theta", m.rope_theta);
  }
}

}  // namespace

nlohmann::json hf_config_json(const ModelConfig& m, std::optional<uint32_t> end_of_text) {
  if (end_of_text && *end_of_text >= static_cast<uint32_t>(m.vocab_size))
    fail("export --hf: end-of-text token {} is outside field 'model.vocab_size' ({})", *end_of_text,
         m.vocab_size);
  const json eot = end_of_text ? json(*end_of_text) : json(nullptr);
  if (m.family == "gpt2") return hf_gpt2_config(m, eot);
  if (m.family == "llama") return hf_llama_config(m, eot);
  fail("export --hf: family '{}' is not exportable (expected gpt2 or llama)", m.family);
}

Config parse_hf_config(const json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: expected a JSON object at the top level", where);
  Config c;
  c.path = where;
  HfFields f(j, where);
  const json* type = f.find("model_type");
  const std::string model_type = type && type->is_string() ? type->get<std::string>() : "";
  if (model_type == "gpt2")
    gpt2_from_hf(f, c.model);
  else if (model_type == "llama")
    llama_from_hf(f, c.model);
  else
    fail("{}: field 'model_type': expected \"gpt2\" or \"llama\", got {}", where,
         type ? shown(*type) : "none");
  const int rows = c.model.vocab_size;
  c.model.vocab_size = f.positive_int_or(kForgeVocabSize, rows);
  if (c.model.vocab_size > rows)
    f.bad(kForgeVocabSize, "at most vocab_size (" + std::to_string(rows) + ")", c.model.vocab_size);
  c.model.padded_vocab_size = rows;
  c.train.batch_size = 1;
  c.train.seq_len = c.model.block_size;
  validate_config(c);
  return c;
}

Config load_hf_config(const std::string& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::parse_error& e) {
    fail("{}: malformed JSON at byte {}: {}", path, e.byte, e.what());
  }
  return parse_hf_config(j, path);
}

}  // namespace forge
