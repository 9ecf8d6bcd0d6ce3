#include "forge/data/prepare.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "forge/core/error.h"
#include "forge/data/shard.h"
#include "forge/io/atomic_file.h"

namespace forge {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct InputFile {
  std::string path;
  bool from_directory;  // binary files are skipped there, but are an error when named
  uint64_t size;
};

// The inputs' files in reading order; `skipped` counts the index files left out of folders and
// `repeated` the files reached a second time (named twice, or named and inside a named folder),
// which are read once: a document read twice could land in both train and validation.
std::vector<InputFile> list_inputs(const std::vector<std::string>& inputs, size_t& skipped,
                                   size_t& repeated) {
  std::vector<InputFile> files;
  std::set<std::string> seen;
  auto add = [&](const std::string& p, bool from_directory) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(p, ec);
    if (!seen.insert(ec ? p : canonical.string()).second) {
      ++repeated;
      return;
    }
    files.push_back({p, from_directory, static_cast<uint64_t>(fs::file_size(p, ec))});
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(input, ec);
    if (ec || !fs::exists(st)) fail("{}: input not found", input);
    if (fs::is_directory(st)) {
      std::vector<std::string> found;
      std::string last_folder = input;  // where the listing is when it fails
      for (auto it = fs::recursive_directory_iterator(input, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        const std::string p = it->path().string();
        std::error_code type_ec;
        if (it->is_directory(type_ec)) last_folder = p;
        if (!it->is_regular_file(type_ec)) continue;
        // fortune(6) keeps binary index files (*.dat) and UTF-8 variants (*.u8) beside the text.
        if (ends_with(p, ".dat") || ends_with(p, ".u8")) {
          ++skipped;
          continue;
        }
        found.push_back(p);
      }
      if (ec) fail("{}: cannot list directory: {}", last_folder, ec.message());
      std::sort(found.begin(), found.end());
      for (auto& p : found) add(p, true);
    } else if (fs::is_regular_file(st)) {
      add(input, false);
    } else {
      fail("{}: input is neither a regular file nor a directory", input);
    }
  }
  return files;
}

class ProgressBar {
 public:
  ProgressBar(bool enabled, uint64_t total_bytes)
      : enabled_(enabled && ::isatty(2)), total_(total_bytes) {}

  void update(uint64_t done_bytes, size_t documents, uint64_t tokens, bool force = false) {
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = total_ ? std::min(1.0, double(done_bytes) / double(total_)) : 1.0;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(filled, '#');
    bar.append(kWidth - filled, '.');
    std::fprintf(stderr, "\r[%s] %3d%%  %.1f/%.1f MB  %zu docs  %llu tokens", bar.c_str(),
                 int(frac * 100), done_bytes / 1e6, total_ / 1e6, documents,
                 static_cast<unsigned long long>(tokens));
    std::fflush(stderr);
    drawn_ = true;
  }

  void finish() {
    if (drawn_) std::fputc('\n', stderr);
  }

 private:
  bool enabled_;
  uint64_t total_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// Routes documents to the two shard writers. The latest document is held back until the
// next one arrives, because the rules for the last document depend on what came before it.
class Splitter {
 public:
  Splitter(const Tokenizer& tok, double val_fraction, ShardWriter& train, ShardWriter& val)
      : tok_(tok),
        eot_(tok.eot_token()),
        newline_(tok.encode("\n")),
        val_fraction_(val_fraction),
        train_{&train},
        val_{&val} {
    every_ = std::max<size_t>(2, static_cast<size_t>(std::llround(1.0 / val_fraction)));
  }

  void add(std::string text) {
    if (!eot_ && (text.empty() || text.back() != '\n')) text.push_back('\n');
    if (have_pending_) commit(pending_index_ % every_ == every_ - 1);
    pending_ = tok_.encode(text);
    pending_index_ = documents_++;
    have_pending_ = true;
  }

  void finish() {
    if (!have_pending_) return;
    have_pending_ = false;
    if (documents_ == 1) {
      // One document (a single text file): split it by tokens so validation is not empty.
      const size_t n = pending_.size();
      const size_t n_val = std::min(n, static_cast<size_t>(std::ceil(val_fraction_ * double(n))));
      append(train_, pending_.data(), n - n_val);
      append(val_, pending_.data() + (n - n_val), n_val);
      return;
    }
    commit(pending_index_ % every_ == every_ - 1 || val_.documents == 0);
  }

  size_t documents() const { return documents_; }
  uint64_t tokens_so_far() const { return train_.tokens + val_.tokens + pending_.size(); }

  struct Split {
    ShardWriter* writer;
    uint64_t tokens = 0;
    size_t documents = 0;
  };
  const Split& train() const { return train_; }
  const Split& val() const { return val_; }

 private:
  void commit(bool to_val) {
    have_pending_ = false;
    append(to_val ? val_ : train_, pending_.data(), pending_.size());
    pending_.clear();
  }

