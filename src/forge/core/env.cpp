#include "forge/core/env.h"

#include "forge/core/float_buffer.h"
#include "forge/core/threads.h"

namespace forge {

void read_environment_switches() {
  huge_pages_requested();
  subnormal_flush_requested();
}

}  // namespace forge
