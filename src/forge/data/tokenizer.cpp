#include "forge/data/tokenizer.h"

#include "forge/core/error.h"
#include "forge/data/byte_tokenizer.h"

namespace forge {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const TokenizerOptions& options) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  // New tokenizers register here: one `if (name == ...) return ...;` line each, and their
  // name in the list of the error below (the GPT-2 BPE tokenizer, "gpt2", goes here).
  fail("tokenizer: expected one of bytes, got \"{}\"", name);
}

}  // namespace forge
