// Sampling with the KV cache gives the same tokens as recomputing the whole window, for the
// same seed, including after the window starts to slide.
#include <gtest/gtest.h>

#include <vector>

#include "forge/core/rng.h"
#include "forge/model/gpt2.h"
#include "forge/train/evaluate.h"

namespace forge {
namespace {

TEST(Sampling, KvCacheMatchesUncachedDecoding) {
  ModelConfig cfg;
  cfg.vocab_size = 37;
  cfg.padded_vocab_size = 40;
  cfg.n_layer = 2;
  cfg.n_head = 3;
  cfg.n_embd = 24;
  cfg.block_size = 16;
  const int T = 13;
  auto nx = make_numerics("fast");
  Gpt2 model(cfg, 1, T, *nx);
  model.init_weights(9);
  // Spread the logits so that rounding differences between the two paths cannot flip a
  // choice: scale the token embeddings (the tied head) up.
  Rng rng(4);
  for (const auto& p : model.layout().tensors())
    for (size_t i = 0; i < p.numel; ++i)
      model.params()[p.offset + i] += static_cast<float>(0.3 * rng.normal());

  for (double temperature : {0.0, 0.9}) {
    SampleOptions opt;
    opt.max_new_tokens = 30;  // > T: the window slides
    opt.temperature = temperature;
    opt.top_k = 10;
    opt.seed = 123;
    std::vector<int32_t> streamed;
    opt.kv_cache = true;
    auto cached = generate(model, {1, 2, 3}, T, opt, [&](int32_t t) { streamed.push_back(t); });
    opt.kv_cache = false;
    auto uncached = generate(model, {1, 2, 3}, T, opt, [](int32_t) {});
    ASSERT_EQ(cached.size(), 33u);
    EXPECT_EQ(cached, uncached) << "temperature " << temperature;
    EXPECT_EQ(std::vector<int32_t>(cached.begin() + 3, cached.end()), streamed);
  }
}

}  // namespace
}  // namespace forge
