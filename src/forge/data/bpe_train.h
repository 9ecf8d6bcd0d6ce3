// Learning a byte-level BPE vocabulary the way GPT-2's was made, written in GPT-2's two-file
// format so that forge (Gpt2Bpe), tiktoken and Hugging Face load it alike:
//   encoder.json  ids 0..255: the 256 bytes in GPT-2's byte-to-unicode order (printable
//                 bytes first, as GPT-2's own file and tiktoken's data_gym loader have them),
//                 then one token per merge in merge order, then "<|endoftext|>" last;
//   vocab.bpe     "#version: 0.2", then one merge "left right" per line, first learned first.
// Training: GPT-2's pre-tokenisation (Gpt2Pretokenizer) of each file, piece counts, then
// repeatedly merge the most frequent adjacent pair. Ties go to the pair whose (left id,
// right id) is smallest, so the result depends on nothing but the input bytes. A pair whose
// bytes already form a token (made by another pair) is never merged: a token must have one
// spelling in encoder.json, and tiktoken ranks tokens by their bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace forge {

struct BpeVocabulary {
  std::vector<std::string> token_bytes;               // id -> bytes, no special token
  std::vector<std::pair<uint32_t, uint32_t>> merges;  // merge k makes token 256 + k
};

// Learns vocab_size - 257 merges (256 byte tokens and <|endoftext|> make up the rest) from the
// concatenated pieces of texts. Throws if vocab_size < 257. Fewer merges result when the
// texts run out of pairs.
BpeVocabulary train_bpe(const std::vector<std::string>& texts, int vocab_size);

// Writes out_dir/encoder.json and out_dir/vocab.bpe (atomically; out_dir is created).
void write_gpt2_vocabulary(const BpeVocabulary& vocab, const std::string& out_dir);

// `forge tokenizer train --vocab-size N FILES... --out DIR`: reads the files, learns, writes,
// and prints a one-line summary to stdout.
void run_tokenizer_train(int vocab_size, const std::vector<std::string>& files,
                         const std::string& out_dir);

}  // namespace forge
