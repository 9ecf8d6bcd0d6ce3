// Token shards. forge's own format, little-endian:
//   bytes 0..7   magic "FRGTOKS\0"
//   bytes 8..11  uint32 version (1)
//   bytes 12..15 uint32 bytes per token (2 = uint16, 4 = uint32)
//   bytes 16..23 uint64 token count
//   bytes 24..31 uint64 vocabulary size the tokens were made with
//   bytes 32..63 zero
//   then count tokens.
// The reader also takes nanoGPT's headerless uint16 .bin files and llm.c's shards
// (256 int32 header, magic 20240520, version 1 = uint16 tokens), detected by header, or
// forced with an explicit format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "forge/io/mapped_file.h"

namespace forge {

enum class ShardFormat { Auto, Forge, NanoGPT, LlmC };
ShardFormat parse_shard_format(const std::string& s);  // "auto" | "forge" | "nanogpt" | "llmc"

class ShardWriter {
 public:
  // Writes path atomically on finish(); tokens are buffered in memory.
  ShardWriter(std::string path, uint32_t vocab_size);
  void append(const uint32_t* tokens, size_t n);
  void finish();  // throws naming path; writes nothing partial

 private:
  std::string path_;
  uint32_t vocab_size_;
  std::vector<uint32_t> tokens_;
};

// Memory-mapped read-only view of a shard's tokens.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path, ShardFormat format = ShardFormat::Auto);

  size_t size() const { return count_; }
  uint32_t vocab_size() const { return vocab_size_; }  // 0 when the format does not say
  ShardFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  uint32_t operator[](size_t i) const;
  // Copies tokens [start, start + n) as int32 into dst. Throws if out of range.
  void read(size_t start, size_t n, int32_t* dst) const;
  // The index of the first token >= limit, or size() when there is none; reads every token
  // up to it (check_shard_vocabulary in train/data_loader.h names what it finds).
  size_t first_token_at_or_above(uint32_t limit) const;
  // 16 hex digits standing for the tokens: a resumed run compares its shard's with the one its
  // checkpoint's run read, to say that a shard rewritten at the same path holds other tokens.
  // Shards up to 64 MiB are read whole; larger ones in 256 windows of 64 KiB spread over them
  // (and their token count), so that start-up stays quick: a change confined between the
  // windows of a large shard goes unseen.
  std::string fingerprint() const;

 private:
  std::string path_;
  ShardFormat format_ = ShardFormat::Auto;
  MappedFile file_;
  const uint8_t* tokens_ = nullptr;
  size_t count_ = 0;
  uint32_t bytes_per_token_ = 2;
  uint32_t vocab_size_ = 0;
};

}  // namespace forge
