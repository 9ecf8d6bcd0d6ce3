// Tokens/s of forge's GPT-2 encoder on the files given (concatenated `repeat` times), one
// thread on the whole text and all threads over the documents (split at lines holding "%",
// the fortune separator). Prints one JSON object; bench/bench_tokenizer.py runs it beside
// tiktoken and HF tokenizers on the same text.
//   bench_tokenizer [--repeat N] [--vocab-dir DIR] FILE...
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "forge/core/error.h"
#include "forge/data/gpt2_bpe.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int repeat = 4;
    std::string vocab_dir;
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc)
        repeat = std::atoi(argv[++i]);
      else if (!std::strcmp(argv[i], "--vocab-dir") && i + 1 < argc)
        vocab_dir = argv[++i];
      else
        files.push_back(argv[i]);
    }
    if (files.empty()) forge::fail("usage: bench_tokenizer [--repeat N] [--vocab-dir DIR] FILE...");
    std::string one;
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) forge::fail("{}: cannot open", f);
      std::ostringstream ss;
      ss << in.rdbuf();
      one += ss.str();
    }
    std::string text;
    for (int r = 0; r < repeat; ++r) text += one;
    std::vector<std::string_view> docs;
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find("\n%\n", pos);
      if (end == std::string::npos) end = text.size();
      docs.push_back(std::string_view(text).substr(pos, end - pos));
      pos = end + 3;
    }
    const forge::Gpt2Bpe tok(vocab_dir);
    // Best of three: the first run also fills the piece cache, as a long job would.
    double best1 = 1e30, bestn = 1e30;
    size_t n1 = 0, nn = 0;
    for (int trial = 0; trial < 3; ++trial) {
      auto t0 = std::chrono::steady_clock::now();
      n1 = tok.encode_ordinary(text).size();
      best1 = std::min(best1, seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      const auto batch = tok.encode_batch(docs, false, 0);
      bestn = std::min(bestn, seconds_since(t0));
      nn = 0;
      for (const auto& d : batch) nn += d.size();
    }
    std::printf(
        "{\"bytes\": %zu, \"docs\": %zu, \"threads\": %d, \"tokens_1\": %zu, \"seconds_1\": %.4f, "
        "\"tokens_per_s_1\": %.0f, \"tokens_n\": %zu, \"seconds_n\": %.4f, \"tokens_per_s_n\": "
        "%.0f}\n",
        text.size(), docs.size(), omp_get_max_threads(), n1, best1, n1 / best1, nn, bestn,
        nn / bestn);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
}
