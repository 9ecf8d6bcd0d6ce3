// Data-parallel training on top of a Communicator: gradient buckets reduced while backward
// still runs, and the two ways to take the optimizer step.
//
// Equivalence. W ranks with A accumulation steps each compute, bit for bit, what one process
// computes with W*A accumulation steps over the same global batch: rank r's micro-step m is
// the single process's micro-step m*W + r (docs/formats.md's data order), every micro-step's
// gradient is scaled by 1/(A*W), and after every micro-step the ranks' gradients are added
// onto the accumulator in rank order — exactly the single process's sequence of adds
// ((g_0 + g_1) + g_2) + ... . So the gradients are reduced once per micro-step (what DDP does
// without no_sync), a price paid for exactness and hidden behind backward where it can be.
//
// Buckets follow the order backward produces gradients: the last transformer layer (with
// the final norm), then each layer below, then the embeddings. A bucket is started the
// moment backward leaves its layer (the model reports its progress through the activation
// recorder seam, see backward_hook()) and progressed at every later layer boundary.
//
// Optimizer modes:
//  - Replicated: every bucket is all-reduced; every rank holds the full AdamW state and runs
//    the same numerics->optimizer_step as one process would (bitwise equal to it).
//  - Zero1: every bucket is only reduce-scattered; rank r owns chunk r of every bucket, keeps
//    AdamW moments for those elements only (1/W of the state), clips and updates them, and the
//    updated parameters are all-gathered. The global gradient norm is the square root of the
//    per-rank sums of squares (float64) added in rank order: the same bits on every rank and
//    in every run, but not the bits of the single-process norm, whose summation tree is the
//    numerics profile's (so with clipping active, Zero1 matches Replicated to rounding; with
//    the clip inactive the coefficient is exactly 1 and Zero1 is bitwise equal to it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "forge/dist/communicator.h"
#include "forge/model/model.h"
#include "forge/model/params.h"
#include "forge/numerics/numerics.h"

namespace forge::dist {

enum class OptimizerSharding { Replicated, Zero1 };

class DataParallel {
 public:
  // grads: the accumulator (full layout); micro: where backward writes each micro-step.
  DataParallel(Communicator& comm, const ParamLayout& layout, OptimizerSharding sharding,
               float* params, float* grads, float* micro);

  OptimizerSharding sharding() const { return sharding_; }
  int bucket_count() const { return static_cast<int>(buckets_.size()); }

  // --- per micro-step -----------------------------------------------------------------
  // Set as the model's recorder for the duration of backward(dloss, micro()); chain gets
  // every record too (a dump writer, or null).
  ActivationRecorder* backward_hook(int micro_step, int accum, ActivationRecorder* chain);
  // After backward returns: starts the buckets backward did not report, waits for all.
  void finish_micro_step();

  // --- optimizer ----------------------------------------------------------------------
  // Zero1 only (Replicated steps through numerics directly on the full buffers): clip and
  // update this rank's elements, all-gather the parameters. Returns the global grad norm.
  double zero1_step(Numerics& numerics, const OptimizerStep& hp);
  // Zero1 moments of this rank's elements, packed in bucket order.
  float* shard_exp_avg() { return exp_avg_.data(); }
  float* shard_exp_avg_sq() { return exp_avg_sq_.data(); }
  size_t shard_floats() const { return shard_floats_; }
  // Zero1: full moments (layout-sized) -> this rank's shard (every rank passes the full ones).
  void load_shard(const float* full_exp_avg, const float* full_exp_avg_sq);
  // Zero1: every rank's shard -> full moments on rank 0 (others pass null).
  void gather_shards(float* full_exp_avg, float* full_exp_avg_sq);

  // Seconds this rank spent blocked on communication since the last call (then reset).
  double take_wait_seconds();
  // Mean over micro-steps so far of the buckets started while backward was still running.
  double buckets_started_in_backward() const {
    return micro_steps_ ? static_cast<double>(early_starts_) / micro_steps_ : 0.0;
  }
  // One line about the buckets and the per-rank memory of the optimizer state.
  std::string describe() const;

 private:
  struct Bucket {
    size_t begin = 0, end = 0;  // floats of the flat layout
    std::string trigger;        // record() name at which backward is done with this bucket
    float* scratch = nullptr;   // planned scratch of the reduction
    Communicator::Handle handle = -1;
    bool started = false;
    size_t size() const { return end - begin; }
  };
  class Hook : public ActivationRecorder {
   public:
    explicit Hook(DataParallel& dp) : dp_(dp) {}
    void record(const std::string& name, const float* data,
                const std::vector<int64_t>& shape) override;
    ActivationRecorder* chain = nullptr;

   private:
    DataParallel& dp_;
  };

  void plan_buckets(const ParamLayout& layout);
  void start_bucket(Bucket& b);
  void on_backward_point(const std::string& name);
  // Packs / unpacks rank k's elements of a layout-sized vector (bucket order).
  std::vector<Span> owned_ranges(int rank) const;

  Communicator& comm_;
  const ParamLayout& layout_;
  OptimizerSharding sharding_;
  float *params_, *grads_, *micro_;
  std::vector<Bucket> buckets_;
  std::vector<float> scratch_;
  size_t next_bucket_ = 0;
  int micro_step_ = 0, accum_ = 1;
  Hook hook_{*this};
  double wait_s_ = 0;
  int64_t early_starts_ = 0, micro_steps_ = 0;

  // Zero1 state
  std::vector<Span> owned_;  // this rank's ranges of the layout, bucket order
  size_t shard_floats_ = 0;
  std::vector<float> exp_avg_, exp_avg_sq_;
  std::vector<ParamRef> shard_refs_;
  std::vector<double> rank_sq_;  // per-rank sums of squares (gathered)
};

// "none" (or "replicated") | "zero1"; throws naming `where` (a flag, a variable) otherwise.
OptimizerSharding parse_sharding(const std::string& value, const std::string& where);
// The optimizer sharding of a data-parallel run: `flag` (forge train --dp-sharding) when
// given, else the environment variable FORGE_DP_SHARDING (kept for launchers that pass
// environment rather than arguments), else replicated.
OptimizerSharding choose_sharding(const std::string& flag);

}  // namespace forge::dist
