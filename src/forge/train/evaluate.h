// Validation loss and text generation on a trained model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "forge/model/model.h"
#include "forge/train/data_loader.h"

namespace forge {

// Mean of the mean cross-entropies of `batches` (>= 1) micro-batches of val's B x T read from
// the start of the shard, whatever its cursor was, with the training stream's rule
// (docs/formats.md): past its end the cursor wraps to the start, as the reference's does, so a
// shard of fewer batches is read again. (A training run opens and checks its validation shard
// once, at start-up, and keeps it.)
double evaluate_loss(Model& model, DataLoader& val, int batches);

struct SampleOptions {
  int max_new_tokens = 200;
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;             // 0 = whole vocabulary
  uint64_t seed = 42;
  bool kv_cache = true;  // incremental decoding where the model family has a cache
  // Tokens from this id on are never drawn (0: none barred): a byte tokenizer decodes only
  // ids below 256, whatever rows a model's vocabulary has past them.
  int vocab_limit = 0;
};

// Appends up to max_new_tokens to the prompt, calling on_token for each one as it is made.
// When the context exceeds the model's planned T it restarts from its last T/2 tokens.
// With a KV cache each new token costs one token's forward pass; without, the whole
// window is recomputed. Both give the same tokens.
std::vector<int32_t> generate(Model& model, std::vector<int32_t> prompt, int T,
                              const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token);

}  // namespace forge
