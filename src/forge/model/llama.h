// Llama (Touvron et al. 2023) as Hugging Face's LlamaForCausalLM computes it: RMSNorm before
// each block, rotary position embeddings on queries and keys (rotate_half convention),
// grouped-query causal attention, a SwiGLU MLP, no biases anywhere, an untied LM head.
// Forward and backward are written out as kernel calls over buffers planned once at
// construction, like gpt2.cpp; the numerics profile decides how each op is computed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "forge/model/model.h"

namespace forge {

class Llama final : public Model {
 public:
  // Plans every buffer for micro-batches of up to B sequences of up to T tokens.
  Llama(const ModelConfig& config, int B, int T, Numerics& numerics);

  const ModelConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  float* params() override { return params_.data(); }
  double train_flops_per_token(int T) const override;

  // N(0, 0.02) for the embedding, every projection and the head; the residual projections
  // (o_proj, down_proj) N(0, 0.02/sqrt(2L)) as GPT-2 does; RMSNorm weights 1.
  void init_weights(uint64_t seed) override;

  float forward(const int32_t* tokens, const int32_t* targets, int B, int T) override;
  void backward(float dloss, float* grads) override;
  const float* logits() const override { return logits_; }

 private:
  struct LayerParams {
    float *q_w, *k_w, *v_w, *o_w, *gate_w, *up_w, *down_w, *ln1_w, *ln2_w;
  };
  struct LayerActs {  // what backward needs from forward, per layer
    float *ln1, *ln1_rstd, *q, *k, *v, *att_saved, *sdpa, *res1;
    float *ln2, *ln2_rstd, *gate, *up, *act, *res2;
    // what the profile keeps from each linear layer's forward for its backward
    // (q, k and v share ln1's; gate and up share ln2's: linear_forward_siblings)
    float *ln1_saved, *o_saved, *ln2_saved, *down_saved;
  };
  LayerParams layer_params(float* base, int l) const;  // params or grads

  ModelConfig config_;
  int maxB_, maxT_;
  int hd_, NH_, KVH_, Dq_, Dkv_, F_;  // head dim, heads, kv heads, NH*hd, KVH*hd, MLP width
  Numerics& nx_;
  ParamLayout layout_;
  FloatBuffer params_;
  size_t embed_w_, norm_w_, head_w_;
  std::vector<size_t> layer_first_;  // index in layout_.tensors() of each layer's first tensor

  FloatBuffer acts_arena_, scratch_arena_;
  std::vector<int32_t> tokens_, targets_;
  float *rope_cos_, *rope_sin_, *no_positions_;
  float* embed_;
  std::vector<LayerActs> layers_;
  float *norm_, *norm_rstd_, *logits_, *xent_saved_, *head_saved_;
  // Forward scratch: tensors only the dump looks at (pre-rotation q and k, the two residual
  // branches), rewritten by every layer.
  float *q_pre_, *k_pre_, *branch_;
  float *d_res_, *d_tmp_, *d_ln_, *d_sdpa_, *d_qrot_, *d_krot_, *d_q_, *d_k_, *d_v_;
  float *d_gate_, *d_up_, *d_act_, *d_logits_;
  int B_ = 0, T_ = 0;
  bool has_targets_ = false;
};

}  // namespace forge
