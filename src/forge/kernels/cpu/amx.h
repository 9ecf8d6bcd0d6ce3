// AMX tiles (Intel Sapphire Rapids and later): whether this process may use them, and the
// one tile configuration forge's AMX kernels share, so that a thread can run any of them
// after one configure_tiles().
#pragma once

namespace forge::kernels::cpu {

// True when the CPU has AMX-TILE and AMX-BF16 and Linux lets this process use the tiles
// (asked for once, on the first call).
bool amx_tiles_available();

// Whether forge's AMX kernels run: the tiles usable, the AVX-512 kernel set active
// (FORGE_CPU_ISA=avx2 stands for a CPU without AVX-512, which has no AMX either) and
// FORGE_BF16_AMX not 0. The one rule the bf16 attention and linear kernels both follow.
bool amx_kernels_enabled();

// Loads the shared configuration on the calling thread: tiles 0-7 all 16 rows of 64 bytes.
// The kernels keep C in tiles 0-3 (a 32 x 32 fp32 block), A in 4-5 and B in 6-7. Requires
// amx_tiles_available().
void configure_tiles();
// Hands the calling thread's tile state back, so that the OS need not save it.
void release_tiles();

}  // namespace forge::kernels::cpu
