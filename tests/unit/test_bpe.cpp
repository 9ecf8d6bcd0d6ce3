// forge's GPT-2 BPE against tiktoken and Hugging Face's GPT2TokenizerFast (both built offline
// from the same two files by tests/tools/bpe_reference.py): every token equal on the fortunes
// corpus, on tests/data/bpe_hard_cases.txt, on invalid UTF-8, on every Unicode code point and on
// very long pieces; decoding gives the bytes back. A missing python, tiktoken or transformers
// fails these tests (the reference is the point), it never skips them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "forge/core/error.h"
#include "forge/data/gpt2_bpe.h"
#include "forge/data/tokenize_cmd.h"

namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  if (const char* env = std::getenv("FORGE_SOURCE_DIR"); env && *env) return env;
  return FORGE_SOURCE_DIR;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << p;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
  ASSERT_TRUE(f.good()) << "cannot write " << p;
}

std::vector<uint32_t> read_u32(const fs::path& p) {
  const std::string b = read_file(p);
  std::vector<uint32_t> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

const forge::Gpt2Bpe& tok() {
  static const auto* t = new forge::Gpt2Bpe(forge::find_gpt2_vocab_dir(source_dir()));
  return *t;
}

// The fortunes corpus: plain text files (not the .dat indexes, not the .u8 links).
std::vector<fs::path> fortune_files() {
  std::vector<fs::path> files;
  const fs::path dir = "/usr/share/games/fortunes";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto ext = e.path().extension();
    if (e.is_symlink() || !e.is_regular_file() || ext == ".dat" || ext == ".u8") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Invalid UTF-8 in every shape tiktoken's str-only API cannot see, next to valid text.
std::string invalid_utf8_cases() {
  std::string s;
  const char* cases[] = {
      "\xff", "lone \xff in text", "\xfe\xff", "overlong \xc0\xaf and \xe0\x80\xaf",
      "surrogate \xed\xa0\x80 \xed\xbf\xbf", "too big \xf4\x90\x80\x80 \xf8\x88\x80\x80\x80",
      "truncated euro \xe2\x82 then text", "\x80\x80 continuation bytes", "caf\xe9 na\xefve",
      "hello \xff world, yes", " \xff", "\xff ", "'\xffs it\xff's", "12\xff" "34", "a\xe2\x80 b",
      "\xe2\x80\xe2\x80\xe2\x80", "ab\xff" "cd\xfe  \n\nx", "emoji cut \xf0\x9f\x98 here",
      "\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xe2\x82\x28 \xf0\x28\x8c\xbc \xf0\x90\x28\xbc",
      "spaces   \xff   around", "\n\xff\n", "\t\xff\t", "\xef\xbb\xbf BOM then \xef\xbf"};
  for (const char* c : cases) {
    s += c;
    s += '\n';
  }
  s += std::string("nul\0byte\0\0", 11);
  s += "ends truncated \xf0\x9f\x98";
  return s;
}

// " " + every code point (no surrogates): every character's class under the pattern
// (letter, number, space, other) decides how it splits from the space before it, so this
// compares PCRE2's Unicode tables with tiktoken's and Oniguruma's, character by character.
std::string all_code_points() {
  std::string s;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    s += ' ';
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

// Pieces far longer than any word: the heap-based merge and the JIT stack must cope.
std::string long_pieces() {
  std::string s;
  s += std::string(100000, ' ') + "x";
  s += std::string(20000, '\n');
  s += " " + std::string(100000, 'a');
  s += " " + std::string(30000, '7');
  s += " ";
  for (int i = 0; i < 20000; ++i) s += "\xe2\x80";  // one invalid run of 40000 bytes
  s += " ";
  for (int i = 0; i < 10000; ++i) s += "ab";
  s += std::string(50000, '!');
  return s;
}

std::string describe_mismatch(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
                              const forge::Gpt2Bpe& t) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  std::ostringstream os;
  os << "lengths " << got.size() << " vs " << want.size() << ", first difference at token " << i
     << ":";
  auto show = [&](const char* who, const std::vector<uint32_t>& v) {
    os << "\n  " << who << ":";
    for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(v.size(), i + 5); ++k) {
      os << " " << v[k] << "(";
      for (unsigned char c : t.token_bytes(v[k]))
        if (c >= 0x20 && c < 0x7f) os << c; else os << "\\x" << std::hex << int(c) << std::dec;
      os << ")";
    }
  };
  show("forge", got);
  show("reference", want);
  return os.str();
}

// Runs the Python reference on files; returns [file][0 = tiktoken, 1 = hf] token lists.
std::vector<std::array<std::vector<uint32_t>, 2>> reference(const std::vector<fs::path>& files,
                                                            bool allow_special,
                                                            const std::string& tag) {
  const fs::path out = fs::temp_directory_path() / ("forge_bpe_ref_" + tag + "_" +
                                                    std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string python = source_dir() + "/.venv/bin/python";
  std::string cmd = "'" + python + "' '" + source_dir() + "/tests/tools/bpe_reference.py'" +
                    (allow_special ? " --allow-special" : "") + " --out-dir '" + out.string() + "'";
  for (const auto& f : files) cmd += " '" + f.string() + "'";
  const fs::path log = out.string() + ".log";
  cmd += " > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::vector<std::array<std::vector<uint32_t>, 2>> result(files.size());
  EXPECT_EQ(rc, 0) << "the reference (tiktoken + transformers under " << python
                   << ") failed; this test needs them:\n" << cmd << "\n" << read_file(log);
  if (rc != 0) return {};
  for (size_t i = 0; i < files.size(); ++i) {
    result[i][0] = read_u32(out / (std::to_string(i) + ".tiktoken.u32"));
    result[i][1] = read_u32(out / (std::to_string(i) + ".hf.u32"));
  }
  fs::remove_all(out);
  fs::remove(log);
  return result;
}

// forge == tiktoken == HF on every file, and decode(encode(x)) == x.
void expect_identical(const std::vector<fs::path>& files, bool allow_special, const std::string& tag) {
  const auto& t = tok();
  const auto refs = reference(files, allow_special, tag);
  ASSERT_EQ(refs.size(), files.size());
  size_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string text = read_file(files[i]);
    const auto got = t.encode(text, allow_special);
    EXPECT_EQ(got, refs[i][0]) << files[i] << " vs tiktoken: " << describe_mismatch(got, refs[i][0], t);
    EXPECT_EQ(got, refs[i][1]) << files[i] << " vs HF GPT2TokenizerFast: "
                               << describe_mismatch(got, refs[i][1], t);
    EXPECT_EQ(t.decode_bytes(got), text) << files[i] << ": decode";
    total += got.size();
  }
  EXPECT_GT(total, 0u);
}

fs::path temp_file(const std::string& name, const std::string& bytes) {
  const fs::path p = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  write_file(p, bytes);
  return p;
}

}  // namespace

