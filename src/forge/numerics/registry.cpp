// make_numerics(): the one place that maps a profile name to its factory.
#include "forge/core/error.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/profiles.h"

namespace forge {

std::vector<std::string> numerics_profiles() { return {"fast", "torch-cpu", "bf16"}; }

std::unique_ptr<Numerics> make_numerics(const std::string& profile) {
  if (profile == "fast") return make_fast_numerics();
  if (profile == "torch-cpu") return make_torch_cpu_numerics();
  if (profile == "bf16") return make_bf16_numerics();
  fail("numerics profile '{}' is unknown: expected one of {}", profile,
       fmt::join(numerics_profiles(), ", "));
}

}  // namespace forge
