// Checkpoints: a directory with model.safetensors (Hugging Face names and layouts),
// optimizer.safetensors (exp_avg.<name>, exp_avg_sq.<name>) and state.json. The directory
// is written under a temporary name and renamed into place, so a checkpoint either exists
// whole or not at all.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "forge/model/params.h"

namespace forge {

struct TrainState {
  int64_t step = 0;          // optimizer steps completed
  uint64_t data_cursor = 0;  // DataLoader cursor for the next micro-batch
  std::array<uint64_t, 4> rng{};
  double tokens_seen = 0;
  nlohmann::json config;  // the config the run was started with
  int world_size = 1;     // DP: ranks of the run that wrote it (1 when absent: older files)
  // ShardReader::fingerprint() of the shards the run read, "" when unknown (older files)
  std::string train_fingerprint, val_fingerprint;
};

// One tensor in file layout: a view of src, or a transposed copy held in scratch.
const float* to_file_layout(const ParamSpec& p, const float* src, std::vector<float>& scratch);

// Parameters in file layout (transposing [out,in] -> [in,out] where the layout says so).
void save_params(const std::string& path, const ParamLayout& layout, const float* params,
                 const std::string& prefix = "", const std::string& format_note = "pt");
// Reads every tensor of the layout from path into params, checking names and shapes.
void load_params(const std::string& path, const ParamLayout& layout, float* params,
                 const std::string& prefix = "");

void save_checkpoint(const std::string& dir, const ParamLayout& layout, const float* params,
                     const float* exp_avg, const float* exp_avg_sq, const TrainState& state);
// The state.json of a checkpoint (any path resolve_checkpoint takes), tensors not read.
TrainState read_checkpoint_state(const std::string& path);
// Loads the model and optimizer tensors of a checkpoint (any path resolve_checkpoint takes);
// exp_avg / exp_avg_sq may be null (model only). Its state is read_checkpoint_state's.
void load_checkpoint_tensors(const std::string& path, const ParamLayout& layout, float* params,
                             float* exp_avg, float* exp_avg_sq);
// DP (faults): removes what a process killed while writing left under dir/checkpoints:
// "<name>.tmp" directories (never renamed into place, so never a checkpoint) and
// "<name>.tmp.<pid>" files of processes no longer running (write_file_atomic's temporary name,
// never renamed over its target).
void remove_partial_checkpoints(const std::string& out_dir);
// What an earlier run left in the run folder out_dir: its checkpoints (OUT/checkpoints/step_N
// folders, sorted) and whether it wrote OUT/metrics.jsonl. A new run there (not a resume)
// would mix its checkpoints and `latest` with these and replace the metrics.
struct EarlierRun {
  std::vector<std::string> checkpoints;
  bool metrics = false;
  bool empty() const { return checkpoints.empty() && !metrics; }
  std::string describe() const;  // "checkpoints step_000010 to step_000250 and metrics.jsonl"
};
EarlierRun earlier_run_in(const std::string& out_dir);
// Removes an earlier run's checkpoints, `latest` and metrics.jsonl from out_dir.
void remove_earlier_run(const std::string& out_dir, const EarlierRun& run);
// The checkpoint directory a path names: a checkpoint directory (it holds state.json) is
// itself; the `latest` file a run keeps in OUT/checkpoints, that folder, or OUT itself name
// the checkpoint `latest` points to (its last component, looked up beside `latest`, so the
// run's working directory does not matter). Any other path comes back unchanged for the
// caller to report; a `latest` naming no checkpoint directory is an error naming both.
std::string resolve_checkpoint(const std::string& path);
// The run folder OUT of a checkpoint OUT/checkpoints/step_N (any path resolve_checkpoint
// takes), or empty when the checkpoint does not sit in a run's checkpoints folder.
std::string run_folder_of(const std::string& checkpoint_path);
// The model file of a checkpoint dir, or the path itself when it is a .safetensors file.
std::string model_file_of(const std::string& path);

}  // namespace forge
