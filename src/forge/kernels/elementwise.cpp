#include "forge/kernels/elementwise.h"

#include <algorithm>

namespace forge::kernels {

namespace scalar {

template <typename Real>
void add(Real* out, const Real* a, const Real* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename Real>
void add_inplace(Real* acc, const Real* x, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

template void add<float>(float*, const float*, const float*, size_t);
template void add<double>(double*, const double*, const double*, size_t);
template void add_inplace<float>(float*, const float*, size_t);
template void add_inplace<double>(double*, const double*, size_t);

}  // namespace scalar

namespace cpu {

namespace {
constexpr size_t kChunk = 32768;
}

void add(float* out, const float* a, const float* b, size_t n) {
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; ++c) {
    const size_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    for (size_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  }
}

void add_inplace(float* acc, const float* x, size_t n) {
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; ++c) {
    const size_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    for (size_t i = i0; i < i1; ++i) acc[i] += x[i];
  }
}

}  // namespace cpu

}  // namespace forge::kernels
