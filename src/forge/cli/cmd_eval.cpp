#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "forge/cli/commands.h"
#include "forge/cli/validators.h"
#include "forge/core/error.h"
#include "forge/core/threads.h"
#include "forge/data/tokenizer.h"
#include "forge/io/atomic_file.h"
#include "forge/train/data_loader.h"
#include "forge/train/evaluate.h"
#include "forge/train/loaded_model.h"
#include "forge/verify/logits.h"

namespace forge::cli {

void register_eval(CLI::App& app) {
  struct Opts {
    std::string checkpoint, config, data, dump_logits;
    int batches = -1, threads = 0;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("eval", "validation loss and perplexity of a checkpoint");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, a run's OUT/checkpoints/latest or OUT, or a model "
                  ".safetensors with --config")
      ->check(non_empty_path())
      ->required();
  cmd->add_option("--config", o->config, "config JSON (default: the checkpoint's own)")
      ->check(non_empty_path());
  cmd->add_option("--data", o->data, "token shard to evaluate on (default: the config's data.val)")
      ->check(non_empty_path());
  cmd->add_option("--batches", o->batches,
                  "micro-batches to evaluate (default: train.eval_batches)")
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--threads", o->threads, "threads (default: all cores)")
      ->check(integer_in(0, 4096));
  cmd->add_flag("--json", o->json, "print one JSON object instead of text");
  cmd->add_option("--dump-logits", o->dump_logits,
                  "also write tokens, targets and logits of the evaluated batches (safetensors)")
      ->check(non_empty_path());
  cmd->callback([o] {
    // Checked before the evaluation, not after it.
    if (!o->dump_logits.empty()) check_writable_file(o->dump_logits, "--dump-logits");
    set_thread_count(o->threads);
    LoadedModel lm = load_trained_model(o->checkpoint, o->config, 0, 0);
    const Config& c = lm.config;
    const std::string data = o->data.empty() ? c.data.val : o->data;
    if (data.empty() && lm.hf)
      fail("{}: a Hugging Face model names no data: give --data SHARD", o->checkpoint);
    if (data.empty()) fail("{}: field 'data.val' is empty and no --data was given", c.path);
    const int batches = o->batches > 0 ? o->batches : c.train.eval_batches;
    if (batches < 1)
      fail("{}: field 'train.eval_batches' is 0 (no validation) and no --batches was given",
           c.path);
    // A Hugging Face folder's vocabulary is its forge_vocab_size, or else its vocab_size.
    const std::string vocab_field = !lm.hf ? "model.vocab_size"
                                    : c.model.vocab_size != c.model.vocab_rows()
                                        ? "forge_vocab_size"
                                        : "vocab_size";
    // Opened once: checked against the vocabulary, then evaluated.
    DataLoader shard(data, c.train.batch_size, c.train.seq_len);
    check_shard_vocabulary(shard.shard(), c.model.vocab_size, c.path, vocab_field);
    const double loss = o->dump_logits.empty()
                            ? evaluate_loss(*lm.model, shard, batches)
                            : verify::dump_logits(*lm.model, shard, batches, o->dump_logits);
    if (o->json)
      fmt::print("{}\n", nlohmann::json{{"val_loss", loss},
                                        {"perplexity", std::exp(loss)},
                                        {"data", data},
                                        {"batches", batches}}
                             .dump());
    else
      fmt::print("val loss {:.4f} | perplexity {:.3f} | {} ({} batches)\n", loss, std::exp(loss),
                 data, batches);
  });
}

void register_sample(CLI::App& app) {
  struct Opts {
    std::string checkpoint, config, prompt = "\n", tokenizer, vocab_dir;
    SampleOptions s;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd =
      app.add_subcommand("sample", "generate text from a checkpoint, streamed as it is made");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, or a run's OUT/checkpoints/latest or OUT")
      ->check(non_empty_path())
      ->required();
  cmd->add_option("--config", o->config, "config JSON (default: the checkpoint's own)")
      ->check(non_empty_path());
  cmd->add_option("--prompt", o->prompt, "text to continue");
  cmd->add_option("--tokens", o->s.max_new_tokens, "tokens to generate")->check(positive_integer());
  cmd->add_option("--temperature", o->s.temperature, "softmax temperature (0 = greedy)")
      ->check(non_negative_number());
  cmd->add_option("--top-k", o->s.top_k, "sample among the k most likely tokens (0 = all)")
      ->check(non_negative_integer());
  cmd->add_option("--seed", o->s.seed, "random seed");
  cmd->add_option("--tokenizer", o->tokenizer, "bytes | gpt2 (default: from the vocabulary size)");
  cmd->add_option("--vocab-dir", o->vocab_dir, "folder with encoder.json and vocab.bpe (gpt2)")
      ->check(non_empty_path());
  cmd->add_option("--threads", o->threads, "threads (default: all cores)")
      ->check(integer_in(0, 4096));
  cmd->add_flag("!--no-kv-cache", o->s.kv_cache, "recompute the whole window for every token");
  cmd->callback([o] {
    set_thread_count(o->threads);
    LoadedModel lm = load_trained_model(o->checkpoint, o->config, 1, 0);
    auto tok = tokenizer_for_model(o->tokenizer, lm.config.model.vocab_size, lm.config.path,
                                   TokenizerOptions{o->vocab_dir});
    o->s.vocab_limit = static_cast<int>(tok->vocab_size());  // only what it can decode
    std::vector<int32_t> prompt;
    for (uint32_t t : tok->encode_with_special(o->prompt))
      prompt.push_back(static_cast<int32_t>(t));
    if (prompt.empty()) fail("--prompt: expected text that makes at least one token");
    fmt::print("{}", o->prompt);
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    // Bytes of a multi-byte character may arrive one token at a time: print as they come.
    const int T = std::min(lm.config.train.seq_len, lm.config.model.block_size);
    generate(*lm.model, prompt, T, o->s, [&](int32_t t) {
      const uint32_t id = static_cast<uint32_t>(t);
      fmt::print("{}", tok->decode(std::span<const uint32_t>(&id, 1)));
      std::fflush(stdout);
    });
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(stderr, "\n[{} tokens in {:.2f} s, {:.1f} tokens/s]\n", o->s.max_new_tokens, secs,
               o->s.max_new_tokens / secs);
  });
}

}  // namespace forge::cli
