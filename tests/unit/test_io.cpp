// Config, safetensors and atomic-write tests. Python interop runs the project venv's
// safetensors package; a missing interpreter is a failure, not a skip.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "forge/core/error.h"
#include "forge/core/peak.h"
#include "forge/io/atomic_file.h"
#include "forge/io/config.h"
#include "forge/io/safetensors.h"
#include "forge/model/params.h"
#include "forge/train/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace forge_test;  // TempDir, error_of, random_floats

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string source_dir() {
  if (const char* env = std::getenv("FORGE_SOURCE_DIR")) return env;
  return FORGE_SOURCE_DIR;
}

std::string venv_python() { return source_dir() + "/.venv/bin/python"; }

forge::Config config_from(const std::string& text, const std::string& where = "config.json") {
  return forge::parse_config(json::parse(text), where);
}

}  // namespace

// ---------------------------------------------------------------- config

TEST(IoConfig, DefaultsWhenEverySectionIsOmitted) {
  forge::Config c = config_from("{}");
  forge::Config d;
  EXPECT_EQ(c.model.family, d.model.family);
  EXPECT_EQ(c.model.n_embd, d.model.n_embd);
  EXPECT_EQ(c.train.steps, d.train.steps);
  EXPECT_EQ(c.train.seed, d.train.seed);
  EXPECT_EQ(c.out_dir, d.out_dir);
  EXPECT_EQ(c.numerics, d.numerics);
  EXPECT_EQ(c.path, "config.json");
}

TEST(IoConfig, RoundTripsEveryField) {
  TempDir dir;
  forge::Config c;
  c.model.family = "llama";
  c.model.vocab_size = 1000;
  c.model.padded_vocab_size = 1024;
  c.model.n_layer = 3;
  c.model.n_head = 6;
  c.model.n_kv_head = 2;
  c.model.n_embd = 96;
  c.model.block_size = 128;
  c.model.ffn_hidden = 256;
  c.model.rope_theta = 500000.0;
  c.model.norm_eps = 1e-6;
  c.train.batch_size = 7;
  c.train.seq_len = 33;
  c.train.grad_accum_steps = 3;
  c.train.steps = 1234;
  c.train.lr = 6e-4;
  c.train.min_lr = 6e-5;
  c.train.warmup_steps = 17;
  c.train.weight_decay = 0.05;
  c.train.beta1 = 0.8;
  c.train.beta2 = 0.999;
  c.train.eps = 1e-7;
  c.train.grad_clip = 0.0;
  c.train.seed = 18446744073709551557ull;  // above INT64_MAX: must survive as unsigned
  c.train.threads = 5;
  c.train.eval_interval = 9;
  c.train.eval_batches = 2;
  c.train.checkpoint_interval = 100;
  c.train.log_interval = 10;
  c.data.train = "a/train.bin";
  c.data.val = "a/val.bin";
  c.out_dir = "runs/x";
  c.numerics = "torch-cpu";

  const std::string path = dir / "config.json";
  forge::write_text_atomic(path, forge::config_to_json(c).dump(2));
  forge::Config r = forge::load_config(path);
  EXPECT_EQ(r.path, path);
  // Comparing the JSON forms checks every field, including ones added later.
  EXPECT_EQ(forge::config_to_json(r), forge::config_to_json(c));
  EXPECT_EQ(r.train.seed, c.train.seed);
  EXPECT_DOUBLE_EQ(r.model.rope_theta, 500000.0);
  EXPECT_EQ(r.model.kv_heads(), 2);
  EXPECT_EQ(r.model.head_dim(), 16);
  EXPECT_EQ(forge::config_to_json(c)["train"].size(), 18u);
  EXPECT_EQ(forge::config_to_json(c)["model"].size(), 11u);
}

TEST(IoConfig, MissingFileNamesThePath) {
  TempDir dir;
  std::string msg = error_of([&] { forge::load_config(dir / "nope.json"); });
  EXPECT_NE(msg.find("nope.json"), std::string::npos) << msg;
}

