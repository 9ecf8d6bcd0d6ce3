#include "forge/io/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"
#include "forge/numerics/numerics.h"

namespace forge {
namespace {

using nlohmann::json;

const char* json_type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return v.type_name();
}

// Finds a key given twice in one object, which json::parse would read as the last one given,
// silently (a config edited by hand may set "lr" twice): a SAX pass that keeps, for each object
// being read, its dotted name and the keys seen so far.
class DuplicateKeys : public nlohmann::json_sax<json> {
 public:
  std::string duplicate;  // the dotted name of the first key found twice, or empty

  bool key(string_t& k) override {
    Object& o = open_.back();
    if (!o.keys.insert(k).second) {
      duplicate = o.name.empty() ? k : o.name + "." + k;
      return false;  // stops the pass
    }
    last_key_ = k;
    return true;
  }
  bool start_object(std::size_t) override {
    open_.push_back({child_name(), false, {}});
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    open_.push_back({child_name(), true, {}});
    return true;
  }
  bool end_array() override { return close(); }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  // Malformed JSON is json::parse's to report, with its position.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  struct Object {
    std::string name;
    bool array;  // its elements go by its name
    std::set<std::string> keys;
  };
  std::string child_name() const {
    if (open_.empty()) return "";
    const Object& parent = open_.back();
    if (parent.array || parent.name.empty()) return parent.array ? parent.name : last_key_;
    return parent.name + "." + last_key_;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  std::vector<Object> open_;
  std::string last_key_;
};

// Reads the fields of one JSON object, remembers which names it knew, and reports the rest
// as unknown, so a typo like "stpes" never silently falls back to a default.
class Section {
 public:
  Section(const json& obj, std::string prefix, const std::string& where)
      : obj_(obj), prefix_(std::move(prefix)), where_(where) {}

  std::string field(const std::string& name) const {
    return prefix_.empty() ? name : prefix_ + "." + name;
  }

  const json* find(const std::string& name) {
    known_.insert(name);
    auto it = obj_.find(name);
    return it == obj_.end() ? nullptr : &*it;
  }

  [[noreturn]] void bad(const std::string& name, const std::string& expected,
                        const json& got) const {
    std::string shown = got.is_string()   ? "string " + got.dump()
                        : got.is_number() ? got.dump()
                                          : json_type_name(got);
    fail("{}: field '{}': expected {}, got {}", where_, field(name), expected, shown);
  }

  // min_value is the smallest accepted value; its wording goes into the error.
  void read_int(const std::string& name, int& dst, long long min_value, const char* expected,
                long long max_value = std::numeric_limits<int>::max()) {
    const json* v = find(name);
    if (!v) return;
    if (!v->is_number_integer())
      fail("{}: field '{}': expected an integer, got {}", where_, field(name), json_type_name(*v));
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max()))
      bad(name, expected, *v);
    long long x = v->get<long long>();
    if (x < min_value || x > max_value) bad(name, expected, *v);
    dst = static_cast<int>(x);
  }

  void read_u64(const std::string& name, uint64_t& dst) {
    const json* v = find(name);
    if (!v) return;
    if (!v->is_number_integer())
      fail("{}: field '{}': expected an integer, got {}", where_, field(name), json_type_name(*v));
    if (!v->is_number_unsigned() && v->get<long long>() < 0)
      bad(name, "a non-negative integer", *v);
    dst = v->get<uint64_t>();
  }

  // ok decides the range; expected describes it for the error.
  template <typename Pred>
  void read_double(const std::string& name, double& dst, Pred ok, const char* expected) {
    const json* v = find(name);
    if (!v) return;
    if (!v->is_number())
      fail("{}: field '{}': expected a number, got {}", where_, field(name), json_type_name(*v));
    double x = v->get<double>();
    if (!std::isfinite(x) || !ok(x)) bad(name, expected, *v);
    dst = x;
  }

  void read_string(const std::string& name, std::string& dst,
                   const std::vector<std::string>& choices = {}) {
    const json* v = find(name);
    if (!v) return;
    if (!v->is_string())
      fail("{}: field '{}': expected a string, got {}", where_, field(name), json_type_name(*v));
    std::string s = v->get<std::string>();
    if (choices.size() > 0) {
      bool found = false;
      std::string list;
      for (const std::string& c : choices) {
        if (s == c) found = true;
        list += list.empty() ? "" : "|";
        list += c;
      }
      if (!found) bad(name, "one of " + list, *v);
    }
    dst = std::move(s);
  }

  const json* object(const std::string& name) {
    const json* v = find(name);
    if (v && !v->is_object())
      fail("{}: field '{}': expected an object, got {}", where_, field(name), json_type_name(*v));
    return v;
  }

  void reject_unknown() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      if (!known_.count(it.key())) fail("{}: unknown field '{}'", where_, field(it.key()));
  }

 private:
  const json& obj_;
  std::string prefix_;
  const std::string& where_;
  std::set<std::string> known_;
};

