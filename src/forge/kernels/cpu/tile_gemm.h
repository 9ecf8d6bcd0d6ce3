// tile::gemm_acc (see tile_gemm.inc) on the compile-time SIMD layer, for the unit tests. The
// kernels (dispatched at run time) include tile_gemm.inc inside their ISA namespace instead.
#pragma once

#include <algorithm>

#include "forge/kernels/cpu/simd.h"

namespace forge::kernels {
#include "forge/kernels/cpu/tile_gemm.inc"
}  // namespace forge::kernels
