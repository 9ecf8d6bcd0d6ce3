// torch-cpu reductions, ported from PyTorch 1.13.1:
//  - sum over dim 0: aten/src/ATen/native/cpu/SumKernel.cpp cascade_sum (the
//    vectorized_outer_sum / scalar_outer_sum branches a [rows, cols] -> [cols] reduction
//    takes), split across threads as native/TensorIteratorReduce.cpp parallel_dim_reduction
//    does (column ranges rounded to 32 floats), because a column's summation tree depends on
//    which group of columns it was summed with;
//  - torch.norm(t, 2): cpu/ReduceOpsKernel.cpp norm_kernel_tensor_iterator_impl, the p == 2
//    float fast path (one vector accumulator of FMAs, a sequential fold of its lanes, a
//    scalar tail).
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_reduce.h"

#include <array>
#include <cmath>

#include "forge/kernels/cpu/torch_cpu_vec.h"

namespace forge::tcpu {
namespace {

inline V acc_zero(V*) { return _mm256_setzero_ps(); }
inline float acc_zero(float*) { return 0.0f; }
inline V acc_add(V a, V b) { return vadd(a, b); }
inline float acc_add(float a, float b) { return a + b; }
inline V acc_load(V*, const float* p) { return vload(p); }
inline float acc_load(float*, const float* p) { return *p; }

// at::native::utils::CeilLog2
int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t v = x - 1, fls = 0;
  while (v >>= 1) ++fls;  // floor(log2(x - 1))
  return fls + 1;
}

// multi_row_sum<acc_t, nrows, LoadPolicy>: `size` rows of nrows accumulators, summed in a
// four-level cascade whose step is 2^max(4, ceil_log2(size)/4) rows. Strides in floats.
template <typename Acc, int NR>
std::array<Acc, NR> multi_row_sum(const float* in, int64_t row_stride, int64_t col_stride,
                                  int64_t size) {
  constexpr int kLevels = 4;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(size) / kLevels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  Acc acc[kLevels][NR];
  for (auto& lv : acc)
    for (auto& a : lv) a = acc_zero(static_cast<Acc*>(nullptr));

  int64_t i = 0;
  for (; i + level_step <= size;) {
    for (int64_t j = 0; j < level_step; ++j, ++i) {
      const float* base = in + i * row_stride;
      for (int k = 0; k < NR; ++k)
        acc[0][k] = acc_add(acc[0][k], acc_load(static_cast<Acc*>(nullptr), base + k * col_stride));
    }
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < NR; ++k) {
        acc[j][k] = acc_add(acc[j][k], acc[j - 1][k]);
        acc[j - 1][k] = acc_zero(static_cast<Acc*>(nullptr));
      }
      const int64_t mask = level_mask << (j * level_power);
      if ((i & mask) != 0) break;
    }
  }
  for (; i < size; ++i) {
    const float* base = in + i * row_stride;
    for (int k = 0; k < NR; ++k)
      acc[0][k] = acc_add(acc[0][k], acc_load(static_cast<Acc*>(nullptr), base + k * col_stride));
  }
  for (int j = 1; j < kLevels; ++j)
    for (int k = 0; k < NR; ++k) acc[0][k] = acc_add(acc[0][k], acc[j][k]);
  std::array<Acc, NR> ret;
  for (int k = 0; k < NR; ++k) ret[k] = acc[0][k];
  return ret;
}

// row_sum<acc_t, LoadPolicy>: four interleaved partial sums, the tail into the first, then
// the partials folded left to right.
template <typename Acc>
Acc row_sum(const float* in, int64_t stride, int64_t size) {
  constexpr int kIlp = 4;
  const int64_t size_ilp = size / kIlp;
  auto partial = multi_row_sum<Acc, kIlp>(in, stride * kIlp, stride, size_ilp);
  for (int64_t i = size_ilp * kIlp; i < size; ++i)
    partial[0] = acc_add(partial[0], acc_load(static_cast<Acc*>(nullptr), in + i * stride));
  for (int k = 1; k < kIlp; ++k) partial[0] = acc_add(partial[0], partial[k]);
  return partial[0];
}