TEST(IoConfig, MalformedJsonNamesFileAndBytePosition) {
  TempDir dir;
  const std::string path = dir / "bad.json";
  write_bytes(path, "{\"train\": {\"steps\": 10,}}");
  std::string msg = error_of([&] { forge::load_config(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSON at byte 24"), std::string::npos) << msg;
}

TEST(IoConfig, UnknownFieldsAreRejectedWithTheirFullName) {
  EXPECT_EQ(error_of([] { config_from(R"({"train": {"stpes": 3}})"); }),
            "config.json: unknown field 'train.stpes'");
  EXPECT_EQ(error_of([] { config_from(R"({"modle": {}})"); }),
            "config.json: unknown field 'modle'");
  EXPECT_EQ(error_of([] { config_from(R"({"model": {"n_embed": 64}})"); }),
            "config.json: unknown field 'model.n_embed'");
  EXPECT_EQ(error_of([] { config_from(R"({"data": {"test": "x"}})"); }),
            "config.json: unknown field 'data.test'");
}

TEST(IoConfig, MistypedFieldsNameTheExpectedAndFoundType) {
  EXPECT_EQ(error_of([] { config_from(R"({"train": {"steps": "10"}})"); }),
            "config.json: field 'train.steps': expected an integer, got string");
  EXPECT_EQ(error_of([] { config_from(R"({"train": {"steps": 10.5}})"); }),
            "config.json: field 'train.steps': expected an integer, got number");
  EXPECT_EQ(error_of([] { config_from(R"({"train": {"lr": "fast"}})"); }),
            "config.json: field 'train.lr': expected a number, got string");
  EXPECT_EQ(error_of([] { config_from(R"({"model": {"family": 2}})"); }),
            "config.json: field 'model.family': expected a string, got integer");
  EXPECT_EQ(error_of([] { config_from(R"({"model": []})"); }),
            "config.json: field 'model': expected an object, got array");
  EXPECT_NE(error_of([] { config_from("[1, 2]"); }).find("expected a JSON object"),
            std::string::npos);
}

TEST(IoConfig, OutOfRangeValuesAreRejected) {
  EXPECT_EQ(error_of([] { config_from(R"({"train": {"steps": -3}})"); }),
            "config.json: field 'train.steps': expected a positive integer, got -3");
  struct Case {
    const char* json;
    const char* field;
  } cases[] = {
      {R"({"model": {"n_layer": 0}})", "'model.n_layer'"},
      {R"({"model": {"vocab_size": -1}})", "'model.vocab_size'"},
      {R"({"model": {"n_embd": 3000000000}})", "'model.n_embd'"},
      {R"({"model": {"norm_eps": 0}})", "'model.norm_eps'"},
      {R"({"model": {"norm_eps": -1e-5}})", "'model.norm_eps'"},
      {R"({"model": {"family": "llama", "ffn_hidden": 176, "rope_theta": 0}})",
       "'model.rope_theta'"},
      {R"({"model": {"family": "llama", "ffn_hidden": 176, "rope_theta": -10000}})",
       "'model.rope_theta'"},
      {R"({"model": {"family": "llama", "ffn_hidden": -1}})", "'model.ffn_hidden'"},
      {R"({"train": {"lr": 0}})", "'train.lr'"},
      {R"({"train": {"beta1": 1.0}})", "'train.beta1'"},
      {R"({"train": {"beta2": -0.1}})", "'train.beta2'"},
      {R"({"train": {"grad_clip": -1}})", "'train.grad_clip'"},
      {R"({"train": {"seed": -1}})", "'train.seed'"},
      {R"({"train": {"log_interval": 0}})", "'train.log_interval'"},
      {R"({"model": {"family": "gpt3"}})", "'model.family'"},
      {R"({"numerics": "fp8"})", "'numerics'"},
      {R"({"out_dir": ""})", "'out_dir'"},
  };
  for (const Case& c : cases) {
    std::string msg = error_of([&] { config_from(c.json); });
    EXPECT_NE(msg.find(std::string("field ") + c.field), std::string::npos)
        << c.json << " -> " << msg;
    EXPECT_EQ(msg.rfind("config.json: ", 0), 0u) << msg;
  }
  EXPECT_NE(error_of([] { config_from(R"({"model": {"family": "gpt3"}})"); }).find("gpt2|llama"),
            std::string::npos);
}

TEST(IoConfig, CrossFieldRulesAreChecked) {
  struct Case {
    const char* json;
    const char* needle;
  } cases[] = {
      {R"({"model": {"n_embd": 66, "n_head": 4}})",
       "'model.n_embd': expected a multiple of model.n_head (4)"},
      {R"({"model": {"block_size": 32}, "train": {"seq_len": 64}})",
       "'train.seq_len': expected at most model.block_size (32), got 64"},
      {R"({"model": {"vocab_size": 300, "padded_vocab_size": 256}})", "'model.padded_vocab_size'"},
      {R"({"model": {"family": "llama", "n_head": 4, "n_kv_head": 3}})", "'model.n_kv_head'"},
      {R"({"model": {"family": "gpt2", "n_head": 4, "n_kv_head": 2}})", "for family gpt2"},
      {R"({"model": {"family": "gpt2", "ffn_hidden": 100}})", "'model.ffn_hidden'"},
      {R"({"model": {"family": "llama", "n_embd": 36, "n_head": 4}})", "even head dimension"},
      {R"({"model": {"family": "llama", "n_head": 4, "n_kv_head": 8, "ffn_hidden": 176}})",
       "'model.n_kv_head': expected a divisor of model.n_head (4), got 8"},
      {R"({"model": {"family": "llama", "n_embd": 66, "n_head": 4, "ffn_hidden": 176}})",
       "'model.n_embd': expected a multiple of model.n_head (4)"},
      {R"({"model": {"family": "llama"}})", "'model.ffn_hidden': expected the SwiGLU width"},
      {R"({"model": {"family": "llama", "ffn_hidden": 0}})",
       "'model.ffn_hidden': expected the SwiGLU width"},
      {R"({"model": {"family": "gpt2", "rope_theta": 500000.0}})",
       "'model.rope_theta': expected 10000"},
      {R"({"train": {"lr": 1e-4, "min_lr": 1e-3}})", "'train.min_lr'"},
  };
  for (const Case& c : cases) {
    std::string msg = error_of([&] { config_from(c.json); });
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.json << " -> " << msg;
  }
  // Valid edge cases must pass.
  EXPECT_NO_THROW(config_from(R"({"model": {"block_size": 64}, "train": {"seq_len": 64}})"));
  EXPECT_NO_THROW(config_from(
      R"({"model": {"family": "llama", "n_head": 4, "n_kv_head": 1, "ffn_hidden": 176}})"));
  EXPECT_NO_THROW(config_from(R"({"model": {"family": "gpt2", "rope_theta": 10000}})"));
  EXPECT_NO_THROW(config_from(
      R"({"model": {"vocab_size": 50257, "padded_vocab_size": 50304, "block_size": 64}})"));
  // validate_config works on configs built in code too.
  forge::Config c;
  c.train.seq_len = c.model.block_size + 1;
  EXPECT_THROW(forge::validate_config(c), forge::Error);
  // ... including the per-field ranges that parse_config checks for files.
  for (double bad : {0.0, -1.0}) {
    forge::Config e;
    e.model.norm_eps = bad;
    EXPECT_NE(error_of([&] { forge::validate_config(e); }).find("'model.norm_eps'"),
              std::string::npos);
    forge::Config r;
    r.model.family = "llama";
    r.model.ffn_hidden = 176;
    r.model.rope_theta = bad;
    EXPECT_NE(error_of([&] { forge::validate_config(r); }).find("'model.rope_theta'"),
              std::string::npos);
  }
}

TEST(IoConfig, IntegerValuedNumbersAreAcceptedForFloatFields) {
  forge::Config c = config_from(R"({"train": {"lr": 1, "min_lr": 0, "grad_clip": 0}})");
  EXPECT_DOUBLE_EQ(c.train.lr, 1.0);
  EXPECT_DOUBLE_EQ(c.train.min_lr, 0.0);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 0.0);
}

// ---------------------------------------------------------------- atomic files

TEST(IoAtomicFile, WritesAndReplacesWithoutLeavingTemporaries) {
  TempDir dir;
  const std::string path = dir / "out.txt";
  forge::write_text_atomic(path, "first");
  forge::write_text_atomic(path, "second version");
  EXPECT_EQ(forge::read_text_file(path), "second version");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(IoAtomicFile, FailingFillLeavesOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir / "keep.txt";
  forge::write_text_atomic(path, "old");
  EXPECT_THROW(forge::write_file_atomic(path,
                                        [](std::FILE* f) {
                                          std::fputs("partial", f);
                                          forge::fail("simulated failure");
                                        }),
               forge::Error);
  EXPECT_EQ(forge::read_text_file(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(IoAtomicFile, ProcessKilledMidWriteLeavesOldFileAndNoTemporary) {
  // SIGKILL cannot be caught: a rank killed while checkpointing must still leave only whole
  // files (the temporary is unnamed until it is complete).
  TempDir dir;
  const std::string path = dir / "latest";
  forge::write_text_atomic(path, "old");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    forge::write_file_atomic(path, [&](std::FILE* f) {
      std::fputs("partial", f);
      std::fflush(f);
      const char go = 1;
      if (::write(ready[1], &go, 1) != 1) std::_Exit(3);
      ::pause();  // killed here, mid-write
    });
    std::_Exit(0);
  }
  char go = 0;
  ASSERT_EQ(::read(ready[0], &go, 1), 1);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_EQ(forge::read_text_file(path), "old");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"latest"});
}

TEST(IoAtomicFile, UnwritableDirectoryIsAnErrorNamingThePath) {
  if (::geteuid() == 0) {
    // root ignores permission bits; a path under a regular file fails for everyone.
    TempDir dir;
    write_bytes(dir / "file", "x");
    const std::string path = dir / "file/sub/out.txt";
    std::string msg = error_of([&] { forge::write_text_atomic(path, "x"); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(
        error_of([&] { forge::ensure_writable_dir(dir / "file/sub"); }).find(dir / "file/sub"),
        std::string::npos);
    return;
  }
  TempDir dir;
  const std::string locked = dir / "locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string path = locked + "/out.txt";
  std::string msg = error_of([&] { forge::write_text_atomic(path, "x"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(locked));
  std::string dmsg = error_of([&] { forge::ensure_writable_dir(locked); });
  EXPECT_NE(dmsg.find(locked), std::string::npos) << dmsg;
  fs::permissions(locked, fs::perms::owner_all);
}

TEST(IoAtomicFile, EnsureWritableDirCreatesParents) {
  TempDir dir;
  const std::string deep = dir / "a/b/c";
  forge::ensure_writable_dir(deep);
  EXPECT_TRUE(fs::is_directory(deep));
  EXPECT_TRUE(fs::is_empty(deep));  // the probe file is gone
}

TEST(IoAtomicFile, ReadTextFileErrorsNameThePath) {
  TempDir dir;
  std::string msg = error_of([&] { forge::read_text_file(dir / "missing.txt"); });
  EXPECT_NE(msg.find("missing.txt"), std::string::npos);
  EXPECT_NE(error_of([&] { forge::read_text_file(dir.path()); }).find("directory"),
            std::string::npos);
}

// ---------------------------------------------------------------- safetensors

namespace {

// Builds a raw safetensors file from a header JSON string and a data section.
std::string raw_safetensors(const std::string& header, size_t data_bytes) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  out += header;
  out.append(data_bytes, '\0');
  return out;
}

}  // namespace

TEST(IoSafetensors, RoundTripOfMixedDtypesAndAwkwardShapes) {
  TempDir dir;
  const std::string path = dir / "t.safetensors";
  auto a = random_floats(7 * 13, 1);
  std::vector<int64_t> b = {-5, 0, 1ll << 40};
  std::vector<uint16_t> c = {1, 65535, 3};
  std::vector<uint8_t> d = {1, 2, 3, 4,
                            5};  // 5 bytes: later tensors become unaligned in the data section
  auto e = random_floats(3, 2);
  forge::SafetensorsWriter w;
  w.add_f32("layer.weight", {7, 13}, a.data());
  w.add("ints", forge::DType::I64, {3}, b.data());
  w.add("u16", forge::DType::U16, {1, 3}, c.data());
  w.add("bytes", forge::DType::U8, {5}, d.data());
  w.add_f32("after_odd", {3}, e.data());
  w.add_f32("scalar_empty", {0, 4}, nullptr);
  w.set_metadata("format", "pt");
  w.write(path);

  forge::SafetensorsFile f(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"after_odd", "bytes", "ints", "layer.weight",
                                                 "scalar_empty", "u16"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  std::vector<float> a2(a.size());
  f.read_f32("layer.weight", {7, 13}, a2.data());
  EXPECT_EQ(a2, a);
  std::vector<float> e2(3);
  f.read_f32("after_odd", {3}, e2.data());
  EXPECT_EQ(e2, e);
  EXPECT_EQ(f.info("ints").dtype, forge::DType::I64);
  EXPECT_EQ(std::memcmp(f.data("ints"), b.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.data("u16"), c.data(), 6), 0);
  EXPECT_EQ(f.info("u16").shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(f.info("scalar_empty").numel(), 0);
  EXPECT_FALSE(f.contains("missing"));
  // The header is space-padded so the data section starts 8-byte aligned.
  uint64_t header_len = 0;
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
}

TEST(IoSafetensors, ReadF32ChecksDtypeAndShapeAndNamesThem) {
  TempDir dir;
  const std::string path = dir / "t.safetensors";
  auto a = random_floats(6, 3);
  std::vector<int32_t> i = {1, 2};
  forge::SafetensorsWriter w;
  w.add_f32("w", {2, 3}, a.data());
  w.add("i", forge::DType::I32, {2}, i.data());
  w.write(path);
  forge::SafetensorsFile f(path);
  std::vector<float> out(6);
  std::string msg = error_of([&] { f.read_f32("w", {3, 2}, out.data()); });
  EXPECT_NE(msg.find(path), std::string::npos);
  EXPECT_NE(msg.find("'w'"), std::string::npos);
  EXPECT_NE(msg.find("expected shape [3, 2], found [2, 3]"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] {
              f.read_f32("i", {2}, out.data());
            }).find("expected dtype F32 (or BF16, F16, which widen exactly), found I32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.info("nope"); }).find("'nope'"), std::string::npos);
}

// Half-width weights widen to fp32 exactly: every bf16 and f16 value, specials included
// (checked against a float64 decoding of the bits, for all 65536 patterns of each).
TEST(IoSafetensors, ReadF32WidensBf16AndF16Exactly) {
  TempDir dir;
  const std::string path = dir / "h.safetensors";
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  forge::SafetensorsWriter w;
  w.add("b", forge::DType::BF16, {256, 256}, all.data());
  w.add("h", forge::DType::F16, {65536}, all.data());
  w.write(path);
  forge::SafetensorsFile f(path);
  std::vector<float> b(65536), h(65536);
  f.read_f32("b", {256, 256}, b.data());
  f.read_f32("h", {65536}, h.data());
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint32_t bits = i << 16;
    float want_b = 0;
    std::memcpy(&want_b, &bits, 4);
    if (std::isnan(want_b)) {
      EXPECT_TRUE(std::isnan(b[i])) << i;
    } else {
      EXPECT_EQ(b[i], want_b) << i;
    }
    // f16 decoded in double: (-1)^s 2^(e-15) (1 + f/1024), subnormals 2^-14 (f/1024).
    const int e = (i >> 10) & 0x1f, frac = i & 0x3ff;
    const double sign = (i & 0x8000) ? -1.0 : 1.0;
    if (e == 0x1f) {
      EXPECT_TRUE(frac ? std::isnan(h[i]) : std::isinf(h[i]) && (h[i] < 0) == (sign < 0)) << i;
    } else {
      const double want = e == 0 ? sign * std::ldexp(frac / 1024.0, -14)
                                 : sign * std::ldexp(1.0 + frac / 1024.0, e - 15);
      EXPECT_EQ(static_cast<double>(h[i]), want) << i;
      EXPECT_EQ(std::signbit(h[i]), sign < 0) << i;
    }
  }
}

TEST(IoSafetensors, WriterRejectsDuplicateAndReservedNames) {
  float x = 1;
  forge::SafetensorsWriter w;
  w.add_f32("x", {1}, &x);
  EXPECT_THROW(w.add_f32("x", {1}, &x), forge::Error);
  EXPECT_THROW(w.add_f32("__metadata__", {1}, &x), forge::Error);
  EXPECT_THROW(w.add_f32("neg", {-1}, &x), forge::Error);
}

TEST(IoSafetensors, MalformedFilesAreRejectedNamingFileAndTensor) {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  struct Case {
    std::string bytes;
    const char* needle;
  } cases[] = {
      {"abc", "shorter than the 8-byte header length"},
      {std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "header length"},
      {raw_safetensors("{not json", 0), "malformed safetensors header JSON"},
      {raw_safetensors("[]", 0), "must be a JSON object"},
      {raw_safetensors(R"({"t": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}})", 1),
       "unsupported dtype 'Q8'"},
      {raw_safetensors(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4),
       "tensor 't': shape [2] of F32 needs 8 bytes but data_offsets span 4"},
      {raw_safetensors(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4),
       "outside the data section"},
      {raw_safetensors(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
       "gap of 4 bytes"},
      {raw_safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                       8),
       "overlap"},
      {raw_safetensors(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12),
       "trailing data"},
      {raw_safetensors(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
       "non-negative"},
      {raw_safetensors(R"({"t": {"dtype": "F32", "shape": [1]}})", 4), "data_offsets"},
      {raw_safetensors(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})",
                       4),
       "unknown field 'x'"},
      {raw_safetensors(R"({"__metadata__": {"k": 1}})", 0), "__metadata__"},
  };
  for (const Case& c : cases) {
    write_bytes(path, c.bytes);
    std::string msg = error_of([&] { forge::SafetensorsFile f(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << "expected '" << c.needle << "' in: " << msg;
  }
  EXPECT_NE(error_of([&] {
              forge::SafetensorsFile f(dir / "missing.safetensors");
            }).find("missing.safetensors"),
            std::string::npos);
}

TEST(IoSafetensors, ForgeWritesWhatPythonReads) {
  TempDir dir;
  const std::string path = dir / "forge.safetensors";
  auto a = random_floats(5 * 11, 4);
  std::vector<int32_t> ints = {7, -8, 9};
  forge::SafetensorsWriter w;
  w.add_f32("transformer.wte.weight", {5, 11}, a.data());
  w.add("ids", forge::DType::I32, {3}, ints.data());
  w.set_metadata("producer", "forge");
  w.write(path);
  // Python recomputes the checksum of the values we wrote and checks names, shapes, dtypes.
  double sum = 0;
  for (float x : a) sum += x;
  const std::string script = dir / "check.py";
  write_bytes(script, fmt::format(R"PY(
import sys
from safetensors.numpy import load_file
from safetensors import safe_open
t = load_file(sys.argv[1])
assert sorted(t) == ["ids", "transformer.wte.weight"], sorted(t)
w = t["transformer.wte.weight"]
assert w.dtype.name == "float32" and w.shape == (5, 11), (w.dtype, w.shape)
assert abs(float(w.astype("float64").sum()) - {:.17g}) < 1e-9, float(w.sum())
assert abs(float(w[4, 10]) - {:.9g}) < 1e-6
assert t["ids"].dtype.name == "int32" and list(t["ids"]) == [7, -8, 9]
with safe_open(sys.argv[1], framework="numpy") as f:
    assert f.metadata() == {{"producer": "forge"}}, f.metadata()
print("python-ok")
)PY",
                                  sum, a[54]));
  const std::string cmd =
      venv_python() + " " + script + " " + path + " > " + (dir / "py.log") + " 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << forge::read_text_file(dir / "py.log");
  EXPECT_NE(forge::read_text_file(dir / "py.log").find("python-ok"), std::string::npos);
}

TEST(IoSafetensors, ForgeReadsWhatPythonWrites) {
  TempDir dir;
  const std::string path = dir / "py.safetensors";
  const std::string script = dir / "make.py";
  write_bytes(script, R"PY(
import sys
import numpy as np
from safetensors.numpy import save_file
a = (np.arange(3 * 7, dtype=np.float32).reshape(3, 7) * 0.5 - 2.0)
save_file({"a": a, "half": np.array([1.5, -2.0], dtype=np.float16), "ids": np.array([3, 1, 4, 1, 5], dtype=np.int64),
           "b": np.ones((1,), dtype=np.uint8)}, sys.argv[1], metadata={"format": "np"})
)PY");
  const std::string cmd =
      venv_python() + " " + script + " " + path + " > " + (dir / "py.log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << forge::read_text_file(dir / "py.log");
  forge::SafetensorsFile f(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "half", "ids"}));
  EXPECT_EQ(f.metadata().at("format"), "np");
  std::vector<float> a(21);
  f.read_f32("a", {3, 7}, a.data());
  for (int i = 0; i < 21; ++i) EXPECT_FLOAT_EQ(a[i], i * 0.5f - 2.0f);
  EXPECT_EQ(f.info("half").dtype, forge::DType::F16);
  uint16_t h[2];
  std::memcpy(h, f.data("half"), 4);
  EXPECT_EQ(h[0], 0x3E00);  // 1.5 in IEEE half
  EXPECT_EQ(h[1], 0xC000);  // -2.0
  int64_t ids[5];
  std::memcpy(ids, f.data("ids"), sizeof ids);
  EXPECT_EQ(ids[2], 4);
  EXPECT_EQ(f.info("b").dtype, forge::DType::U8);
}

// A run killed while checkpointing leaves "<name>.tmp" directories and, in the window between
// write_file_atomic's link and rename, "<name>.tmp.<pid>" files; the next run removes those of
// processes that are gone, and nothing else.
TEST(IoCheckpoint, LeftoversOfAKilledWriterAreRemoved) {
  TempDir tmp;
  const fs::path ck = fs::path(tmp.path()) / "checkpoints";
  fs::create_directories(ck / "step_000010");
  fs::create_directories(ck / "step_000020.tmp");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // a pid that no longer runs
  const auto touch = [&](const std::string& name) { std::ofstream(ck / name) << "x"; };
  touch("latest.tmp." + std::to_string(child));
  touch("latest.tmp." + std::to_string(::getpid()));  // a live writer's: kept
  touch("latest");
  touch("notes.tmp.abc");
  forge::remove_partial_checkpoints(tmp.path());
  EXPECT_FALSE(fs::exists(ck / "step_000020.tmp"));
  EXPECT_FALSE(fs::exists(ck / ("latest.tmp." + std::to_string(child))));
  EXPECT_TRUE(fs::exists(ck / ("latest.tmp." + std::to_string(::getpid()))));
  EXPECT_TRUE(fs::exists(ck / "step_000010"));
  EXPECT_TRUE(fs::exists(ck / "latest"));
  EXPECT_TRUE(fs::exists(ck / "notes.tmp.abc"));
}

// `latest`, its folder and the run's folder all lead to the checkpoint `latest` names, looked
// up beside it whatever the directory the run was started from; other paths come back as
// given; a `latest` naming nothing is an error naming the file.
TEST(IoCheckpoint, LatestAndTheRunFolderResolveToTheCheckpoint) {
  TempDir tmp;
  const fs::path out = fs::path(tmp.path()) / "run";
  const fs::path ck = out / "checkpoints";
  fs::create_directories(ck / "step_000010");
  fs::create_directories(ck / "step_000020");
  std::ofstream(ck / "step_000010" / "state.json") << "{}";
  std::ofstream(ck / "step_000020" / "state.json") << "{}";
  // Written by a run started elsewhere, with a relative out_dir.
  std::ofstream(ck / "latest") << "elsewhere/run/checkpoints/step_000020\n";
  const std::string want = (ck / "step_000020").string();
  EXPECT_EQ(forge::resolve_checkpoint((ck / "latest").string()), want);
  EXPECT_EQ(forge::resolve_checkpoint(ck.string()), want);
  EXPECT_EQ(forge::resolve_checkpoint(out.string()), want);
  EXPECT_EQ(forge::resolve_checkpoint((ck / "step_000010").string()),
            (ck / "step_000010").string());
  const std::string other = (fs::path(tmp.path()) / "model.safetensors").string();
  EXPECT_EQ(forge::resolve_checkpoint(other), other);
  std::ofstream(ck / "latest") << "run/checkpoints/step_000030\n";
  try {
    forge::resolve_checkpoint(out.string());
    FAIL() << "a latest naming no checkpoint was accepted";
  } catch (const forge::Error& e) {
    EXPECT_NE(std::string(e.what()).find((ck / "latest").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step_000030"), std::string::npos) << e.what();
  }
}

// Large buffers are placed for transparent huge pages (2 MiB aligned); small ones are only
// cache-line aligned. Both come zero-filled and keep every element they were asked for.
TEST(FloatBufferTest, LargeBuffersAreHugePageAlignedAndZeroed) {
  const char* env = std::getenv("FORGE_HUGE_PAGES");
  const bool huge_pages = !(env && std::strcmp(env, "0") == 0);
  for (size_t n : {size_t{1}, size_t{1000}, (size_t{2} << 20) / 4 - 1, (size_t{2} << 20) / 4,
                   (size_t{5} << 20) / 4 + 3}) {
    forge::FloatBuffer b(n);
    ASSERT_EQ(b.size(), n);
    const auto at = reinterpret_cast<uintptr_t>(b.data());
    EXPECT_EQ(at % 64, 0u) << n;
    if (n * sizeof(float) >= (size_t{2} << 20) && huge_pages) {
      EXPECT_EQ(at % (size_t{2} << 20), 0u) << n;
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.data()[i], 0.0f) << n << " at " << i;
    b.data()[n - 1] = 1.5f;  // the last element is the buffer's own
    b.zero();
    EXPECT_EQ(b.data()[n - 1], 0.0f);
  }
}

// The peak divides every MFU figure: it must be a positive, finite rate for each kind the
// build can measure, and 0 only for bf16 where the build has no bf16 dot products.
TEST(PeakTest, MeasuresAFiniteRateForEachKind) {
  const forge::Peak p = forge::measure_peak(2, 0.05);
  EXPECT_EQ(p.threads, 2);
  EXPECT_TRUE(std::isfinite(p.fp32_flops));
  EXPECT_GT(p.fp32_flops, 1e8);
#if defined(__AVX512BF16__)
  EXPECT_TRUE(std::isfinite(p.bf16_flops));
  EXPECT_GT(p.bf16_flops, 1e8);
#else
  EXPECT_EQ(p.bf16_flops, 0.0);
#endif
}
