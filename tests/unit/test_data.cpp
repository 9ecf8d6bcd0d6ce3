// Token shards (all three formats), the byte tokenizer and corpus preparation.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "forge/core/error.h"
#include "forge/data/byte_tokenizer.h"
#include "forge/data/prepare.h"
#include "forge/data/shard.h"
#include "forge/data/tokenizer.h"
#include "forge/io/mapped_file.h"
#include "forge/train/data_loader.h"
#include "test_util.h"

namespace fs = std::filesystem;
using forge_test::error_of;
using forge_test::TempDir;

namespace {

void write_bytes(const std::string& path, const void* data, size_t n) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
void write_text(const std::string& path, const std::string& s) {
  write_bytes(path, s.data(), s.size());
}

std::vector<uint32_t> random_tokens(size_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> dist(0, vocab - 1);
  std::vector<uint32_t> v(n);
  for (auto& t : v) t = dist(rng);
  return v;
}

// An llm.c shard: 256 int32 header (magic, version, count), then uint16 tokens.
std::string llmc_bytes(const std::vector<uint16_t>& tokens, int32_t version = 1,
                       int32_t declared = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = version;
  header[2] = declared >= 0 ? declared : static_cast<int32_t>(tokens.size());
  std::string out(reinterpret_cast<const char*>(header.data()), 1024);
  out.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return out;
}

std::vector<int32_t> read_all(const forge::ShardReader& r) {
  std::vector<int32_t> out(r.size());
  r.read(0, r.size(), out.data());
  return out;
}

}  // namespace

// ---------------------------------------------------------------- shards

TEST(DataShard, ForgeRoundTripWithUint16Tokens) {
  TempDir dir;
  const std::string path = dir / "a.bin";
  auto tokens = random_tokens(1001, 50257, 1);
  tokens[0] = 50256;
  forge::ShardWriter w(path, 50257);
  w.append(tokens.data(), 500);
  w.append(tokens.data() + 500, 501);
  w.finish();
  EXPECT_EQ(fs::file_size(path), 64u + 2 * 1001);  // 2 bytes per token below 65536
  forge::ShardReader r(path);
  EXPECT_EQ(r.format(), forge::ShardFormat::Forge);
  EXPECT_EQ(r.size(), 1001u);
  EXPECT_EQ(r.vocab_size(), 50257u);
  auto all = read_all(r);
  for (size_t i = 0; i < tokens.size(); ++i)
    ASSERT_EQ(static_cast<uint32_t>(all[i]), tokens[i]) << i;
  EXPECT_EQ(r[1000], tokens[1000]);
  std::vector<int32_t> mid(7);
  r.read(333, 7, mid.data());
  for (int i = 0; i < 7; ++i) EXPECT_EQ(static_cast<uint32_t>(mid[i]), tokens[333 + i]);
  EXPECT_NO_THROW(forge::check_shard_vocabulary(r, 50257, "c.json"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()),
            1);  // no temp left
}

TEST(DataShard, ForgeRoundTripWithUint32TokensAboveUint16) {
  TempDir dir;
  const std::string path = dir / "big.bin";
  auto tokens = random_tokens(77, 128256, 2);
  tokens[5] = 128255;
  forge::ShardWriter w(path, 128256);
  w.append(tokens.data(), tokens.size());
  w.finish();
  EXPECT_EQ(fs::file_size(path), 64u + 4 * 77);
  forge::ShardReader r(path, forge::ShardFormat::Forge);
  auto all = read_all(r);
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(static_cast<uint32_t>(all[i]), tokens[i]);
  EXPECT_EQ(r[5], 128255u);
}

TEST(DataShard, EmptyForgeShardRoundTrips) {
  TempDir dir;
  forge::ShardWriter w(dir / "e.bin", 256);
  w.finish();
  forge::ShardReader r(dir / "e.bin");
  EXPECT_EQ(r.size(), 0u);
  EXPECT_THROW(r[0], forge::Error);
}

