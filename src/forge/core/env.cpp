#include "forge/core/env.h"

#include "forge/core/float_buffer.h"
#include "forge/core/threads.h"

namespace forge {

bool bf16_amx_requested() {
  static const bool on = env_switch("FORGE_BF16_AMX", true);
  return on;
}

bool bf16_native_requested() {
  static const bool on = env_switch("FORGE_BF16_NATIVE", true);
  return on;
}

void read_environment_switches() {
  huge_pages_requested();
  subnormal_flush_requested();
  bf16_amx_requested();
  bf16_native_requested();
}

}  // namespace forge
