#include "forge/data/byte_tokenizer.h"

#include "forge/core/error.h"

namespace forge {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= kVocabSize)
      fail("bytes tokenizer: token {} at index {} is not a byte (expected < 256)", ids[i], i);
    out[i] = static_cast<char>(ids[i]);
  }
  return out;
}

}  // namespace forge