TEST(DataShard, NanoGptRawUint16IsDetected) {
  TempDir dir;
  const std::string path = dir / "train.bin";
  std::vector<uint16_t> raw = {0, 1, 65535, 50256, 42, 7, 9};
  write_bytes(path, raw.data(), raw.size() * 2);
  forge::ShardReader r(path);
  EXPECT_EQ(r.format(), forge::ShardFormat::NanoGPT);
  EXPECT_EQ(r.size(), raw.size());
  EXPECT_EQ(r.vocab_size(), 0u);
  auto all = read_all(r);
  for (size_t i = 0; i < raw.size(); ++i) EXPECT_EQ(all[i], raw[i]);
  EXPECT_EQ(forge::ShardReader(path, forge::ShardFormat::NanoGPT).size(), raw.size());
}

TEST(DataShard, LlmcShardIsDetectedAndRead) {
  TempDir dir;
  const std::string path = dir / "llmc.bin";
  std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 3};
  std::string bytes = llmc_bytes(tokens);
  write_bytes(path, bytes.data(), bytes.size());
  forge::ShardReader r(path);
  EXPECT_EQ(r.format(), forge::ShardFormat::LlmC);
  EXPECT_EQ(r.size(), tokens.size());
  auto all = read_all(r);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(all[i], tokens[i]);
  EXPECT_EQ(forge::ShardReader(path, forge::ShardFormat::LlmC).size(), tokens.size());
  // Forcing nanoGPT reads the header as tokens: the caller asked for it, so it is allowed.
  EXPECT_EQ(forge::ShardReader(path, forge::ShardFormat::NanoGPT).size(), 512 + tokens.size());
}

