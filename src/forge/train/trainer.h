// The training loop: config -> model -> planned buffers -> steps (forward, backward,
// gradient accumulation, clipping, AdamW) -> logs, validation, checkpoints, dumps.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "forge/io/config.h"

namespace forge {

struct TrainOptions {
  std::string config_path;
  std::string resume;    // checkpoint directory to continue from
  std::string init;      // safetensors with the initial parameters (HF layout)
  std::string numerics;  // overrides config.numerics when set
  std::string dump_dir;  // equivalence dumps (docs/formats.md)
  int dump_level = 0;
  std::set<int64_t> dump_act_steps;
  int steps = -1;           // overrides train.steps when >= 0 (also the schedule length)
  int stop_after = -1;      // stop (with a checkpoint) at this step, counted from the run's start
  std::string out_dir;      // overrides config.out_dir when set
  bool overwrite = false;   // a new run may replace an earlier run in its folder
  bool quiet = false;       // no per-step lines or progress bar (metrics file still written)
  std::string dp_sharding;  // "none" | "zero1"; empty: FORGE_DP_SHARDING, else none
};

struct TrainResult {
  int64_t steps_done = 0;
  double last_loss = 0;
  double val_loss = 0;      // NaN when no validation shard
  std::string checkpoint;   // last checkpoint directory written
  double tokens_per_s = 0;  // median over the run's steps
  double mfu = 0;           // median, against the fp32 peak measured at start-up
  int interrupted_by = 0;   // the signal (SIGINT, SIGTERM) that stopped the run early, or 0
};

TrainResult run_training(const TrainOptions& options);

}  // namespace forge
