// What the trainer needs from a model family. gpt2 and llama implement it; each writes
// its forward and backward out in full.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "forge/core/error.h"
#include "forge/core/float_buffer.h"
#include "forge/io/config.h"
#include "forge/model/params.h"
#include "forge/numerics/numerics.h"

namespace forge {

// Receives named intermediate tensors (dump level 2). Shapes are in elements.
class ActivationRecorder {
 public:
  virtual ~ActivationRecorder() = default;
  virtual void record(const std::string& name, const float* data,
                      const std::vector<int64_t>& shape) = 0;
};

// Lays out `arena` from one plan: `plan(take)` runs twice, first with take(n) counting n
// floats (each piece rounded up to 16, so every pointer is 64-byte aligned), then, the arena
// sized to that count, with take(n) handing out consecutive pieces of it. The size cannot
// drift from the layout. The arena is zero-filled.
template <typename Plan>
void plan_arena(FloatBuffer& arena, Plan&& plan) {
  const auto align = [](size_t n) { return (n + 15) / 16 * 16; };
  size_t total = 0;
  plan([&](size_t n) {
    total += align(n);
    return static_cast<float*>(nullptr);
  });
  arena.resize(total);
  float* cursor = arena.data();
  plan([&](size_t n) {
    float* p = cursor;
    cursor += align(n);
    return p;
  });
  FORGE_CHECK(cursor == arena.data() + arena.size(), "arena plan mismatch");
}

// What a numerics profile plans for (Numerics::plan): micro-batches of up to B x T tokens of
// the config's model, and the layout's linear weights. The family adds what only it knows (the
// sibling layers it multiplies as one).
StepShape step_shape(const ModelConfig& config, int B, int T, const ParamLayout& layout);

// A dumped tensor's place: "act" or "actgrad", and its layer (its name is KIND.h.LAYER.NAME).
struct LayerDumpName {
  const char* kind;
  int layer;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const ParamLayout& layout() const = 0;
  virtual float* params() = 0;
  // FLOPs of one training step per token at sequence length T (BENCHMARKS.md's formula).
  virtual double train_flops_per_token(int T) const = 0;
  // The family's published initialisation, drawn from seed.
  virtual void init_weights(uint64_t seed) = 0;
  // tokens, targets: [B, T] (no larger than planned). Returns the mean cross-entropy over
  // the B*T targets; with targets == nullptr only the logits are computed (returns 0).
  virtual float forward(const int32_t* tokens, const int32_t* targets, int B, int T) = 0;
  // dloss * d(loss)/d(params) of the last forward, OVERWRITTEN into grads (flat buffer with
  // the parameter layout).
  virtual void backward(float dloss, float* grads) = 0;
  // [B, T, Vp] logits of the last forward; a backward since has overwritten them with their
  // gradient (the two share one buffer).
  virtual const float* logits() const = 0;
  // Where forward and backward hand their intermediate tensors (null: nowhere).
  void set_recorder(ActivationRecorder* r) { recorder_ = r; }

  // Incremental decoding with a key/value cache (sampling). A family without one returns
  // false and generation recomputes the whole window for every token.
  virtual bool has_kv_cache() const { return false; }
  virtual void reset_kv_cache() {}
  // Appends `token` at position `pos` (== tokens already cached) and returns the [Vp]
  // logits that follow it.
  virtual const float* decode_step(int32_t token, int pos) {
    (void)token;
    (void)pos;
    return nullptr;
  }

 protected:
  // Hands a tensor to the recorder when one listens. The name and the shape are built only
  // then: a step without a recorder allocates nothing.
  void record(std::string_view name, const float* data, std::initializer_list<int64_t> shape);
  void record(LayerDumpName where, std::string_view name, const float* data,
              std::initializer_list<int64_t> shape);
  // Whether a recorder listens (a fused op that skips writing what it would hand over is
  // then run unfused).
  bool recording() const { return recorder_ != nullptr; }

 private:
  ActivationRecorder* recorder_ = nullptr;
};

// Builds the model of config.family with buffers planned for B x T micro-batches.
std::unique_ptr<Model> make_model(const ModelConfig& config, int B, int T, Numerics& numerics);

}  // namespace forge
