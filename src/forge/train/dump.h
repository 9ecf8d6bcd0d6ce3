// Dumps for the equivalence gates (docs/formats.md): per step a safetensors file with the
// loss, the gradient norm, every gradient (before clipping) and every parameter (after the
// update); at level 2 also the forward outputs and their gradients of the first micro-batch.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "forge/model/model.h"
#include "forge/model/params.h"

namespace forge {

class DumpWriter : public ActivationRecorder {
 public:
  // act_steps: steps (1-based) whose activations are dumped at level 2 (default {1}).
  DumpWriter(std::string dir, int level, std::set<int64_t> act_steps);
  bool wants_activations(int64_t step) const { return level_ >= 2 && act_steps_.count(step); }
  void record(const std::string& name, const float* data,
              const std::vector<int64_t>& shape) override;
  void capture_grads(const ParamLayout& layout, const float* grads);
  // Writes step_<step>.safetensors with what was captured plus params, then the index.
  void finish_step(int64_t step, double loss, double grad_norm, const ParamLayout& layout,
                   const float* params);

 private:
  struct Captured {
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::string dir_;
  int level_;
  std::set<int64_t> act_steps_;
  std::map<std::string, Captured> tensors_;
  std::vector<int64_t> steps_written_;
};

}  // namespace forge
