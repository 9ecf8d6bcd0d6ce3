// Sibling linear layers (Numerics::linear_forward_siblings) run as one layer of their stacked
// weight, through the profile's own linear_forward / linear_backward: what Numerics' default
// does for a profile that plans stacked_product_room() (`fast`, `bf16`: their GEMMs gain from
// one wide product over several narrow ones).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>

#include "forge/numerics/numerics.h"

namespace forge {

// The floats a profile plans for `stacked` below (its stacked_product_room()): the widest
// stacked product of the step.
size_t stacked_siblings_floats(const StepShape& shape);

// Each returns false, having done nothing, where the weights (or, backward, their gradients)
// do not lie back to back or `stacked` is too small; the caller, Numerics' default, then runs
// the layers one by one. Forward: stacked = inp W^T, then split into outs. Backward: the
// output gradients joined into stacked, then one linear_backward of the stacked layer; the
// weight gradients land in place since they lie back to back too. Where the profile's
// products write and read the siblings in place (Numerics::linear_forward_into_parts,
// linear_backward_from_parts: `bf16` on forge's AMX kernel), no split or join.
bool stacked_siblings_forward(Numerics& nx, std::span<float> stacked,
                              std::initializer_list<float*> outs, float* saved, const float* inp,
                              std::initializer_list<const float*> weights,
                              std::initializer_list<int> widths, int N, int IC);
bool stacked_siblings_backward(Numerics& nx, std::span<float> stacked, float* dinp,
                               std::initializer_list<float*> dweights,
                               std::initializer_list<const float*> douts, const float* inp,
                               std::initializer_list<const float*> weights, const float* saved,
                               std::initializer_list<int> widths, int N, int IC);

}  // namespace forge
