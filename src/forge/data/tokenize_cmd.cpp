#include "forge/data/tokenize_cmd.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "forge/core/error.h"
#include "forge/data/gpt2_bpe.h"
#include "forge/data/tokenizer.h"
#include "forge/io/atomic_file.h"

namespace forge {

int run_tokenize(const std::string& tokenizer, const std::string& file, std::ostream& out,
                 const std::string& vocab_dir) {
  // Build the tokenizer before reading: a wrong name fails fast, not after reading stdin.
  TokenizerOptions options;
  options.vocab_dir = vocab_dir;
  std::unique_ptr<Tokenizer> tok = make_tokenizer(tokenizer, options);
  std::string text;
  if (file.empty()) {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    text = read_text_file(file);  // refuses a folder, names the file
  }
  const std::vector<uint32_t> ids = tok->encode(text);
  fmt::memory_buffer buf;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) buf.push_back(' ');
    fmt::format_to(std::back_inserter(buf), "{}", ids[i]);
  }
  buf.push_back('\n');
  out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  if (!out) fail("tokenize: cannot write the token ids (output stream failed)");
  return 0;
}

}  // namespace forge
