#include "forge/data/tokenizer.h"

#include "forge/core/error.h"
#include "forge/data/byte_tokenizer.h"
#include "forge/data/gpt2_bpe.h"

namespace forge {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name,
                                          const TokenizerOptions& options) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") return std::make_unique<Gpt2Bpe>(options.vocab_dir);
  // New tokenizers register here: one `if (name == ...) return ...;` line each, and their
  // name in the list of the error below.
  fail("tokenizer: expected one of bytes, gpt2, got \"{}\"", name);
}

std::unique_ptr<Tokenizer> tokenizer_for_model(const std::string& name, int model_vocab,
                                               const std::string& config_path,
                                               const TokenizerOptions& options) {
  const std::string chosen = !name.empty() ? name : model_vocab >= 50257 ? "gpt2" : "bytes";
  auto tok = make_tokenizer(chosen, options);
  if (tok->vocab_size() > static_cast<uint32_t>(model_vocab))
    fail("--tokenizer {}: its {} tokens do not fit field 'model.vocab_size' ({}) of {}", chosen,
         tok->vocab_size(), model_vocab, config_path);
  return tok;
}

}  // namespace forge
