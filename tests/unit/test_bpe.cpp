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
#include "forge/data/bpe_train.h"
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
      "\xff",
      "lone \xff in text",
      "\xfe\xff",
      "overlong \xc0\xaf and \xe0\x80\xaf",
      "surrogate \xed\xa0\x80 \xed\xbf\xbf",
      "too big \xf4\x90\x80\x80 \xf8\x88\x80\x80\x80",
      "truncated euro \xe2\x82 then text",
      "\x80\x80 continuation bytes",
      "caf\xe9 na\xefve",
      "hello \xff world, yes",
      " \xff",
      "\xff ",
      "'\xffs it\xff's",
      "12\xff"
      "34",
      "a\xe2\x80 b",
      "\xe2\x80\xe2\x80\xe2\x80",
      "ab\xff"
      "cd\xfe  \n\nx",
      "emoji cut \xf0\x9f\x98 here",
      "\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xe2\x82\x28 \xf0\x28\x8c\xbc \xf0\x90\x28\xbc",
      "spaces   \xff   around",
      "\n\xff\n",
      "\t\xff\t",
      "\xef\xbb\xbf BOM then \xef\xbf",
      "\xff<|endoftext|>\xfe <|endoftext|>\xe2\x82<|endoftext|>"};
  for (const char* c : cases) {
    s += c;
    s += '\n';
  }
  s += std::string("nul\0byte\0\0", 11);
  s += "ends truncated \xf0\x9f\x98";
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
        if (c >= 0x20 && c < 0x7f)
          os << c;
        else
          os << "\\x" << std::hex << int(c) << std::dec;
      os << ")";
    }
  };
  show("forge", got);
  show("reference", want);
  return os.str();
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
  EXPECT_EQ(m[0], 0x100u);     // 'Ā'
  EXPECT_EQ(m[' '], 0x120u);   // 'Ġ'
  EXPECT_EQ(m['\n'], 0x10Au);  // 'Ċ'
  EXPECT_EQ(m[0xAD], 0x143u);  // soft hyphen, the last unprintable byte
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
  // But a prompt may start a document as the shards do: sample reads it through this one.
  EXPECT_EQ(base.encode_with_special("<|endoftext|>The"), (std::vector<uint32_t>{50256, 464}));
  const auto bytes = forge::make_tokenizer("bytes");
  EXPECT_EQ(bytes->encode_with_special("<|"), (std::vector<uint32_t>{'<', '|'}));
  EXPECT_EQ(t.decode_bytes(std::vector<uint32_t>{31373, 50256, 995}), "hello<|endoftext|> world");
  EXPECT_THROW(t.decode_bytes(std::vector<uint32_t>{50257}), forge::Error);
}

// Every input that is compared with the reference, encoded by one run of
// tests/tools/bpe_reference.py (loading tiktoken and transformers takes seconds).
class BpeReference : public ::testing::Test {
 protected:
  struct Case {
    fs::path path;
    bool allow_special;
    std::vector<uint32_t> tiktoken, hf;
    bool pieces = false;  // compare pre-tokenisation piece ends with HF's instead
    std::vector<uint32_t> hf_piece_ends;
  };
  static inline std::vector<Case>* cases_ = nullptr;
  static inline std::string error_;
  static inline fs::path tmp_;

