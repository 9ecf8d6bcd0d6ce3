// The tokenizer seam: data preparation, evaluation and sampling see text only through
// this interface, so byte-level and GPT-2 BPE tokenizers are interchangeable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace forge {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;     // the name make_tokenizer knows it by
  virtual uint32_t vocab_size() const = 0;  // every id is < vocab_size()
  // The end-of-text token placed before every document, if the vocabulary has one.
  virtual std::optional<uint32_t> eot_token() const = 0;
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  // encode, with the end-of-text token's own text (GPT-2's "<|endoftext|>") read as that
  // token, for a prompt that starts a document as the shards do; other tokenizers: encode.
  virtual std::vector<uint32_t> encode_with_special(std::string_view text) const {
    return encode(text);
  }
  // Throws forge::Error on an id >= vocab_size().
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
};

struct TokenizerOptions {
  // Folder with the vocabulary files of tokenizers that need them (gpt2: encoder.json and
  // vocab.bpe); empty means the tokenizer's own default location.
  std::string vocab_dir;
};

// Known names: "bytes". Throws forge::Error listing the known names otherwise.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name,
                                          const TokenizerOptions& options = {});

// The tokenizer of a model whose vocabulary (field 'model.vocab_size' of config_path) holds
// model_vocab tokens: `name` (--tokenizer), or where empty GPT-2's BPE when the vocabulary
// holds its 50257 tokens, else bytes (a byte-level model, its vocabulary maybe padded past
// 256). Throws when the tokenizer's tokens do not fit the vocabulary.
std::unique_ptr<Tokenizer> tokenizer_for_model(const std::string& name, int model_vocab,
                                               const std::string& config_path,
                                               const TokenizerOptions& options = {});

}  // namespace forge