  void append(Split& split, const uint32_t* doc, size_t n) {
    if (eot_) {
      split.writer->append(&*eot_, 1);
      split.tokens += 1;
    } else if (split.documents > 0) {
      split.writer->append(newline_.data(), newline_.size());
      split.tokens += newline_.size();
    }
    split.writer->append(doc, n);
    split.tokens += n;
    split.documents += 1;
  }

  const Tokenizer& tok_;
  std::optional<uint32_t> eot_;
  std::vector<uint32_t> newline_;
  double val_fraction_;
  Split train_, val_;
  size_t every_ = 10;
  std::vector<uint32_t> pending_;
  size_t pending_index_ = 0;
  bool have_pending_ = false;
  size_t documents_ = 0;
};

void read_jsonl(const std::string& path, const std::string& content, const std::string& field,
                Splitter& out) {
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string_view line(content.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail("{}:{}: malformed JSON at column {}: {}", path, line_no, e.byte, e.what());
    } catch (const nlohmann::json::exception& e) {  // a number no double holds, ...
      fail("{}:{}: unreadable JSON: {}", path, line_no, e.what());
    }
    if (!j.is_object()) fail("{}:{}: expected a JSON object per line", path, line_no);
    auto it = j.find(field);
    if (it == j.end()) fail("{}:{}: missing field '{}'", path, line_no, field);
    if (!it->is_string())
      fail("{}:{}: field '{}': expected a string, got {}", path, line_no, field, it->type_name());
    std::string text = it->get<std::string>();
    if (!text.empty()) out.add(std::move(text));
  }
}

}  // namespace

PrepareResult prepare_data(const PrepareOptions& options) {
  auto tok = make_tokenizer(options.tokenizer, options.tokenizer_options);
  return prepare_data(options, *tok);
}

PrepareResult prepare_data(const PrepareOptions& options, const Tokenizer& tokenizer) {
  if (options.inputs.empty()) fail("data prepare: no inputs given");
  if (options.out_dir.empty()) fail("data prepare: no output directory given");
  if (!(options.val_fraction > 0.0 && options.val_fraction <= 0.5))
    fail("data prepare: val_fraction must be in (0, 0.5], got {}", options.val_fraction);
  if (options.text_field.empty()) fail("data prepare: text_field must not be empty");

  PrepareResult r;
  const std::vector<InputFile> files =
      list_inputs(options.inputs, r.skipped_files, r.repeated_files);
  uint64_t total_bytes = 0;
  for (const auto& f : files) total_bytes += f.size;
  const OutputFolder out(options.out_dir);  // removed again, if it was made, when this fails

  r.vocab_size = tokenizer.vocab_size();
  r.train_path = (fs::path(options.out_dir) / "train.bin").string();
  r.val_path = (fs::path(options.out_dir) / "val.bin").string();

  ShardWriter train(r.train_path, tokenizer.vocab_size());
  ShardWriter val(r.val_path, tokenizer.vocab_size());
  Splitter splitter(tokenizer, options.val_fraction, train, val);
  ProgressBar bar(options.progress, total_bytes);
  uint64_t done_bytes = 0;
  for (const InputFile& f : files) {
    std::string content = read_text_file(f.path);
    done_bytes += f.size;
    if (content.find('\0') != std::string::npos) {
      if (f.from_directory) {
        ++r.skipped_files;
        continue;
      }
      fail("{}: looks binary (contains NUL bytes); expected a text or .jsonl file", f.path);
    }
    ++r.files;
    r.input_bytes += content.size();
    if (ends_with(f.path, ".jsonl"))
      read_jsonl(f.path, content, options.text_field, splitter);
    else if (!content.empty())
      splitter.add(std::move(content));
    bar.update(done_bytes, splitter.documents(), splitter.tokens_so_far());
  }
  splitter.finish();
  bar.update(done_bytes, splitter.documents(), splitter.tokens_so_far(), true);
  bar.finish();
  if (splitter.documents() == 0)
    fail("data prepare: no documents found in the inputs ({} files read)", r.files);

  r.documents = splitter.documents();
  r.train_documents = splitter.train().documents;
  r.val_documents = splitter.val().documents;
  r.train_tokens = splitter.train().tokens;
  r.val_tokens = splitter.val().tokens;
  train.finish();
  val.finish();

  std::fprintf(
      stderr,
      "prepared %zu documents from %zu files (%zu skipped%s) with tokenizer %s: train %llu "
      "tokens (%zu docs) "
      "-> %s, val %llu tokens (%zu docs) -> %s\n",
      r.documents, r.files, r.skipped_files,
      r.repeated_files ? fmt::format(", {} named twice read once", r.repeated_files).c_str() : "",
      tokenizer.name().c_str(), static_cast<unsigned long long>(r.train_tokens), r.train_documents,
      r.train_path.c_str(), static_cast<unsigned long long>(r.val_tokens), r.val_documents,
      r.val_path.c_str());
  return r;
}

}  // namespace forge
