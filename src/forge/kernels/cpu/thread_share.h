// How a kernel that gives each thread of the OpenMP team one contiguous piece of the work
// cuts it (forge's packed GEMM, bf16's rounding and bias-gradient passes). The torch-cpu
// kernels cut as at::parallel_for does instead (torch_cpu_vec.h): their sums must match it.
#pragma once

#include <algorithm>
#include <cstddef>

namespace forge::kernels::cpu {

struct Range {
  size_t begin, end;
};

// Thread `id` of `threads`' share [begin, end) of n items, cut at multiples of unit (the last
// unit may be partial). Shares differ by at most one unit; a thread past the work gets an
// empty one.
inline Range thread_share(size_t n, size_t unit, size_t id, size_t threads) {
  const size_t units = (n + unit - 1) / unit, per = units / threads, extra = units % threads;
  const size_t u0 = id * per + std::min(id, extra), u1 = u0 + per + (id < extra ? 1 : 0);
  return {std::min(n, u0 * unit), std::min(n, u1 * unit)};
}

}  // namespace forge::kernels::cpu