constexpr const char* kPositive = "a positive integer";
constexpr const char* kNonNegative = "a non-negative integer";

void parse_model(const json& j, const std::string& where, ModelConfig& m) {
  Section s(j, "model", where);
  s.read_string("family", m.family, {"gpt2", "llama"});
  s.read_int("vocab_size", m.vocab_size, 1, kPositive);
  s.read_int("padded_vocab_size", m.padded_vocab_size, 0, kNonNegative);
  // Bounded before anything is planned per layer (a layer's bookkeeping alone took 2 KB, so
  // n_layer 10^7 exhausted memory before the memory plan could refuse it).
  s.read_int("n_layer", m.n_layer, 1, "an integer from 1 to 65536", 65536);
  s.read_int("n_head", m.n_head, 1, kPositive);
  s.read_int("n_kv_head", m.n_kv_head, 0, kNonNegative);
  s.read_int("n_embd", m.n_embd, 1, kPositive);
  s.read_int("block_size", m.block_size, 1, kPositive);
  s.read_int("ffn_hidden", m.ffn_hidden, 0, kNonNegative);
  s.read_double(
      "rope_theta", m.rope_theta, [](double x) { return x > 0; }, "a positive number");
  s.read_double(
      "norm_eps", m.norm_eps, [](double x) { return x > 0; }, "a positive number");
  s.reject_unknown();
}

void parse_train(const json& j, const std::string& where, TrainConfig& t) {
  Section s(j, "train", where);
  auto positive = [](double x) { return x > 0; };
  auto non_negative = [](double x) { return x >= 0; };
  auto beta = [](double x) { return x >= 0 && x < 1; };
  s.read_int("batch_size", t.batch_size, 1, kPositive);
  s.read_int("seq_len", t.seq_len, 1, kPositive);
  s.read_int("grad_accum_steps", t.grad_accum_steps, 1, kPositive);
  s.read_int("steps", t.steps, 1, kPositive);
  s.read_double("lr", t.lr, positive, "a positive number");
  s.read_double("min_lr", t.min_lr, non_negative, "a non-negative number");
  s.read_int("warmup_steps", t.warmup_steps, 0, kNonNegative);
  s.read_double("weight_decay", t.weight_decay, non_negative, "a non-negative number");
  s.read_double("beta1", t.beta1, beta, "a number in [0, 1)");
  s.read_double("beta2", t.beta2, beta, "a number in [0, 1)");
  s.read_double("eps", t.eps, positive, "a positive number");
  s.read_double("grad_clip", t.grad_clip, non_negative,
                "a non-negative number (0 disables clipping)");
  s.read_u64("seed", t.seed);
  s.read_int("threads", t.threads, 0, "an integer from 0 to 4096 (0 = all cores)", 4096);
  s.read_int("eval_interval", t.eval_interval, 0, kNonNegative);
  s.read_int("eval_batches", t.eval_batches, 0, kNonNegative);
  s.read_int("checkpoint_interval", t.checkpoint_interval, 0, kNonNegative);
  s.read_int("log_interval", t.log_interval, 1, kPositive);
  s.reject_unknown();
}

