// Deliberate bugs for the "gates can fail" test (and one for `forge bench`'s test). They exist
// only in a build configured with -DFORGE_TEST_BUGS=ON and only act when the environment
// variable FORGE_TEST_BUG names them:
//   attn-scale                 attention computed with a wrong scale (queries scaled by 1.25)
//   adamw-no-bias-correction   AdamW without its bias corrections
//   slow-peak                  `forge bench`'s engine runs read the fp32 peak after their
//                              steps at half speed (the warning of a machine that slowed down)
//   pause-at-start-up          `forge train` waits 3 s in its start-up, its stop signals
//                              already caught (for the test of a signal before the first step)
//   busy-start-up-peak         `forge train`'s start-up reading of the fp32 peak comes out a
//                              thousandth of the machine's (one taken while the cores were busy)
// A normal build compiles them to nothing.
#pragma once

#include <cstddef>
#include <string_view>

namespace forge {

#ifdef FORGE_TEST_BUGS
bool test_bug_active(std::string_view name);
#else
constexpr bool test_bug_active(std::string_view) { return false; }
#endif

// Scales the query third of each qkv row by s when the attn-scale bug is active.
inline void test_bug_scale_queries(float* qkv, int N, int C, float s) {
  if (!test_bug_active("attn-scale")) return;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) qkv[static_cast<size_t>(n) * 3 * C + c] *= s;
}

}  // namespace forge
