#include "forge/data/bpe_train.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "forge/core/error.h"
#include "forge/data/gpt2_bpe.h"
#include "forge/io/atomic_file.h"

namespace forge {

namespace {

inline uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }

struct Word {
  std::vector<uint32_t> syms;
  int64_t count = 0;
};

}  // namespace

BpeVocabulary train_bpe(const std::vector<std::string>& texts, int vocab_size) {
  if (vocab_size < 257)
    fail("tokenizer train: --vocab-size {}: expected at least 257 (256 bytes + <|endoftext|>)",
         vocab_size);
  const size_t target_merges = static_cast<size_t>(vocab_size) - 257;

  // Byte tokens in GPT-2's order: printable bytes (which map to themselves) first.
  BpeVocabulary v;
  const auto& b2u = gpt2_byte_to_unicode();
  uint32_t byte_id[256];
  for (int pass = 0; pass < 2; ++pass)
    for (int b = 0; b < 256; ++b)
      if ((b2u[b] == static_cast<uint32_t>(b)) == (pass == 0)) {
        byte_id[b] = static_cast<uint32_t>(v.token_bytes.size());
        v.token_bytes.emplace_back(1, static_cast<char>(b));
      }

  // Piece counts, then one Word per distinct piece (sorted, so nothing depends on hashing).
  std::unordered_map<std::string_view, int64_t> piece_count;
  const Gpt2Pretokenizer pre;
  for (const auto& text : texts)
    for (std::string_view piece : pre.split(text)) ++piece_count[piece];
  std::vector<std::pair<std::string_view, int64_t>> pieces(piece_count.begin(), piece_count.end());
  std::sort(pieces.begin(), pieces.end());
  std::vector<Word> words(pieces.size());
  for (size_t w = 0; w < pieces.size(); ++w) {
    for (unsigned char c : pieces[w].first) words[w].syms.push_back(byte_id[c]);
    words[w].count = pieces[w].second;
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;  // may hold stale entries
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].syms.size(); ++i) {
      const uint64_t k = pair_key(words[w].syms[i], words[w].syms[i + 1]);
      pair_count[k] += words[w].count;
      auto& where = pair_words[k];
      if (where.empty() || where.back() != w) where.push_back(static_cast<uint32_t>(w));
    }

  // Max-heap on count, ties to the smallest key; entries go stale as counts change and are
  // checked against pair_count when popped.
  using Entry = std::pair<int64_t, uint64_t>;
  auto worse = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  for (const auto& [k, c] : pair_count) heap.emplace(c, k);

  std::unordered_set<std::string> existing(v.token_bytes.begin(), v.token_bytes.end());
  std::vector<uint32_t> stamp(words.size(), UINT32_MAX);
  std::unordered_set<uint64_t> touched;
  while (v.merges.size() < target_merges && !heap.empty()) {
    const auto [count, key] = heap.top();
    heap.pop();
    auto it = pair_count.find(key);
    if (it == pair_count.end() || it->second != count) continue;  // stale
    if (count <= 0) break;
    const auto a = static_cast<uint32_t>(key >> 32), b = static_cast<uint32_t>(key);
    std::string merged = v.token_bytes[a] + v.token_bytes[b];
    // Already a token through another pair: never merge this pair (it stays out of the heap).
    if (!existing.insert(merged).second) continue;
    const auto id = static_cast<uint32_t>(v.token_bytes.size());
    const auto merge_no = static_cast<uint32_t>(v.merges.size());
    v.token_bytes.push_back(std::move(merged));
    v.merges.emplace_back(a, b);

    touched.clear();
    const std::vector<uint32_t> where_ab = std::move(pair_words[key]);
    pair_words.erase(key);
    for (uint32_t w : where_ab) {
      if (stamp[w] == merge_no) continue;
      stamp[w] = merge_no;
      auto& syms = words[w].syms;
      const int64_t c = words[w].count;
      bool found = false;
      for (size_t i = 0; i + 1 < syms.size(); ++i)
        if (syms[i] == a && syms[i + 1] == b) found = true;
      if (!found) continue;  // stale entry
      // Take the word's pairs out, merge left to right, put its pairs back.
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        const uint64_t k = pair_key(syms[i], syms[i + 1]);
        pair_count[k] -= c;
        touched.insert(k);
      }
      size_t out = 0;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          syms[out++] = id;
          ++i;
        } else {
          syms[out++] = syms[i];
        }
      }
      syms.resize(out);
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        const uint64_t k = pair_key(syms[i], syms[i + 1]);
        pair_count[k] += c;
        touched.insert(k);
        auto& where = pair_words[k];
        if (where.empty() || where.back() != w) where.push_back(w);
      }
    }
    for (uint64_t k : touched) {
      auto pc = pair_count.find(k);
      if (pc->second > 0) heap.emplace(pc->second, k);
    }
  }
  return v;
}

void write_gpt2_vocabulary(const BpeVocabulary& vocab, const std::string& out_dir) {
  FORGE_CHECK(vocab.token_bytes.size() == 256 + vocab.merges.size(),
              "vocabulary of {} tokens, {} merges", vocab.token_bytes.size(), vocab.merges.size());
  ensure_writable_dir(out_dir);
  nlohmann::ordered_json enc = nlohmann::ordered_json::object();  // in id order, as GPT-2's file
  for (size_t id = 0; id < vocab.token_bytes.size(); ++id)
    enc[gpt2_bytes_to_token_string(vocab.token_bytes[id])] = id;
  enc[std::string(Gpt2Bpe::kEndOfText)] = vocab.token_bytes.size();
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : vocab.merges) {
    merges += gpt2_bytes_to_token_string(vocab.token_bytes[a]);
    merges += ' ';
    merges += gpt2_bytes_to_token_string(vocab.token_bytes[b]);
    merges += '\n';
  }
  const auto dir = std::filesystem::path(out_dir);
  write_text_atomic((dir / "encoder.json").string(), enc.dump());
  write_text_atomic((dir / "vocab.bpe").string(), merges);
}

void run_tokenizer_train(int vocab_size, const std::vector<std::string>& files,
                         const std::string& out_dir) {
  if (files.empty()) fail("tokenizer train: expected at least one text file to learn from");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (const auto& f : files) {
    texts.push_back(read_text_file(f));
    bytes += texts.back().size();
  }
  const BpeVocabulary vocab = train_bpe(texts, vocab_size);
  write_gpt2_vocabulary(vocab, out_dir);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "learned %zu merges (vocabulary %zu with <|endoftext|>) from %zu bytes in %.2f s -> "
      "%s/encoder.json, %s/vocab.bpe\n",
      vocab.merges.size(), vocab.token_bytes.size() + 1, bytes, s, out_dir.c_str(),
      out_dir.c_str());
  if (static_cast<int>(vocab.token_bytes.size()) + 1 < vocab_size)
    std::printf("note: the text ran out of pairs before --vocab-size %d\n", vocab_size);
}

}  // namespace forge
