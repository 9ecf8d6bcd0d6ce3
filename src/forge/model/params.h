// Parameters live in one flat float buffer; each named tensor is a view into it. The same
// layout (same offsets) is used for gradients and for the two AdamW moments, so one index
// addresses a parameter, its gradient and its optimizer state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "forge/core/float_buffer.h"  // the buffers params, gradients and moments live in
#include "forge/numerics/numerics.h"  // ParamRef

namespace forge {

struct ParamSpec {
  std::string name;              // Hugging Face name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;    // engine layout: linear weights are [out, in]
  bool file_transposed = false;  // stored [in, out] in checkpoints (HF Conv1D)
  bool decay = false;            // AdamW weight decay applies (2-D weights)
  bool linear = false;           // a linear layer multiplies by it (y = x W^T)
  size_t offset = 0;             // into the flat buffer, in floats
  size_t numel = 0;

  std::vector<int64_t> file_shape() const;
};

class ParamLayout {
 public:
  // Appends a tensor; offsets are aligned to 16 floats (64 bytes) for vector loads.
  size_t add(std::string name, std::vector<int64_t> shape, bool file_transposed, bool decay);
  // A linear layer's weight [out, in] (decayed), declared as such so that a profile keeping
  // something per weight through a step can plan for it (StepShape::linear_weights).
  size_t add_linear_weight(std::string name, std::vector<int64_t> shape, bool file_transposed);
  const std::vector<ParamSpec>& tensors() const { return tensors_; }
  const ParamSpec& find(const std::string& name) const;  // throws naming the tensor
  size_t total_floats() const { return total_; }
  size_t numel() const;                 // sum of tensor sizes (without alignment padding)
  int linear_weights() const;           // tensors added by add_linear_weight
  size_t linear_weight_floats() const;  // their elements
  std::vector<std::array<int, 2>> linear_weight_shapes() const;  // their [out, in]

 private:
  std::vector<ParamSpec> tensors_;
  size_t total_ = 0;
};

// One ParamRef per tensor of the layout, over buffers laid out as `params` is (gradients,
// AdamW's two moments): what a profile's optimizer_step takes.
std::vector<ParamRef> param_refs(const ParamLayout& layout, float* params, float* grads,
                                 float* exp_avg, float* exp_avg_sq);

}  // namespace forge
