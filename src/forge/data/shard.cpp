#include "forge/data/shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "forge/core/error.h"
#include "forge/io/atomic_file.h"

namespace forge {
namespace {

constexpr char kForgeMagic[8] = {'F', 'R', 'G', 'T', 'O', 'K', 'S', '\0'};
constexpr size_t kForgeHeaderBytes = 64;
constexpr uint32_t kForgeVersion = 1;
constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

const char* format_name(ShardFormat f) {
  switch (f) {
    case ShardFormat::Auto:
      return "auto";
    case ShardFormat::Forge:
      return "forge";
    case ShardFormat::NanoGPT:
      return "nanogpt";
    case ShardFormat::LlmC:
      return "llmc";
  }
  return "?";
}

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

ShardFormat parse_shard_format(const std::string& s) {
  if (s == "auto") return ShardFormat::Auto;
  if (s == "forge") return ShardFormat::Forge;
  if (s == "nanogpt") return ShardFormat::NanoGPT;
  if (s == "llmc") return ShardFormat::LlmC;
  fail("shard format: expected one of auto|forge|nanogpt|llmc, got \"{}\"", s);
}

ShardWriter::ShardWriter(std::string path, uint32_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size) {
  if (vocab_size_ == 0) fail("{}: shard vocabulary size must be positive", path_);
}

void ShardWriter::append(const uint32_t* tokens, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] >= vocab_size_)
      fail("{}: token {} at index {} is outside the vocabulary of {}", path_, tokens[i],
           tokens_.size() + i, vocab_size_);
  tokens_.insert(tokens_.end(), tokens, tokens + n);
}

void ShardWriter::finish() {
  // uint16 halves the file (and the page-cache footprint) whenever the vocabulary allows it.
  const uint32_t bytes_per_token = vocab_size_ <= 65536 ? 2 : 4;
  uint8_t header[kForgeHeaderBytes] = {};
  std::memcpy(header, kForgeMagic, 8);
  const uint64_t count = tokens_.size(), vocab = vocab_size_;
  std::memcpy(header + 8, &kForgeVersion, 4);
  std::memcpy(header + 12, &bytes_per_token, 4);
  std::memcpy(header + 16, &count, 8);
  std::memcpy(header + 24, &vocab, 8);

  write_file_atomic(path_, [&](std::FILE* f) {
    auto put = [&](const void* p, size_t n) {
      if (n && std::fwrite(p, 1, n, f) != n)
        fail("{}: write failed: {}", path_, std::strerror(errno));
    };
    put(header, sizeof header);
    if (bytes_per_token == 4) {
      put(tokens_.data(), tokens_.size() * 4);
    } else {
      // Narrow in chunks so a large shard does not need a second full-size buffer.
      std::vector<uint16_t> chunk(1 << 16);
      for (size_t i = 0; i < tokens_.size(); i += chunk.size()) {
        size_t n = std::min(chunk.size(), tokens_.size() - i);
        for (size_t k = 0; k < n; ++k) chunk[k] = static_cast<uint16_t>(tokens_[i + k]);
        put(chunk.data(), n * 2);
      }
    }
  });
}

