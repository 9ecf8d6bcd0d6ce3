// `forge tokenize --tokenizer gpt2|bytes [FILE]`: the token ids of a file (or of stdin), as
// one line of space-separated integers. Special-token text is ordinary text, as in data
// preparation.
#pragma once

#include <ostream>
#include <string>

namespace forge {

// file empty: read stdin. vocab_dir: the gpt2 tokenizer's encoder.json/vocab.bpe folder
// (empty: its default, see find_gpt2_vocab_dir). Returns the exit status (0); throws
// forge::Error naming the file or tokenizer on failure.
int run_tokenize(const std::string& tokenizer, const std::string& file, std::ostream& out,
                 const std::string& vocab_dir = "");

}  // namespace forge