TEST(Bpe, ByteToUnicodeIsGpt2s) {
  const auto& m = forge::gpt2_byte_to_unicode();
  ASSERT_EQ(m.size(), 256u);
  EXPECT_EQ(m['!'], uint32_t('!'));
  EXPECT_EQ(m[0xFF], 0xFFu);
  EXPECT_EQ(m[0], 0x100u);       // 'Ā'
  EXPECT_EQ(m[' '], 0x120u);     // 'Ġ'
  EXPECT_EQ(m['\n'], 0x10Au);    // 'Ċ'
  EXPECT_EQ(m[0xAD], 0x143u);    // soft hyphen, the last unprintable byte
  std::vector<uint32_t> sorted(m);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  EXPECT_EQ(forge::gpt2_bytes_to_token_string(" hi\n"), "\xc4\xa0hi\xc4\x8a");
}

TEST(Bpe, KnownTokens) {
  const auto& t = tok();
  EXPECT_EQ(t.vocab_size(), 50257u);
  EXPECT_EQ(t.num_merges(), 50000u);
  EXPECT_EQ(t.eot_token(), std::optional<uint32_t>(50256));
  EXPECT_EQ(t.encode_ordinary("hello world"), (std::vector<uint32_t>{31373, 995}));
  EXPECT_EQ(t.encode_ordinary(""), std::vector<uint32_t>{});
  EXPECT_EQ(t.encode("<|endoftext|>", true), std::vector<uint32_t>{50256});
  EXPECT_EQ(t.encode("a<|endoftext|>b", true), (std::vector<uint32_t>{64, 50256, 65}));
  EXPECT_EQ(t.encode_ordinary("a<|endoftext|>b"),
            (std::vector<uint32_t>{64, 27, 91, 437, 1659, 5239, 91, 29, 65}));
  // The Tokenizer interface never turns text into the special token.
  const forge::Tokenizer& base = t;
  EXPECT_EQ(base.encode("<|endoftext|>"), t.encode_ordinary("<|endoftext|>"));
  EXPECT_EQ(t.decode_bytes(std::vector<uint32_t>{31373, 50256, 995}), "hello<|endoftext|> world");
  EXPECT_THROW(t.decode_bytes(std::vector<uint32_t>{50257}), forge::Error);
}

TEST(Bpe, FortunesMatchTiktokenAndHF) {
  const auto files = fortune_files();
  ASSERT_GE(files.size(), 20u) << "the fortunes corpus (Debian package fortunes) is missing";
  expect_identical(files, false, "fortunes");
}