void parse_data(const json& j, const std::string& where, DataConfig& d) {
  Section s(j, "data", where);
  s.read_string("train", d.train);
  s.read_string("val", d.val);
  s.reject_unknown();
}

}  // namespace

Config parse_config(const json& j, const std::string& where) {
  if (!j.is_object())
    fail("{}: expected a JSON object at the top level, got {}", where, json_type_name(j));
  Config c;
  c.path = where;
  Section top(j, "", where);
  if (const json* m = top.object("model")) parse_model(*m, where, c.model);
  if (const json* t = top.object("train")) parse_train(*t, where, c.train);
  if (const json* d = top.object("data")) parse_data(*d, where, c.data);
  top.read_string("out_dir", c.out_dir);
  top.read_string("numerics", c.numerics, numerics_profiles());
  top.reject_unknown();
  if (c.out_dir.empty()) fail("{}: field 'out_dir': expected a non-empty path, got \"\"", where);
  validate_config(c);
  return c;
}

Config load_config(const std::string& path) {
  std::string text = read_text_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("{}: malformed JSON at byte {}: {}", path, e.byte, e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    fail("{}: unreadable JSON: {}", path, e.what());
  }
  DuplicateKeys dup;
  json::sax_parse(text, &dup);
  if (!dup.duplicate.empty())
    fail("{}: field '{}' is given twice; expected each field once", path, dup.duplicate);
  return parse_config(j, path);
}

json config_to_json(const Config& c) {
  const ModelConfig& m = c.model;
  const TrainConfig& t = c.train;
  json j;
  j["model"] = {{"family", m.family},
                {"vocab_size", m.vocab_size},
                {"padded_vocab_size", m.padded_vocab_size},
                {"n_layer", m.n_layer},
                {"n_head", m.n_head},
                {"n_kv_head", m.n_kv_head},
                {"n_embd", m.n_embd},
                {"block_size", m.block_size},
                {"ffn_hidden", m.ffn_hidden},
                {"rope_theta", m.rope_theta},
                {"norm_eps", m.norm_eps}};
  j["train"] = {{"batch_size", t.batch_size},
                {"seq_len", t.seq_len},
                {"grad_accum_steps", t.grad_accum_steps},
                {"steps", t.steps},
                {"lr", t.lr},
                {"min_lr", t.min_lr},
                {"warmup_steps", t.warmup_steps},
                {"weight_decay", t.weight_decay},
                {"beta1", t.beta1},
                {"beta2", t.beta2},
                {"eps", t.eps},
                {"grad_clip", t.grad_clip},
                {"seed", t.seed},
                {"threads", t.threads},
                {"eval_interval", t.eval_interval},
                {"eval_batches", t.eval_batches},
                {"checkpoint_interval", t.checkpoint_interval},
                {"log_interval", t.log_interval}};
  j["data"] = {{"train", c.data.train}, {"val", c.data.val}};
  j["out_dir"] = c.out_dir;
  j["numerics"] = c.numerics;
  return j;
}

