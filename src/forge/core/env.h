// Environment switches that are on or off (FORGE_HUGE_PAGES, FORGE_FLUSH_SUBNORMALS,
// FORGE_BF16_AMX, FORGE_BF16_NATIVE): "1" on, "0" off, unset or empty the default; anything else is
// refused, not guessed at.
#pragma once

#include <cstdlib>
#include <cstring>

#include "forge/core/error.h"

namespace forge {

inline bool env_switch(const char* name, bool unset) {
  const char* v = std::getenv(name);
  if (!v || !*v) return unset;
  if (std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  fail("environment {}: expected 0 or 1, got '{}'", name, v);
}

// FORGE_BF16_AMX: forge's own AMX kernels in the bf16 profile where the CPU has AMX (the
// attention, the linear layers' forward product); 0 keeps VDPBF16PS and oneDNN (default 1).
bool bf16_amx_requested();
// FORGE_BF16_NATIVE: bf16 dot products (oneDNN's bf16 GEMMs, forge's AMX and VDPBF16PS kernels)
// in the bf16 profile where the CPU has them; 0 multiplies bf16-rounded operands in fp32 GEMMs
// instead (default 1).
bool bf16_native_requested();

// Reads every on/off switch once, at start-up: read lazily, a bad value would fail only
// after a command had made its output folder.
void read_environment_switches();

}  // namespace forge
