#include "forge/numerics/stacked_linear.h"

#include <algorithm>

#include "forge/kernels/linear.h"

namespace forge {

namespace {
// The rows of the stacked weight when each tensor [widths[i], IC] starts right after the
// previous one; 0 when they do not (or the lists disagree).
template <typename Pointer>
int stacked_width(std::initializer_list<Pointer> tensors, std::initializer_list<int> widths,
                  int IC) {
  if (tensors.size() == 0 || tensors.size() != widths.size()) return 0;
  int rows = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors.begin()[i] != *tensors.begin() + static_cast<size_t>(rows) * IC) return 0;
    rows += widths.begin()[i];
  }
  return rows;
}
}  // namespace

size_t stacked_siblings_floats(const StepShape& shape) {
  size_t floats = 0;
  for (const auto& [out, in] : shape.stacked_linear_shapes)
    floats = std::max(floats, static_cast<size_t>(shape.B) * shape.T * out);
  return floats;
}

bool stacked_siblings_forward(Numerics& nx, std::span<float> stacked,
                              std::initializer_list<float*> outs, float* saved, const float* inp,
                              std::initializer_list<const float*> weights,
                              std::initializer_list<int> widths, int N, int IC) {
  const int rows = stacked_width(weights, widths, IC);
  if (rows == 0 || outs.size() != weights.size() || static_cast<size_t>(N) * rows > stacked.size())
    return false;
  const std::span<float* const> parts(outs.begin(), outs.size());
  const std::span<const int> part_widths(widths.begin(), widths.size());
  if (nx.linear_forward_into_parts(parts, part_widths, saved, inp, *weights.begin(), N, IC))
    return true;
  nx.linear_forward(stacked.data(), saved, inp, *weights.begin(), nullptr, N, IC, rows);
  kernels::cpu::split_columns(outs.begin(), widths.begin(), static_cast<int>(outs.size()),
                              stacked.data(), N);
  return true;
}

bool stacked_siblings_backward(Numerics& nx, std::span<float> stacked, float* dinp,
                               std::initializer_list<float*> dweights,
                               std::initializer_list<const float*> douts, const float* inp,
                               std::initializer_list<const float*> weights, const float* saved,
                               std::initializer_list<int> widths, int N, int IC) {
  const int rows = stacked_width(weights, widths, IC);
  if (rows == 0 || douts.size() != weights.size() || stacked_width(dweights, widths, IC) != rows ||
      static_cast<size_t>(N) * rows > stacked.size())
    return false;
  if (nx.linear_backward_from_parts(
          dinp, *dweights.begin(), std::span<const float* const>(douts.begin(), douts.size()),
          std::span<const int>(widths.begin(), widths.size()), inp, *weights.begin(), saved, N, IC))
    return true;
  kernels::cpu::join_columns(stacked.data(), douts.begin(), widths.begin(),
                             static_cast<int>(douts.size()), N);
  nx.linear_backward(dinp, *dweights.begin(), nullptr, stacked.data(), inp, *weights.begin(), saved,
                     N, IC, rows);
  return true;
}

}  // namespace forge
