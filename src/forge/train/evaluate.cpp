#include "forge/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "forge/core/error.h"
#include "forge/core/rng.h"
#include "forge/train/data_loader.h"

namespace forge {

double evaluate_loss(Model& model, DataLoader& val, int batches) {
  if (batches < 1) fail("evaluate: expected at least one micro-batch, got {}", batches);
  const int B = val.batch(), T = val.seq_len();
  val.reset();
  const uint64_t per_batch = static_cast<uint64_t>(B) * T;
  std::vector<int32_t> inputs(per_batch), targets(per_batch);
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    val.next(inputs.data(), targets.data());
    sum += model.forward(inputs.data(), targets.data(), B, T);
  }
  return sum / batches;
}

std::vector<int32_t> generate(Model& model, std::vector<int32_t> tokens, int T,
                              const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
  const ModelConfig& mc = model.config();
  const int Vp = mc.vocab_rows();
  if (tokens.empty()) fail("sample: the prompt must hold at least one token");
  for (int32_t t : tokens)
    if (t < 0 || t >= mc.vocab_size)
      fail("sample: prompt token {} is outside the vocabulary of {}", t, mc.vocab_size);
  // The tokens that may be drawn: [0, V).
  const int V = opt.vocab_limit > 0 ? std::min(opt.vocab_limit, mc.vocab_size) : mc.vocab_size;
  Rng rng(opt.seed);
  std::vector<float> probs(V);
  std::vector<int32_t> order(V);
  const bool cached = opt.kv_cache && model.has_kv_cache();
  // The window of context the next token sees: tokens[start, end). When it is full it
  // restarts from its last T/2 tokens, so that both paths see the same context and the
  // cache is rebuilt once every T/2 tokens rather than for every token.
  size_t start = tokens.size() > static_cast<size_t>(T) ? tokens.size() - T : 0;
  int in_cache = 0;  // tokens of the current window already in the cache
  auto prefill = [&]() -> const float* {
    model.reset_kv_cache();
    const float* l = nullptr;
    for (size_t i = start; i < tokens.size(); ++i)
      l = model.decode_step(tokens[i], static_cast<int>(i - start));
    in_cache = static_cast<int>(tokens.size() - start);
    return l;
  };
  const float* logits = cached ? prefill() : nullptr;
  for (int i = 0; i < opt.max_new_tokens; ++i) {
    if (!cached) {
      const int ctx = static_cast<int>(tokens.size() - start);
      model.forward(tokens.data() + start, nullptr, 1, ctx);
      logits = model.logits() + static_cast<size_t>(ctx - 1) * Vp;
    }
    int32_t next = 0;
    if (opt.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
    } else {
      // softmax(logits / temperature) restricted to the top_k largest.
      std::iota(order.begin(), order.end(), 0);
      int k = opt.top_k > 0 ? std::min(opt.top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return logits[a] > logits[b]; });
      const double maxv = logits[order[0]];
      double total = 0;
      for (int j = 0; j < k; ++j) {
        probs[j] = static_cast<float>(std::exp((logits[order[j]] - maxv) / opt.temperature));
        total += probs[j];
      }
      double u = rng.uniform() * total;
      next = order[k - 1];
      for (int j = 0; j < k; ++j) {
        u -= probs[j];
        if (u < 0) {
          next = order[j];
          break;
        }
      }
    }
    tokens.push_back(next);
    on_token(next);
    const bool restart = tokens.size() - start > static_cast<size_t>(T);
    if (restart) start = tokens.size() - std::max(1, T / 2);
    if (cached && i + 1 < opt.max_new_tokens)
      logits = restart ? prefill() : model.decode_step(next, in_cache++);
  }
  return tokens;
}

}  // namespace forge
