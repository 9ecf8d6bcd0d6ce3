#include "forge/core/test_bugs.h"

#ifdef FORGE_TEST_BUGS
#include <cstdlib>
#include <string>

namespace forge {
bool test_bug_active(std::string_view name) {
  const char* v = std::getenv("FORGE_TEST_BUG");
  return v != nullptr && std::string_view(v) == name;
}
}  // namespace forge
#endif
