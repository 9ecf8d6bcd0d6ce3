// Byte-level tokenizer: token i is byte i. 256 ids, no special tokens, any byte string
// round-trips exactly (UTF-8 or not).
#pragma once

#include "forge/data/tokenizer.h"

namespace forge {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kVocabSize = 256;
  std::string name() const override { return "bytes"; }
  uint32_t vocab_size() const override { return kVocabSize; }
  std::optional<uint32_t> eot_token() const override { return std::nullopt; }
  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const uint32_t> ids) const override;
};

}  // namespace forge