  static void SetUpTestSuite() {
    tmp_ = fs::temp_directory_path() / ("forge_bpe_ref_" + std::to_string(::getpid()));
    fs::remove_all(tmp_);
    fs::create_directories(tmp_ / "out");
    cases_ = new std::vector<Case>();
    for (const auto& f : fortune_files()) cases_->push_back({f, false, {}, {}, false, {}});
    const fs::path hard = fs::path(source_dir()) / "tests/data/bpe_hard_cases.txt";
    write_file(tmp_ / "invalid_utf8.txt", invalid_utf8_cases());
    write_file(tmp_ / "long_pieces.txt", long_pieces());
    // The sweep holds the characters of Unicode 14 (Python 3.11's unicodedata), the version
    // of Debian's PCRE2 10.42: characters assigned later are letters to tiktoken and HF
    // (newer tables) but unassigned to PCRE2, and may split differently.
    const std::string python = source_dir() + "/.venv/bin/python";
    const std::string script = source_dir() + "/tests/tools/bpe_reference.py";
    const fs::path log = tmp_ / "reference.log";
    const std::string sweep_cmd = "'" + python + "' '" + script + "' --write-code-point-sweep '" +
                                  (tmp_ / "code_point_sweep.txt").string() + "' > '" +
                                  log.string() + "' 2>&1";
    if (std::system(sweep_cmd.c_str()) != 0) {
      error_ = "writing the code-point sweep failed:\n" + sweep_cmd + "\n" + read_file(log);
      return;
    }
    for (const auto& p :
         {hard, tmp_ / "invalid_utf8.txt", tmp_ / "long_pieces.txt", tmp_ / "code_point_sweep.txt"})
      cases_->push_back({p, false, {}, {}, false, {}});
    cases_->push_back({hard, true, {}, {}, false, {}});
    cases_->push_back({tmp_ / "invalid_utf8.txt", true, {}, {}, false, {}});
    cases_->push_back({hard, false, {}, {}, true, {}});
    cases_->push_back({tmp_ / "code_point_sweep.txt", false, {}, {}, true, {}});

    std::string cmd =
        "'" + python + "' '" + script + "' --out-dir '" + (tmp_ / "out").string() + "'";
    for (const auto& c : *cases_)
      cmd += std::string(" '") +
             (c.pieces          ? "pieces:"
              : c.allow_special ? "special:"
                                : "") +
             c.path.string() + "'";
    cmd += " > '" + log.string() + "' 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      error_ = "the reference (tiktoken + transformers under " + python +
               ") failed; these tests need it:\n" + cmd + "\n" + read_file(log);
      return;
    }
    for (size_t i = 0; i < cases_->size(); ++i) {
      if ((*cases_)[i].pieces) {
        (*cases_)[i].hf_piece_ends = read_u32(tmp_ / "out" / (std::to_string(i) + ".hfpieces.u32"));
        continue;
      }
      (*cases_)[i].tiktoken = read_u32(tmp_ / "out" / (std::to_string(i) + ".tiktoken.u32"));
      (*cases_)[i].hf = read_u32(tmp_ / "out" / (std::to_string(i) + ".hf.u32"));
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
    delete cases_;
    cases_ = nullptr;
  }

  // forge == tiktoken == HF on every case whose file name contains `name` (and whose
  // special-token mode is allow_special), and decode(encode(x)) == x.
  void expect_identical(const std::string& name, bool allow_special) {
    ASSERT_TRUE(error_.empty()) << error_;
    const auto& t = tok();
    size_t files = 0, tokens = 0;
    for (const auto& c : *cases_) {
      if (c.pieces || c.allow_special != allow_special ||
          c.path.string().find(name) == std::string::npos)
        continue;
      const std::string text = read_file(c.path);
      const auto got = t.encode(text, allow_special);
      EXPECT_EQ(got, c.tiktoken) << c.path
                                 << " vs tiktoken: " << describe_mismatch(got, c.tiktoken, t);
      EXPECT_EQ(got, c.hf) << c.path
                           << " vs HF GPT2TokenizerFast: " << describe_mismatch(got, c.hf, t);
      EXPECT_TRUE(t.decode_bytes(got) == text) << c.path << ": decode(encode(x)) != x";
      ++files;
      tokens += got.size();
    }
    EXPECT_GT(files, 0u) << "no case named " << name;
    EXPECT_GT(tokens, 0u);
  }

  // forge's pieces == HF's pieces, which shows a Unicode class difference even where the
  // tokens would hide it (bytes of rare characters seldom merge across a piece boundary).
  void expect_same_pieces(const std::string& name) {
    ASSERT_TRUE(error_.empty()) << error_;
    size_t files = 0;
    for (const auto& c : *cases_) {
      if (!c.pieces || c.path.string().find(name) == std::string::npos) continue;
      const std::string text = read_file(c.path);
      const auto pieces = tok().pretokenize(text);
      std::vector<uint32_t> ends;
      for (const auto& p : pieces)
        ends.push_back(static_cast<uint32_t>(p.data() + p.size() - text.data()));
      size_t i = 0;
      while (i < ends.size() && i < c.hf_piece_ends.size() && ends[i] == c.hf_piece_ends[i]) ++i;
      EXPECT_TRUE(i == ends.size() && i == c.hf_piece_ends.size())
          << c.path << ": " << ends.size() << " pieces vs HF's " << c.hf_piece_ends.size()
          << "; first different piece #" << i << " starts at byte " << (i ? ends[i - 1] : 0)
          << ": forge ends it at " << (i < ends.size() ? ends[i] : 0) << ", HF at "
          << (i < c.hf_piece_ends.size() ? c.hf_piece_ends[i] : 0);
      ++files;
    }
    EXPECT_GT(files, 0u) << "no case named " << name;
  }
};

TEST_F(BpeReference, FortunesCorpus) {
  ASSERT_GE(fortune_files().size(), 20u)
      << "the fortunes corpus (Debian package fortunes) is missing";
  expect_identical("/usr/share/games/fortunes/", false);
}
TEST_F(BpeReference, HardCases) { expect_identical("bpe_hard_cases.txt", false); }
TEST_F(BpeReference, HardCasesWithSpecialTokens) { expect_identical("bpe_hard_cases.txt", true); }
TEST_F(BpeReference, InvalidUtf8) { expect_identical("invalid_utf8.txt", false); }
TEST_F(BpeReference, InvalidUtf8WithSpecialTokens) { expect_identical("invalid_utf8.txt", true); }
TEST_F(BpeReference, LongPieces) { expect_identical("long_pieces.txt", false); }
TEST_F(BpeReference, EveryCodePointTokenizesTheSame) {
  expect_identical("code_point_sweep.txt", false);
}
TEST_F(BpeReference, EveryCodePointSplitsLikeHF) { expect_same_pieces("code_point_sweep.txt"); }
TEST_F(BpeReference, HardCasesSplitLikeHF) { expect_same_pieces("bpe_hard_cases.txt"); }

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
  auto expect_error = [&](const std::string& enc, const std::string& merges,
                          const std::string& needle) {
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
  expect_error(enc, "#version: 0.2\nĠ t\nthree parts here\n",
               "vocab.bpe:3: expected two token strings");
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

// ---------------------------------------------------------------------------------------
// BPE training.

TEST(BpeTrain, LearnsByCountWithDeterministicTies) {
  // Pieces "ab", " ab", " ab", " cd": (a,b) is most frequent, then (" ", ab); (c,d) and
  // (" ", c) tie at 1 and the smaller ids win ('c' is id 66, " " is id 220, as in GPT-2).
  const auto v = forge::train_bpe({"ab ab ab cd"}, 260);
  ASSERT_EQ(v.merges.size(), 3u);
  auto spelled = [&](size_t k) {
    return v.token_bytes[v.merges[k].first] + "|" + v.token_bytes[v.merges[k].second];
  };
  EXPECT_EQ(spelled(0), "a|b");
  EXPECT_EQ(spelled(1), " |ab");
  EXPECT_EQ(spelled(2), "c|d");
  EXPECT_EQ(v.token_bytes[256], "ab");
  EXPECT_EQ(v.token_bytes[0], "!");  // GPT-2's byte order: printable bytes first
  EXPECT_EQ(v.token_bytes[188], std::string(1, '\0'));
  EXPECT_EQ(v.token_bytes[220], " ");
  // Runs out of pairs: fewer merges, no error.
  EXPECT_EQ(forge::train_bpe({"ab"}, 1000).merges.size(), 1u);
  EXPECT_THROW(forge::train_bpe({"ab"}, 256), forge::Error);
}

TEST(BpeTrain, NeverGivesOneByteStringTwoTokens) {
  // "abc" can be made as (ab, c) or (a, bc); encoder.json can hold it once.
  std::string text;
  for (int i = 0; i < 50; ++i) text += " abc abx zbc";
  const auto v = forge::train_bpe({text}, 300);
  std::vector<std::string> sorted = v.token_bytes;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
}

// Learned on the fortunes corpus, written in GPT-2's format: forge, tiktoken and
// GPT2TokenizerFast loaded from the learned files tokenize the corpus identically, and
// training twice writes the same bytes.
TEST(BpeTrain, FortunesVocabularyLoadsInTiktokenAndHF) {
  const auto files = fortune_files();
  ASSERT_GE(files.size(), 20u);
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.string());
  const fs::path dir =
      fs::temp_directory_path() / ("forge_bpe_train_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  testing::internal::CaptureStdout();
  forge::run_tokenizer_train(2000, paths, (dir / "a").string());
  forge::run_tokenizer_train(2000, paths, (dir / "b").string());
  const std::string summary = testing::internal::GetCapturedStdout();
  EXPECT_NE(summary.find("learned 1743 merges"), std::string::npos) << summary;
  EXPECT_EQ(read_file(dir / "a/encoder.json"), read_file(dir / "b/encoder.json"));
  EXPECT_EQ(read_file(dir / "a/vocab.bpe"), read_file(dir / "b/vocab.bpe"));

  const forge::Gpt2Bpe learned((dir / "a").string());
  EXPECT_EQ(learned.vocab_size(), 2000u);
  EXPECT_EQ(learned.eot_token(), std::optional<uint32_t>(1999));
  EXPECT_EQ(learned.num_merges(), 1743u);

  const std::string python = source_dir() + "/.venv/bin/python";
  std::string cmd = "'" + python + "' '" + source_dir() +
                    "/tests/tools/bpe_reference.py' --vocab-dir '" + (dir / "a").string() +
                    "' --out-dir '" + (dir / "out").string() + "'";
  for (const auto& f : files) cmd += " '" + f.string() + "'";
  cmd += " > '" + (dir / "log").string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << "the reference (tiktoken + transformers under " << python << ") failed:\n"
      << cmd << "\n"
      << read_file(dir / "log");
  size_t tokens = 0, bytes = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string text = read_file(files[i]);
    const auto got = learned.encode_ordinary(text);
    const auto tt = read_u32(dir / "out" / (std::to_string(i) + ".tiktoken.u32"));
    const auto hf = read_u32(dir / "out" / (std::to_string(i) + ".hf.u32"));
    EXPECT_EQ(got, tt) << files[i] << " vs tiktoken: " << describe_mismatch(got, tt, learned);
    EXPECT_EQ(got, hf) << files[i] << " vs HF: " << describe_mismatch(got, hf, learned);
    EXPECT_EQ(learned.decode_bytes(got), text);
    tokens += got.size();
    bytes += text.size();
  }
  // A learned vocabulary must compress its own corpus well below one token per byte.
  EXPECT_LT(tokens, bytes / 2) << tokens << " tokens for " << bytes << " bytes";
  std::printf("learned vocabulary 2000: %zu bytes -> %zu tokens (%.2f bytes/token)\n", bytes,
              tokens, double(bytes) / tokens);
  fs::remove_all(dir);
}