ShardReader::ShardReader(const std::string& path, ShardFormat format)
    : path_(path), file_(path, "token shard file") {
  const uint8_t* const map = file_.data();
  const size_t map_size = file_.size();
  const bool forge_magic = map_size >= 8 && std::memcmp(map, kForgeMagic, 8) == 0;
  const bool llmc_magic = map_size >= 4 && load_le<int32_t>(map) == kLlmcMagic;
  if (format == ShardFormat::Auto) {
    if (forge_magic)
      format = ShardFormat::Forge;
    else if (llmc_magic)
      format = ShardFormat::LlmC;
    else if (map_size % 2 == 0)
      format = ShardFormat::NanoGPT;
    else
      fail(
          "{}: not a token shard: no forge or llm.c magic and an odd size ({} bytes) for raw "
          "uint16 tokens",
          path, map_size);
  }
  format_ = format;

  size_t header_bytes = 0;
  uint64_t declared = 0;
  switch (format) {
    case ShardFormat::Forge: {
      if (!forge_magic) fail("{}: not a forge token shard (magic \"FRGTOKS\" missing)", path);
      if (map_size < kForgeHeaderBytes)
        fail("{}: truncated forge shard: {} bytes, header needs {}", path, map_size,
             kForgeHeaderBytes);
      uint32_t version = load_le<uint32_t>(map + 8);
      if (version != kForgeVersion)
        fail("{}: forge shard version {} is not supported (expected {})", path, version,
             kForgeVersion);
      bytes_per_token_ = load_le<uint32_t>(map + 12);
      if (bytes_per_token_ != 2 && bytes_per_token_ != 4)
        fail("{}: forge shard: bytes per token must be 2 or 4, got {}", path, bytes_per_token_);
      declared = load_le<uint64_t>(map + 16);
      uint64_t vocab = load_le<uint64_t>(map + 24);
      if (vocab > UINT32_MAX) fail("{}: forge shard: vocabulary size {} out of range", path, vocab);
      vocab_size_ = static_cast<uint32_t>(vocab);
      header_bytes = kForgeHeaderBytes;
      break;
    }
    case ShardFormat::LlmC: {
      if (!llmc_magic) fail("{}: not an llm.c token shard (magic 20240520 missing)", path);
      if (map_size < kLlmcHeaderBytes)
        fail("{}: truncated llm.c shard: {} bytes, header needs {}", path, map_size,
             kLlmcHeaderBytes);
      int32_t version = load_le<int32_t>(map + 4);
      if (version != 1)
        fail("{}: llm.c shard version {} is not supported (expected 1 = uint16 tokens)", path,
             version);
      int32_t n = load_le<int32_t>(map + 8);
      if (n < 0) fail("{}: llm.c shard: negative token count {}", path, n);
      declared = static_cast<uint64_t>(n);
      bytes_per_token_ = 2;
      header_bytes = kLlmcHeaderBytes;
      break;
    }
    case ShardFormat::NanoGPT: {
      if (map_size % 2 != 0)
        fail("{}: raw uint16 token file has an odd size ({} bytes)", path, map_size);
      bytes_per_token_ = 2;
      declared = map_size / 2;
      header_bytes = 0;
      break;
    }
    case ShardFormat::Auto:
      break;
  }
  const uint64_t available = (map_size - header_bytes) / bytes_per_token_;
  if (declared > available)
    fail("{}: truncated {} shard: header says {} tokens but the file holds {}", path,
         format_name(format), declared, available);
  if ((map_size - header_bytes) != declared * bytes_per_token_)
    fail("{}: {} shard has {} trailing bytes after its {} tokens", path, format_name(format),
         map_size - header_bytes - declared * bytes_per_token_, declared);
  count_ = static_cast<size_t>(declared);
  tokens_ = map + header_bytes;
  if (count_ > 0 && bytes_per_token_ == 2)
    ::madvise(const_cast<uint8_t*>(map), map_size, MADV_WILLNEED);
}

std::string ShardReader::fingerprint() const {
  const size_t n = count_ * bytes_per_token_;
  // 64-bit words mixed by multiply and rotate; a word at a time keeps a 64 MiB shard in the
  // tens of milliseconds.
  uint64_t h = 0x9e3779b97f4a7c15ull ^ count_ ^ (uint64_t{bytes_per_token_} << 56);
  const auto mix = [&h](uint64_t w) {
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h = (h << 29) | (h >> 35);
  };
  const auto hash_range = [&](size_t begin, size_t end) {
    size_t i = begin;
    for (; i + 8 <= end; i += 8) mix(load_le<uint64_t>(tokens_ + i));
    uint64_t tail = 0;
    for (size_t k = 0; i + k < end; ++k) tail |= uint64_t{tokens_[i + k]} << (8 * k);
    mix(tail ^ (end - begin));
  };
  constexpr size_t kWhole = size_t{64} << 20, kWindow = size_t{64} << 10, kWindows = 256;
  if (n <= kWhole) {
    hash_range(0, n);
  } else {
    for (size_t k = 0; k < kWindows; ++k) {
      const size_t begin = (n - kWindow) * k / (kWindows - 1);  // the last ends at n
      hash_range(begin, begin + kWindow);
    }
  }
  return fmt::format("{:016x}", h);
}

uint32_t ShardReader::operator[](size_t i) const {
  if (i >= count_) fail("{}: token index {} out of range ({} tokens)", path_, i, count_);
  return bytes_per_token_ == 2 ? load_le<uint16_t>(tokens_ + 2 * i)
                               : load_le<uint32_t>(tokens_ + 4 * i);
}

void ShardReader::read(size_t start, size_t n, int32_t* dst) const {
  if (start > count_ || n > count_ - start)
    fail("{}: read of tokens [{}, {}) out of range ({} tokens)", path_, start, start + n, count_);
  if (bytes_per_token_ == 2) {
    const uint8_t* p = tokens_ + 2 * start;
    for (size_t i = 0; i < n; ++i) dst[i] = load_le<uint16_t>(p + 2 * i);
  } else {
    const uint8_t* p = tokens_ + 4 * start;
    for (size_t i = 0; i < n; ++i) {
      uint32_t t = load_le<uint32_t>(p + 4 * i);
      if (t > static_cast<uint32_t>(INT32_MAX))
        fail("{}: token {} at index {} does not fit int32", path_, t, start + i);
      dst[i] = static_cast<int32_t>(t);
    }
  }
}

size_t ShardReader::first_token_at_or_above(uint32_t limit) const {
  if (bytes_per_token_ == 2) {
    for (size_t i = 0; i < count_; ++i)
      if (load_le<uint16_t>(tokens_ + 2 * i) >= limit) return i;
  } else {
    for (size_t i = 0; i < count_; ++i)
      if (load_le<uint32_t>(tokens_ + 4 * i) >= limit) return i;
  }
  return count_;
}

}  // namespace forge
