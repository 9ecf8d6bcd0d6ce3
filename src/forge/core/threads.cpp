#include "forge/core/threads.h"

#include <dlfcn.h>
#include <omp.h>

#include <initializer_list>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "forge/core/env.h"

namespace forge {

namespace {
// The system libblas.so.3 may be OpenBLAS (pthreads or OpenMP build) or another BLAS; look
// the setter up at run time instead of linking against one vendor.
void set_blas_threads(int n) {
  using Setter = void (*)(int);
  for (const char* sym : {"openblas_set_num_threads", "bli_thread_set_num_threads"}) {
    if (auto f = reinterpret_cast<Setter>(dlsym(RTLD_DEFAULT, sym))) {
      f(n);
      return;
    }
  }
}
}  // namespace

int set_thread_count(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  set_blas_threads(n);
  return n;
}

int thread_count() { return omp_get_max_threads(); }

void set_subnormals_flushed(bool flush) {
#if defined(__x86_64__) || defined(__i386__)
  auto apply = [flush] {
    constexpr unsigned kFtzDaz = (1u << 15) | (1u << 6);  // MXCSR's FTZ and DAZ bits
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(flush ? (csr | kFtzDaz) : (csr & ~kFtzDaz));
  };
  apply();
#pragma omp parallel
  apply();
#else
  (void)flush;
#endif
}

bool subnormal_flush_requested() {
  static const bool requested = env_switch("FORGE_FLUSH_SUBNORMALS", true);
  return requested;
}

}  // namespace forge
