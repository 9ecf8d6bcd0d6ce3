// GPT-2 (Radford et al. 2019), forward and backward written out as explicit kernel calls
// over buffers planned once at construction. The numerics profile decides how each op is
// computed; this file decides which ops run, in which order, on which buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "forge/model/model.h"

namespace forge {

class Gpt2 final : public Model {
 public:
  // Plans every buffer for micro-batches of up to B sequences of up to T tokens.
  Gpt2(const ModelConfig& config, int B, int T, Numerics& numerics);

  const ModelConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  float* params() override { return params_.data(); }
  double train_flops_per_token(int T) const override;

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0,
  // LayerNorm weight 1.
  void init_weights(uint64_t seed) override;

  float forward(const int32_t* tokens, const int32_t* targets, int B, int T) override;
  void backward(float dloss, float* grads) override;
  const float* logits() const override { return logits_; }

  bool has_kv_cache() const override { return true; }
  void reset_kv_cache() override {}
  const float* decode_step(int32_t token, int pos) override;

 private:
  struct LayerParams {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attn_proj_w, *attn_proj_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *mlp_proj_w, *mlp_proj_b;
  };
  struct LayerActs {  // everything backward needs from forward, per layer
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att_saved, *sdpa, *attn_proj, *res1;
    float *ln2, *ln2_mean, *ln2_rstd, *fc, *gelu, *mlp_proj, *res2;
    // what the profile keeps from each linear layer's forward for its backward
    float *qkv_saved, *attn_proj_saved, *fc_saved, *mlp_proj_saved;
  };
  LayerParams layer_params(float* base, int l) const;  // params or grads

  ModelConfig config_;
  int maxB_, maxT_;
  Numerics& nx_;
  ParamLayout layout_;
  FloatBuffer params_;
  size_t wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<size_t> layer_offsets_;  // offset of each layer's first tensor

  // Activations (one arena) and backward scratch (another), sized in the constructor.
  FloatBuffer acts_arena_, scratch_arena_;
  std::vector<int32_t> tokens_, targets_;
  float* embed_;
  std::vector<LayerActs> layers_;
  float *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *xent_saved_, *head_saved_;
  float *d_res_, *d_tmp_, *d_ln_, *d_qkv_, *d_sdpa_, *d_fc_, *d_gelu_, *d_logits_;
  // Decoding: keys and values of every layer for up to maxT_ positions, [L][2][maxT][C],
  // and one token's activations (in decode_arena_).
  FloatBuffer kv_cache_, decode_arena_;
  struct DecodeActs {
    float *x, *ln, *ln_stats, *qkv, *y, *proj, *fc, *gelu, *logits, *scores;
  } dec_;
  int B_ = 0, T_ = 0;
  bool has_targets_ = false;
};

}  // namespace forge
