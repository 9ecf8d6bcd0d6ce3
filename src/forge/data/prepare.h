// `forge data prepare`: text corpora -> OUT/train.bin and OUT/val.bin (forge token shards).
//
// Inputs are files or directories. A directory contributes its regular files recursively,
// in sorted path order, skipping fortune index files (*.dat, *.u8) and binary files (any
// NUL byte). A file reached twice (named twice, or named and inside a named directory) is
// read once. A *.jsonl file holds one document per non-blank line: a JSON object whose
// `text_field` is a string (empty documents are skipped). Any other file is one document.
//
// Documents are separated so the model sees where one ends:
//   - tokenizers with an end-of-text token: the token is placed before every document
//     (as llm.c does), so each shard starts with it;
//   - tokenizers without one (bytes): each document is made to end with '\n' and
//     consecutive documents of a split are joined with a blank line ("\n").
//
// Split by document, deterministic: with k = round(1 / val_fraction), document i (0-based,
// in input order) goes to validation when i % k == k - 1. If that leaves validation empty
// and there are >= 2 documents, the last document goes to validation. A corpus of exactly
// one document is split by tokens instead: its last ceil(val_fraction * n) tokens go to
// validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "forge/data/tokenizer.h"

namespace forge {

struct PrepareOptions {
  std::string tokenizer = "bytes";  // a name make_tokenizer knows
  TokenizerOptions tokenizer_options;
  std::string out_dir;
  std::vector<std::string> inputs;
  double val_fraction = 0.1;        // in (0, 0.5]
  bool progress = true;             // progress bar on stderr (only when stderr is a terminal)
  std::string text_field = "text";  // the document field of .jsonl lines
};

struct PrepareResult {
  std::string train_path, val_path;
  size_t files = 0;           // files read
  size_t skipped_files = 0;   // binary / index files skipped inside directories
  size_t repeated_files = 0;  // files reached twice (named twice, or also inside a named folder)
  size_t documents = 0;
  size_t train_documents = 0, val_documents = 0;  // a split single document counts in both
  uint64_t train_tokens = 0, val_tokens = 0;
  uint64_t input_bytes = 0;
  uint32_t vocab_size = 0;
};

// Throws forge::Error naming the input file (and line for .jsonl) or the output path.
// Prints a one-line summary to stderr.
PrepareResult prepare_data(const PrepareOptions& options);
// Same with a tokenizer the caller made (options.tokenizer is ignored).
PrepareResult prepare_data(const PrepareOptions& options, const Tokenizer& tokenizer);

}  // namespace forge
