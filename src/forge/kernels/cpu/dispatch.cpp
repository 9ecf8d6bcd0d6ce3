#include "forge/kernels/cpu/dispatch.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "forge/core/error.h"

namespace forge::kernels::cpu {

namespace {

bool supports(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default:
      return true;
  }
}

Isa initial_isa() {
  const Isa best = detected_isa();
  const char* env = std::getenv("FORGE_CPU_ISA");
  if (!env || !*env) return best;
  const std::string want = env;
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512})
    if (want == isa_name(isa)) {
      if (!supports(isa))
        fail("environment FORGE_CPU_ISA: '{}' is not supported by this CPU (best: {})", want,
             isa_name(best));
      return isa;
    }
  fail("environment FORGE_CPU_ISA: expected avx512, avx2 or generic, got '{}'", want);
}

// Configuration, like the OpenMP thread count: read on every kernel call, set rarely.
std::atomic<int>& active() {
  static std::atomic<int> isa{static_cast<int>(initial_isa())};
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "generic";
  }
}

Isa detected_isa() {
  if (supports(Isa::kAvx512)) return Isa::kAvx512;
  if (supports(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

Isa active_isa() { return static_cast<Isa>(active().load(std::memory_order_relaxed)); }

void set_active_isa(Isa isa) {
  if (!supports(isa)) fail("cpu kernels: ISA '{}' is not supported by this CPU", isa_name(isa));
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace forge::kernels::cpu