void validate_model_config(const ModelConfig& m, const std::string& where) {
  // parse_config bounds these per field; a config built in code (tests, a caller's own) comes
  // here without that pass, and a zero head count would divide by zero just below.
  const std::pair<const char*, int> sizes[] = {{"vocab_size", m.vocab_size},
                                               {"n_layer", m.n_layer},
                                               {"n_head", m.n_head},
                                               {"n_embd", m.n_embd},
                                               {"block_size", m.block_size}};
  for (const auto& [field, value] : sizes)
    if (value < 1)
      fail("{}: field 'model.{}': expected a positive integer, got {}", where, field, value);
  if (m.n_kv_head < 0)
    fail(
        "{}: field 'model.n_kv_head': expected 0 (as many as model.n_head) or a positive integer, "
        "got {}",
        where, m.n_kv_head);
  if (m.n_embd % m.n_head != 0)
    fail("{}: field 'model.n_embd': expected a multiple of model.n_head ({}), got {}", where,
         m.n_head, m.n_embd);
  if (m.padded_vocab_size != 0 && m.padded_vocab_size < m.vocab_size)
    fail(
        "{}: field 'model.padded_vocab_size': expected 0 or at least model.vocab_size ({}), got {}",
        where, m.vocab_size, m.padded_vocab_size);
  if (m.kv_heads() > m.n_head || m.n_head % m.kv_heads() != 0)
    fail("{}: field 'model.n_kv_head': expected a divisor of model.n_head ({}), got {}", where,
         m.n_head, m.n_kv_head);
  // parse_config checks these per field; configs built in code (an HF config.json, tests)
  // arrive here without that pass.
  if (!(m.norm_eps > 0) || !std::isfinite(m.norm_eps))
    fail("{}: field 'model.norm_eps': expected a positive number, got {}", where, m.norm_eps);
  if (!(m.rope_theta > 0) || !std::isfinite(m.rope_theta))
    fail("{}: field 'model.rope_theta': expected a positive number, got {}", where, m.rope_theta);
  if (m.family == "gpt2") {
    // These knobs belong to the llama block; accepting them for gpt2 would silently do nothing.
    if (m.n_kv_head != 0 && m.n_kv_head != m.n_head)
      fail("{}: field 'model.n_kv_head': expected 0 or model.n_head ({}) for family gpt2, got {}",
           where, m.n_head, m.n_kv_head);
    if (m.ffn_hidden != 0 && m.ffn_hidden != 4 * m.n_embd)
      fail(
          "{}: field 'model.ffn_hidden': expected 0 or 4*model.n_embd ({}) for family gpt2, got {}",
          where, 4 * m.n_embd, m.ffn_hidden);
    // config_to_json writes the default for every family, so only another value is an error.
    if (m.rope_theta != ModelConfig{}.rope_theta)
      fail(
          "{}: field 'model.rope_theta': expected {} (the default) for family gpt2, which has "
          "learned positions "
          "instead of rotary embeddings, got {}",
          where, ModelConfig{}.rope_theta, m.rope_theta);
  } else if (m.family == "llama") {
    if (m.head_dim() % 2 != 0)
      fail(
          "{}: field 'model.n_embd': expected an even head dimension n_embd/n_head for rotary "
          "embeddings, got {}",
          where, m.head_dim());
    // gpt2's MLP width follows from n_embd; SwiGLU's has no such rule (Llama rounds 8/3*C
    // to a multiple of 256), so it must be given.
    if (m.ffn_hidden <= 0)
      fail(
          "{}: field 'model.ffn_hidden': expected the SwiGLU width (a positive integer) for family "
          "llama, got {}",
          where, m.ffn_hidden);
  } else {
    fail("{}: field 'model.family': expected one of gpt2|llama, got \"{}\"", where, m.family);
  }
}

void validate_config(const Config& c) {
  const std::string where = c.path.empty() ? std::string("config") : c.path;
  const ModelConfig& m = c.model;
  const TrainConfig& t = c.train;
  validate_model_config(m, where);
  if (t.seq_len > m.block_size)
    fail("{}: field 'train.seq_len': expected at most model.block_size ({}), got {}", where,
         m.block_size, t.seq_len);
  if (t.min_lr > t.lr)
    fail("{}: field 'train.min_lr': expected at most train.lr ({}), got {}", where, t.lr, t.min_lr);
  const auto profiles = numerics_profiles();
  if (std::find(profiles.begin(), profiles.end(), c.numerics) == profiles.end())
    fail("{}: field 'numerics': expected one of {}, got \"{}\"", where, fmt::join(profiles, "|"),
         c.numerics);
}

}  // namespace forge