TEST(DataShard, TruncatedShardsAreErrorsNamingTheFile) {
  TempDir dir;
  {
    const std::string path = dir / "cut.bin";
    forge::ShardWriter w(path, 256);
    auto t = random_tokens(100, 256, 3);
    w.append(t.data(), t.size());
    w.finish();
    fs::resize_file(path, 64 + 2 * 60);
    std::string msg = error_of([&] { forge::ShardReader r(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated forge shard: header says 100 tokens but the file holds 60"),
              std::string::npos)
        << msg;
  }
  {
    const std::string path = dir / "cut_llmc.bin";
    std::string bytes = llmc_bytes({1, 2, 3}, 1, 10);
    write_bytes(path, bytes.data(), bytes.size());
    std::string msg = error_of([&] { forge::ShardReader r(path); });
    EXPECT_NE(msg.find("truncated llmc shard: header says 10 tokens but the file holds 3"),
              std::string::npos)
        << msg;
  }
  {
    const std::string path = dir / "short_header.bin";
    write_text(path, std::string("FRGTOKS\0\1\0\0\0", 12));
    EXPECT_NE(error_of([&] { forge::ShardReader r(path); }).find("truncated forge shard"),
              std::string::npos);
  }
}

TEST(DataShard, ForeignAndUnsupportedFilesAreRejected) {
  TempDir dir;
  const std::string foreign = dir / "foreign.bin";
  write_text(foreign, "GIF89a some image bytes..");  // odd size, no magic
  EXPECT_NE(error_of([&] { forge::ShardReader r(foreign); }).find("not a token shard"),
            std::string::npos);
  write_text(foreign, "GIF89a some image bytes...");  // even: auto would take it as nanoGPT
  std::string msg = error_of([&] { forge::ShardReader r(foreign, forge::ShardFormat::Forge); });
  EXPECT_NE(msg.find(foreign), std::string::npos);
  EXPECT_NE(msg.find("not a forge token shard"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] {
              forge::ShardReader r(foreign, forge::ShardFormat::LlmC);
            }).find("not an llm.c token shard"),
            std::string::npos);

  const std::string v2 = dir / "v2.bin";
  std::string bytes = llmc_bytes({1, 2}, 2);
  write_bytes(v2, bytes.data(), bytes.size());
  EXPECT_NE(
      error_of([&] { forge::ShardReader r(v2); }).find("llm.c shard version 2 is not supported"),
      std::string::npos);

  const std::string fv = dir / "forge_v9.bin";
  {
    forge::ShardWriter w(fv, 256);
    w.finish();
  }
  {
    std::fstream f(fv, std::ios::in | std::ios::out | std::ios::binary);
    uint32_t nine = 9;
    f.seekp(8);
    f.write(reinterpret_cast<const char*>(&nine), 4);
  }
  EXPECT_NE(
      error_of([&] { forge::ShardReader r(fv); }).find("forge shard version 9 is not supported"),
      std::string::npos);
  EXPECT_NE(error_of([&] { forge::ShardReader r(dir / "missing.bin"); }).find("missing.bin"),
            std::string::npos);
}

TEST(DataShard, TokensOutsideTheVocabularyAreRejected) {
  TempDir dir;
  const std::string path = dir / "v.bin";
  forge::ShardWriter w(path, 300);
  uint32_t bad[] = {1, 299, 300};
  std::string msg = error_of([&] { w.append(bad, 3); });
  EXPECT_NE(msg.find("token 300 at index 2"), std::string::npos) << msg;
  w.append(bad, 2);
  w.finish();
  forge::ShardReader r(path);
  EXPECT_NO_THROW(forge::check_shard_vocabulary(r, 300, "c.json"));
  EXPECT_EQ(r.first_token_at_or_above(300), r.size());
  EXPECT_EQ(r.first_token_at_or_above(299), 1u);
  // Its header says 300: a model of 256 is refused before any token is read.
  std::string vmsg = error_of([&] { forge::check_shard_vocabulary(r, 256, "c.json"); });
  EXPECT_NE(vmsg.find("c.json: field 'model.vocab_size' is 256 but " + path +
                      " was made with a vocabulary of 300"),
            std::string::npos)
      << vmsg;
  // A headerless file says nothing of its vocabulary: every token is read, the first one
  // outside it named (read unchecked, it would index past the embedding's rows).
  const std::string raw_path = dir / "raw.bin";
  const uint16_t raw[] = {1, 255, 7, 256, 65535};
  write_bytes(raw_path, raw, sizeof(raw));
  forge::ShardReader raw_shard(raw_path);
  std::string rmsg = error_of([&] { forge::check_shard_vocabulary(raw_shard, 256, "c.json"); });
  EXPECT_NE(
      rmsg.find(raw_path +
                ": token 256 at index 3 is not below field 'model.vocab_size' (256) of c.json"),
      std::string::npos)
      << rmsg;
  EXPECT_NO_THROW(forge::check_shard_vocabulary(raw_shard, 65536, "c.json"));
  std::vector<int32_t> out(3);
  EXPECT_THROW(r.read(1, 2, out.data()), forge::Error);
  EXPECT_THROW(forge::ShardWriter(dir / "z.bin", 0), forge::Error);
}

TEST(DataShard, ParseShardFormat) {
  EXPECT_EQ(forge::parse_shard_format("auto"), forge::ShardFormat::Auto);
  EXPECT_EQ(forge::parse_shard_format("forge"), forge::ShardFormat::Forge);
  EXPECT_EQ(forge::parse_shard_format("nanogpt"), forge::ShardFormat::NanoGPT);
  EXPECT_EQ(forge::parse_shard_format("llmc"), forge::ShardFormat::LlmC);
  EXPECT_NE(error_of([] { forge::parse_shard_format("hf"); }).find("auto|forge|nanogpt|llmc"),
            std::string::npos);
}

TEST(DataShard, WriteIntoMissingDirectoryFailsWithoutLeftovers) {
  TempDir dir;
  forge::ShardWriter w(dir / "no/such/dir/x.bin", 256);
  uint32_t t = 1;
  w.append(&t, 1);
  std::string msg = error_of([&] { w.finish(); });
  EXPECT_NE(msg.find("x.bin"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// The fingerprint a resume compares: equal for equal tokens (whatever the file's name), other
// for a changed token, reordered tokens or a different count; a shard over 64 MiB is sampled
// in windows, its first and last bytes among them.
TEST(DataShard, FingerprintStandsForTheTokens) {
  TempDir dir;
  const auto fingerprint = [&](const std::string& name, const std::vector<uint32_t>& tokens) {
    forge::ShardWriter w(dir / name, 50257);
    w.append(tokens.data(), tokens.size());
    w.finish();
    return forge::ShardReader(dir / name).fingerprint();
  };
  auto tokens = random_tokens(100003, 50257, 11);  // an odd byte count's tail hashed too
  const std::string base = fingerprint("a.bin", tokens);
  EXPECT_EQ(base.size(), 16u);
  EXPECT_EQ(fingerprint("b.bin", tokens), base);
  auto changed = tokens;
  changed[77777] ^= 1;
  EXPECT_NE(fingerprint("c.bin", changed), base);
  auto reordered = tokens;
  std::reverse(reordered.begin(), reordered.end());
  EXPECT_NE(fingerprint("d.bin", reordered), base);
  EXPECT_NE(fingerprint("e.bin", std::vector<uint32_t>(tokens.begin(), tokens.end() - 1)), base);

  auto large = random_tokens((size_t{72} << 20) / 2, 50257, 12);  // 72 MiB of uint16 tokens
  const std::string large_base = fingerprint("large.bin", large);
  EXPECT_EQ(fingerprint("large2.bin", large), large_base);
  auto first = large;
  first.front() ^= 1;
  EXPECT_NE(fingerprint("large3.bin", first), large_base);
  auto last = large;
  last.back() ^= 1;
  EXPECT_NE(fingerprint("large4.bin", last), large_base);
}

// Mappings made and dropped, more than the SIGBUS handler's list holds: their slots come back.
TEST(DataShard, MappingsGiveTheirSlotsBack) {
  TempDir dir;
  const std::string path = dir / "shard.bin";
  const auto tokens = random_tokens(2000, 50257, 7);
  forge::ShardWriter w(path, 50257);
  w.append(tokens.data(), tokens.size());
  w.finish();
  for (int i = 0; i < 200; ++i) EXPECT_EQ(forge::ShardReader(path).size(), tokens.size());
}

// A shard truncated in place under a run that has it mapped: the next read of a page past its
// new end is a SIGBUS, which must end the process with a line naming the file.
// The death tests' children run the test from its start (the threadsafe style) and end inside
// EXPECT_EXIT, past every destructor: so the test makes nothing outside its statements, and this
// one removes its folder (its files, mapped and open, stay readable) before the fault.
[[noreturn]] void read_a_shard_truncated_under_it() {
  forge::install_mapped_file_bus_handler();
  TempDir dir;  // removed by hand below: its destructor never runs
  const std::string path = dir / "cut-short.bin";
  const std::string other_path = dir / "other.bin";
  const auto tokens = random_tokens(200000, 50257, 7);  // 400 KB: many pages
  for (const std::string& p : {path, other_path}) {
    forge::ShardWriter w(p, 50257);
    w.append(tokens.data(), tokens.size());
    w.finish();
  }
  forge::ShardReader other(other_path);  // mapped too: the line names the right file
  forge::ShardReader r(path);
  const int fd = ::open(path.c_str(), O_WRONLY);
  std::error_code ec;
  std::filesystem::remove_all(dir.path(), ec);
  if (fd < 0 || ec || ::ftruncate(fd, 4096) != 0) std::_Exit(3);
  std::vector<int32_t> out(r.size());
  r.read(0, r.size(), out.data());
  std::_Exit(0);
}

TEST(DataShardDeathTest, TruncatedInPlaceWhileMappedEndsWithTheFilesName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(read_a_shard_truncated_under_it(), ::testing::ExitedWithCode(1),
              "forge: error: .*cut-short\\.bin: the file was truncated or rewritten in place");
  // A SIGBUS outside every mapping still ends with a line, a generic one.
  EXPECT_EXIT(
      {
        forge::install_mapped_file_bus_handler();
        ::raise(SIGBUS);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1), "forge: error: bus error \\(SIGBUS\\)");
}

// ---------------------------------------------------------------- tokenizers

TEST(DataTokenizer, BytesRoundTripEveryByte) {
  auto tok = forge::make_tokenizer("bytes");
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->vocab_size(), 256u);
  EXPECT_FALSE(tok->eot_token().has_value());
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  all += "h\xc3\xa9llo";  // UTF-8 stays as its bytes
  auto ids = tok->encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (int i = 0; i < 256; ++i) EXPECT_EQ(ids[i], static_cast<uint32_t>(i));
  EXPECT_EQ(ids[257], 0xC3u);
  EXPECT_EQ(tok->decode(ids), all);
  std::vector<uint32_t> bad = {65, 256};
  EXPECT_NE(error_of([&] { tok->decode(bad); }).find("token 256 at index 1"), std::string::npos);
}

TEST(DataTokenizer, UnknownNameListsKnownOnes) {
  std::string msg = error_of([] { forge::make_tokenizer("sentencepiece"); });
  EXPECT_NE(msg.find("sentencepiece"), std::string::npos);
  EXPECT_NE(msg.find("bytes"), std::string::npos);
}

// ---------------------------------------------------------------- prepare

namespace {

std::string decode_shard(const std::string& path) {
  forge::ShardReader r(path);
  std::string s(r.size(), '\0');
  for (size_t i = 0; i < r.size(); ++i) s[i] = static_cast<char>(r[i]);
  return s;
}

}  // namespace

TEST(DataPrepare, MixedCorpusSplitsByDocumentWithExactCounts) {
  TempDir dir;
  // Directory walk order is sorted: a.txt, b.jsonl, sub/c.txt; .dat/.u8/binary are skipped.
  write_text(dir / "corpus/a.txt", "alpha document\n");
  write_text(
      dir / "corpus/b.jsonl",
      "{\"text\": \"doc one\", \"id\": 1}\n\n{\"text\": \"doc two\\nline2\"}\n{\"text\": \"\"}\n"
      "{\"text\": \"doc three\"}\n");
  write_text(dir / "corpus/sub/c.txt", "last");
  write_text(dir / "corpus/a.dat", "index");
  write_text(dir / "corpus/a.u8", "utf8 copy");
  write_text(dir / "corpus/blob.txt", std::string("bin\0ary", 7));

  forge::PrepareOptions opt;
  opt.out_dir = dir / "out";
  opt.inputs = {dir / "corpus"};
  opt.val_fraction = 0.5;  // k = 2: documents 1 and 3 go to validation
  opt.progress = false;
  forge::PrepareResult r = forge::prepare_data(opt);

  // Documents in order: "alpha document\n", "doc one", "doc two\nline2", "doc three", "last"
  EXPECT_EQ(r.files, 3u);
  EXPECT_EQ(r.skipped_files, 3u);  // a.dat, a.u8 and blob.txt
  EXPECT_EQ(r.repeated_files, 0u);
  EXPECT_EQ(r.documents, 5u);
  EXPECT_EQ(r.train_documents, 3u);
  EXPECT_EQ(r.val_documents, 2u);
  EXPECT_EQ(r.vocab_size, 256u);
  const std::string train = "alpha document\n\ndoc two\nline2\n\nlast\n";
  const std::string val = "doc one\n\ndoc three\n";
  EXPECT_EQ(decode_shard(r.train_path), train);
  EXPECT_EQ(decode_shard(r.val_path), val);
  EXPECT_EQ(r.train_tokens, train.size());
  EXPECT_EQ(r.val_tokens, val.size());
  EXPECT_EQ(forge::ShardReader(r.train_path).vocab_size(), 256u);
  EXPECT_EQ(r.train_path, dir / "out/train.bin");
}

// A file reached twice is read once: read twice, the same text went to train and validation.
TEST(DataPrepare, FilesNamedTwiceAreReadOnce) {
  TempDir dir;
  write_text(dir / "corpus/a.txt", "alpha");
  write_text(dir / "corpus/b.txt", "beta");
  forge::PrepareOptions opt;
  opt.out_dir = dir / "out";
  const std::string a = dir / "corpus/a.txt";
  opt.inputs = {a, a, dir / "corpus/../corpus/a.txt", dir / "corpus"};
  opt.val_fraction = 0.5;
  opt.progress = false;
  const forge::PrepareResult r = forge::prepare_data(opt);
  EXPECT_EQ(r.files, 2u);
  EXPECT_EQ(r.repeated_files, 3u);
  EXPECT_EQ(decode_shard(r.train_path), "alpha\n");
  EXPECT_EQ(decode_shard(r.val_path), "beta\n");
}

TEST(DataPrepare, DefaultFractionSendsEveryTenthDocumentToValidation) {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 25; ++i) jsonl += "{\"body\": \"d" + std::to_string(i) + "\"}\n";
  write_text(dir / "docs.jsonl", jsonl);
  forge::PrepareOptions opt;
  opt.out_dir = dir / "out";
  opt.inputs = {dir / "docs.jsonl"};
  opt.text_field = "body";
  opt.progress = false;
  auto r = forge::prepare_data(opt);
  EXPECT_EQ(r.documents, 25u);
  EXPECT_EQ(r.val_documents, 2u);  // documents 9 and 19
  EXPECT_EQ(decode_shard(r.val_path), "d9\n\nd19\n");
  EXPECT_EQ(r.train_documents + r.val_documents, r.documents);
}

TEST(DataPrepare, FewDocumentsStillGiveValidation) {
  TempDir dir;
  write_text(dir / "x.jsonl", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"text\": \"three\"}\n");
  forge::PrepareOptions opt;
  opt.out_dir = dir / "out";
  opt.inputs = {dir / "x.jsonl"};
  opt.progress = false;
  auto r = forge::prepare_data(opt);
  EXPECT_EQ(r.val_documents, 1u);
  EXPECT_EQ(decode_shard(r.val_path), "three\n");
  EXPECT_EQ(decode_shard(r.train_path), "one\n\ntwo\n");
}

TEST(DataPrepare, SingleDocumentIsSplitByTokens) {
  TempDir dir;
  std::string text(1000, 'x');
  for (size_t i = 0; i < text.size(); i += 7) text[i] = 'a' + static_cast<char>(i % 26);
  write_text(dir / "input.txt", text);
  forge::PrepareOptions opt;
  opt.out_dir = dir / "out";
  opt.inputs = {dir / "input.txt"};
  opt.progress = false;
  auto r = forge::prepare_data(opt);
  text += "\n";                   // bytes documents end with a newline
  EXPECT_EQ(r.val_tokens, 101u);  // ceil(0.1 * 1001)
  EXPECT_EQ(r.train_tokens, 900u);
  EXPECT_EQ(decode_shard(r.train_path) + decode_shard(r.val_path), text);
}

TEST(DataPrepare, ErrorsNameTheInput) {
  TempDir dir;
  forge::PrepareOptions opt;
  opt.out_dir = dir / "out";
  opt.progress = false;
  opt.inputs = {dir / "missing.txt"};
  EXPECT_NE(error_of([&] { forge::prepare_data(opt); }).find("missing.txt: input not found"),
            std::string::npos);

  write_text(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": 3}\n");
  opt.inputs = {dir / "bad.jsonl"};
  EXPECT_NE(error_of([&] {
              forge::prepare_data(opt);
            }).find("bad.jsonl:2: field 'text': expected a string"),
            std::string::npos);
  write_text(dir / "broken.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \n");
  opt.inputs = {dir / "broken.jsonl"};
  EXPECT_NE(error_of([&] { forge::prepare_data(opt); }).find("broken.jsonl:3: malformed JSON"),
            std::string::npos);
  write_text(dir / "overflow.jsonl", "{\"text\": \"ok\", \"n\": 1e999}\n");
  opt.inputs = {dir / "overflow.jsonl"};
  EXPECT_NE(error_of([&] { forge::prepare_data(opt); }).find("overflow.jsonl:1: unreadable JSON"),
            std::string::npos);
  write_text(dir / "nofield.jsonl", "{\"content\": \"ok\"}\n");
  opt.inputs = {dir / "nofield.jsonl"};
  EXPECT_NE(error_of([&] { forge::prepare_data(opt); }).find("missing field 'text'"),
            std::string::npos);

  write_text(dir / "img.txt", std::string("\x89PNG\0\0", 6));
  opt.inputs = {dir / "img.txt"};
  EXPECT_NE(error_of([&] { forge::prepare_data(opt); }).find("img.txt: looks binary"),
            std::string::npos);

  write_text(dir / "empty/e.txt", "");
  opt.inputs = {dir / "empty"};
  EXPECT_NE(error_of([&] { forge::prepare_data(opt); }).find("no documents"), std::string::npos);

  opt.inputs = {dir / "x.txt"};
  opt.val_fraction = 0.0;
  EXPECT_NE(error_of([&] { forge::prepare_data(opt); }).find("val_fraction"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "out/train.bin"));
}
