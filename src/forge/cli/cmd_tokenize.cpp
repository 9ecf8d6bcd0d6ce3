#include <iostream>

#include "forge/cli/commands.h"
#include "forge/data/bpe_train.h"
#include "forge/data/tokenize_cmd.h"

namespace forge::cli {

void register_tokenize(CLI::App& app) {
  struct Opts {
    std::string tokenizer = "gpt2", file, vocab_dir, out;
    int vocab_size = 0;
    std::vector<std::string> files;
  };
  auto o = std::make_shared<Opts>();
  auto* tok =
      app.add_subcommand("tokenize", "print the token ids of a file (or stdin) on one line");
  tok->add_option("--tokenizer", o->tokenizer, "gpt2 | bytes");
  tok->add_option("--vocab-dir", o->vocab_dir, "folder with encoder.json and vocab.bpe (gpt2)");
  tok->add_option("file", o->file, "text file (default: stdin)");
  tok->callback([o] { run_tokenize(o->tokenizer, o->file, std::cout, o->vocab_dir); });

  auto* group = app.add_subcommand("tokenizer", "tokenizer tools");
  group->require_subcommand(1);
  auto* train = group->add_subcommand("train", "learn a byte-level BPE vocabulary (GPT-2 format)");
  train->add_option("--vocab-size", o->vocab_size, "vocabulary size (>= 257)")->required();
  train->add_option("--out", o->out, "folder for encoder.json and vocab.bpe")->required();
  train->add_option("files", o->files, "training text files")->required();
  train->callback([o] { run_tokenizer_train(o->vocab_size, o->files, o->out); });
}

}  // namespace forge::cli
