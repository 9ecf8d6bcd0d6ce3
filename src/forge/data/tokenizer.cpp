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

}  // namespace forge