// CastStoreAccumulate: the output was zero-filled, then `*ptr += value`.
inline void store_acc(float* out, float v) { *out += v; }
inline void store_acc(float* out, V v) {
  alignas(32) float t[kVec];
  _mm256_store_ps(t, v);
  for (int k = 0; k < kVec; ++k) out[k] += t[k];
}

// The cascade_sum loop body for an input [rows, cols] (row stride `ld`) reduced over rows.
void outer_sum_block(float* out, const float* in, int64_t ld, int64_t rows, int64_t cols) {
  if (cols >= kVec) {
    // vectorized_outer_sum
    int64_t j = 0;
    for (; j + 4 * kVec <= cols; j += 4 * kVec) {
      auto sums = multi_row_sum<V, 4>(in + j, ld, kVec, rows);
      for (int i = 0; i < 4; ++i) store_acc(out + j + i * kVec, sums[i]);
    }
    for (; j + kVec <= cols; j += kVec) store_acc(out + j, row_sum<V>(in + j, ld, rows));
    for (; j < cols; ++j) store_acc(out + j, row_sum<float>(in + j, ld, rows));
  } else {
    // scalar_outer_sum
    int64_t j = 0;
    for (; j + 3 < cols; j += 4) {
      auto sums = multi_row_sum<float, 4>(in + j, ld, 1, rows);
      for (int i = 0; i < 4; ++i) store_acc(out + j + i, sums[i]);
    }
    for (; j < cols; ++j) store_acc(out + j, row_sum<float>(in + j, ld, rows));
  }
}

}  // namespace

void sum_dim0(float* out, const float* in, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) out[c] = 0.0f;  // iter.output_base().fill_(0)
  if (rows == 1) {
    // A reduced dimension of size 1 is squeezed out: the sum is an elementwise 0 + x.
    for (int64_t c = 0; c < cols; ++c) out[c] += in[c];
    return;
  }
  const int64_t numel = rows * cols;
  if (numel < kGrainSize || torch_threads() == 1) {
    outer_sum_block(out, in, cols, rows, cols);
    return;
  }
  // parallel_dim_reduction: split the columns; round each range to 128 bytes (32 floats),
  // except the end of the last one.
  parallel_for(0, cols, 1, [&](int64_t b, int64_t e, int) {
    b -= b % 32;
    if (e != cols) e -= e % 32;
    if (b == e) return;
    outer_sum_block(out + b, in + b, cols, rows, e - b);
  });
}

void sum_lastdim(float* out, const float* in, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * cols;
    float total;
    if (cols >= kVec) {
      // vectorized_inner_sum: the row as cols/8 vectors through row_sum, then a scalar
      // accumulator that takes the leftover elements first and the eight lanes after.
      const int64_t nvec = cols / kVec;
      const V vacc = row_sum<V>(row, kVec, nvec);
      total = 0.0f;
      for (int64_t c = nvec * kVec; c < cols; ++c) total += row[c];
      alignas(32) float lanes[kVec];
      _mm256_store_ps(lanes, vacc);
      for (int k = 0; k < kVec; ++k) total += lanes[k];
    } else {
      total = row_sum<float>(row, 1, cols);  // scalar_inner_sum
    }
    out[r] = 0.0f;  // the output was zero-filled; CastStoreAccumulate adds into it
    store_acc(out + r, total);
  }
}

float norm2(const float* in, int64_t n) {
  V acc = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d < n - (n % kVec); d += kVec) {
    const V x = vload(in + d);
    acc = vfma(x, x, acc);  // norm_two_reduce_step: acc_vec += data_vec * data_vec
  }
  alignas(32) float buf[kVec];
  _mm256_store_ps(buf, acc);
  for (int j = 1; j < kVec; ++j) buf[0] = buf[0] + buf[j];
  // The scalar tail as GCC 12 compiled it: a block of four squares computed as one SSE
  // multiply and then added in order (each product rounded), the rest with scalar FMAs
  // (measured against torch for every tail length 1..7).
  if (n - d >= 4) {
    for (int k = 0; k < 4; ++k, ++d) {
      const float sq = in[d] * in[d];
      buf[0] = buf[0] + sq;
    }
  }
  for (; d < n; ++d) buf[0] = std::fma(in[d], in[d], buf[0]);
  return std::sqrt(buf[0]);
}

}  // namespace forge::tcpu