TEST(Bpe, HardCasesMatchTiktokenAndHF) {
  const fs::path hard = fs::path(source_dir()) / "tests/data/bpe_hard_cases.txt";
  const fs::path invalid = temp_file("forge_bpe_invalid", invalid_utf8_cases());
  const fs::path longp = temp_file("forge_bpe_long", long_pieces());
  const fs::path allcp = temp_file("forge_bpe_allcp", all_code_points());
  expect_identical({hard, invalid, longp, allcp}, false, "hard");
  expect_identical({hard, invalid}, true, "hard_special");
  fs::remove(invalid);
  fs::remove(longp);
  fs::remove(allcp);
}

TEST(Bpe, DecodeRoundTripsAnyBytes) {
  const auto& t = tok();
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 300, '\0');
    // Mostly ASCII with some high bytes, so pieces mix valid and invalid UTF-8.
    for (auto& c : s) c = static_cast<char>(rng() % 4 ? rng() % 128 : rng() % 256);
    EXPECT_EQ(t.decode_bytes(t.encode_ordinary(s)), s);
    EXPECT_EQ(t.decode_bytes(t.encode(s, true)), s);
  }
  const std::string hard = read_file(fs::path(source_dir()) / "tests/data/bpe_hard_cases.txt");
  EXPECT_EQ(t.decode_bytes(t.encode_ordinary(hard)), hard);
  EXPECT_EQ(t.decode_bytes(t.encode(hard, true)), hard);
}

TEST(Bpe, BatchIsDeterministicWhateverTheThreads) {
  const auto& t = tok();
  std::vector<std::string> docs;
  for (const auto& f : fortune_files()) {
    const std::string text = read_file(f);
    // One document per fortune (they are separated by lines holding "%").
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find("\n%\n", pos);
      if (end == std::string::npos) end = text.size();
      docs.push_back(text.substr(pos, end - pos));
      pos = end + 3;
    }
  }
  ASSERT_GT(docs.size(), 1000u);
  std::vector<std::string_view> views(docs.begin(), docs.end());
  const auto one = t.encode_batch(views, false, 1);
  const auto four = t.encode_batch(views, false, 4);
  ASSERT_EQ(one.size(), docs.size());
  EXPECT_EQ(one, four);
  for (size_t i = 0; i < docs.size(); i += 97) EXPECT_EQ(one[i], t.encode_ordinary(docs[i]));
}

TEST(Bpe, BadFilesGiveErrorsNamingThem) {
  const fs::path dir = fs::temp_directory_path() / ("forge_bpe_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string good_dir = forge::find_gpt2_vocab_dir(source_dir());
  auto expect_error = [&](const std::string& enc, const std::string& merges, const std::string& needle) {
    write_file(dir / "encoder.json", enc);
    write_file(dir / "vocab.bpe", merges);
    try {
      forge::Gpt2Bpe t(dir.string());
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const forge::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("{not json", "", "encoder.json: not valid JSON");
  expect_error("[1,2]", "", "expected a JSON object");
  expect_error(R"({"a": 0, "<|endoftext|>": 5})", "", "expected an id in [0, 2)");
  expect_error(R"({"a": 0, "b": 1})", "", "expected the special token");
  expect_error(R"({"a": 0, "<|endoftext|>": 1})", "", "expected a token for every byte");
  // The real vocabulary with a broken merges file.
  const std::string enc = read_file(fs::path(good_dir) / "encoder.json");
  expect_error(enc, "#version: 0.2\nĠ t\nthree parts here\n", "vocab.bpe:3: expected two token strings");
  expect_error(enc, "#version: 0.2\nĠ t\nĠ t\n", "vocab.bpe:3: merge \"Ġ t\" appears twice");
  expect_error(enc, "#version: 0.2\nzzzzq zzzzq\n", "must all be tokens");
  try {
    forge::Gpt2Bpe t((dir / "missing").string());
    ADD_FAILURE() << "no error for a missing folder";
  } catch (const forge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing/encoder.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Bpe, TokenizeCommandPrintsIdsOnOneLine) {
  const fs::path p = temp_file("forge_bpe_cmd", "hello world");
  std::ostringstream out;
  EXPECT_EQ(forge::run_tokenize("gpt2", p.string(), out), 0);
  EXPECT_EQ(out.str(), "31373 995\n");
  std::ostringstream out2;
  EXPECT_EQ(forge::run_tokenize("bytes", p.string(), out2), 0);
  EXPECT_EQ(out2.str(), "104 101 108 108 111 32 119 111 114 108 100\n");
  std::ostringstream out3;
  EXPECT_THROW(forge::run_tokenize("nope", p.string(), out3), forge::Error);
  EXPECT_THROW(forge::run_tokenize("gpt2", p.string() + ".missing", out3), forge::Error);
  fs::remove(p);
}
