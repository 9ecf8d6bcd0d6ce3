// Run-time choice of the instruction set for the hand-vectorised kernels.
//
// A family's SIMD source (kernels/cpu/<family>.inc) is compiled three times in its .cpp,
// once per namespace isa_avx512 / isa_avx2 / isa_generic, each under the matching target
// attribute and with `simd` naming that ISA's layer (simd.h). The public cpu:: function
// then forwards to the variant for active_isa(), so one binary runs at full width on
// AVX-512 machines and still runs on AVX2-only (or older) ones.
#pragma once

namespace forge::kernels::cpu {

enum class Isa { kGeneric, kAvx2, kAvx512 };

const char* isa_name(Isa isa);
// The widest ISA this CPU supports (cpuid).
Isa detected_isa();
// The ISA the kernels use: detected_isa(), or lower when FORGE_CPU_ISA=avx2|generic is set
// in the environment or set_active_isa() was called (tests run every variant this way).
Isa active_isa();
// Throws forge::Error if the CPU does not support `isa`.
void set_active_isa(Isa isa);

}  // namespace forge::kernels::cpu

// Forwards `call` (a function call expression) to the variant of the active ISA.
#define FORGE_SIMD_DISPATCH(call)                \
  switch (::forge::kernels::cpu::active_isa()) { \
    case ::forge::kernels::cpu::Isa::kAvx512:    \
      return isa_avx512::call;                   \
    case ::forge::kernels::cpu::Isa::kAvx2:      \
      return isa_avx2::call;                     \
    default:                                     \
      return isa_generic::call;                  \
  }
