#include "forge/model/params.h"

#include <utility>

#include "forge/core/error.h"

namespace forge {

std::vector<int64_t> ParamSpec::file_shape() const {
  if (file_transposed && shape.size() == 2) return {shape[1], shape[0]};
  return shape;
}

size_t ParamLayout::add(std::string name, std::vector<int64_t> shape, bool file_transposed,
                        bool decay) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.file_transposed = file_transposed;
  p.decay = decay;
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= static_cast<size_t>(d);
  p.offset = total_;
  total_ += (p.numel + 15) / 16 * 16;
  tensors_.push_back(std::move(p));
  return tensors_.back().offset;
}

size_t ParamLayout::add_linear_weight(std::string name, std::vector<int64_t> shape,
                                      bool file_transposed) {
  FORGE_CHECK(shape.size() == 2, "linear weight '{}' must be 2-D", name);
  const size_t offset = add(std::move(name), std::move(shape), file_transposed, true);
  tensors_.back().linear = true;
  return offset;
}

const ParamSpec& ParamLayout::find(const std::string& name) const {
  for (const auto& p : tensors_)
    if (p.name == name) return p;
  fail("model has no parameter named '{}'", name);
}

size_t ParamLayout::numel() const {
  size_t n = 0;
  for (const auto& p : tensors_) n += p.numel;
  return n;
}

int ParamLayout::linear_weights() const {
  int n = 0;
  for (const auto& p : tensors_) n += p.linear ? 1 : 0;
  return n;
}

std::vector<std::array<int, 2>> ParamLayout::linear_weight_shapes() const {
  std::vector<std::array<int, 2>> shapes;
  for (const auto& p : tensors_)
    if (p.linear) shapes.push_back({static_cast<int>(p.shape[0]), static_cast<int>(p.shape[1])});
  return shapes;
}

size_t ParamLayout::linear_weight_floats() const {
  size_t n = 0;
  for (const auto& p : tensors_) n += p.linear ? p.numel : 0;
  return n;
}

std::vector<ParamRef> param_refs(const ParamLayout& layout, float* params, float* grads,
                                 float* exp_avg, float* exp_avg_sq) {
  std::vector<ParamRef> refs;
  refs.reserve(layout.tensors().size());
  for (const auto& p : layout.tensors())
    refs.push_back({params + p.offset, grads + p.offset, exp_avg + p.offset, exp_avg_sq + p.offset,
                    p.numel, p.decay});
  return refs;
}

}  // namespace forge
