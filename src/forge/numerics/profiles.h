// Factories of the numerics profiles; make_numerics() (numerics.h) picks one by name.
#pragma once

#include <memory>

#include "forge/numerics/numerics.h"

namespace forge {

std::unique_ptr<Numerics> make_fast_numerics();       // fast.cpp: fastest fp32
std::unique_ptr<Numerics> make_torch_cpu_numerics();  // bit-for-bit PyTorch 1.13 CPU
std::unique_ptr<Numerics> make_bf16_numerics();       // bf16 matmuls, fp32 master state

}  // namespace forge
