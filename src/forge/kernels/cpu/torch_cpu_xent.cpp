// torch-cpu cross-entropy, ported from PyTorch 1.13.1:
//  - log_softmax(dim=1) on the contiguous [N, V] copy of logits[..., :V]:
//    cpu/SoftMaxKernel.cpp _vec_log_softmax_lastdim (rows in chunks; Sleef exp and log);
//  - nll_loss mean: LossNLL.cpp nll_loss_out_frame (an 8-level cascade of -logp[target],
//    divided by the float count of rows);
//  - backward: nll_loss_backward_out_frame writes -(dloss / N) at each target, then
//    _vec_host_softmax_backward_lastdim<log_softmax>: grad - exp(out) * sum(grad).
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_xent.h"

#include <cstring>
#include <numeric>

#include "forge/kernels/cpu/torch_cpu_vec.h"

namespace forge::tcpu {
namespace {

int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t v = x - 1, fls = 0;
  while (v >>= 1) ++fls;
  return fls + 1;
}

void log_softmax_lastdim(float* out, const float* in, int64_t in_stride, int64_t rows,
                         int64_t dim) {
  constexpr int64_t kChunk = (128 / sizeof(float)) * kVec;
  int64_t grain = kGrainSize / (16 * dim * kChunk);
  if (grain < kChunk) grain = kChunk;
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end, int) {
    float tmp_sum[kChunk];
    float max_arr[kChunk];
    for (int64_t ii = begin; ii < end; ii += kChunk) {
      const int64_t loop_end = ii + kChunk > end ? end - ii : kChunk;
      for (int64_t j = 0; j < loop_end; ++j)
        max_arr[j] = reduce_all(MaxOp{}, in + (ii + j) * in_stride, dim);
      for (int64_t j = 0; j < loop_end; ++j) {
        const V mv = vset1(max_arr[j]);
        auto f = [&](V x) { return vexp(vsub(x, mv)); };
        tmp_sum[j] = map_reduce_all(
            f, [&](V acc, V x) { return vadd(acc, f(x)); }, AddOp{}, in + (ii + j) * in_stride,
            dim);
      }
      map([](V x) { return vlog(x); }, tmp_sum, tmp_sum, loop_end);
      for (int64_t j = 0; j < loop_end; ++j) {
        const V mv = vset1(max_arr[j]), sv = vset1(tmp_sum[j]);
        map([&](V x) { return vsub(vsub(x, mv), sv); }, out + (ii + j) * dim,
            in + (ii + j) * in_stride, dim);
      }
    }
  });
}

}  // namespace

float cross_entropy_forward(float* logp, const float* logits, const int32_t* targets, int64_t N,
                            int64_t nv, int64_t nvp) {
  log_softmax_lastdim(logp, logits, nvp, N, nv);
  constexpr int kLevels = 8;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(N) / kLevels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  float partial[kLevels] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t b = 0; b < N; ++b) {
    partial[0] -= logp[b * nv + targets[b]];
    for (int64_t j = 0; j + 1 < kLevels; ++j) {
      const int64_t mask = level_mask << (j * level_power);
      if ((b & mask) != 0) break;
      partial[j + 1] += partial[j];
      partial[j] = 0;
    }
  }
  const float total_weight = static_cast<float>(N);
  float out = std::accumulate(partial, partial + kLevels, 0.0f);
  return out / total_weight;
}

void cross_entropy_backward(float* dlogits, const float* logp, const int32_t* targets, int64_t N,
                            int64_t nv, int64_t nvp, float dloss) {
  const float g = -(dloss / static_cast<float>(N));
  int64_t grain = kGrainSize / (16 * nv);
  if (grain < 1) grain = 1;
  parallel_for(0, N, grain, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      // The nll grad row is all +0 but g at the target, so its vector-tree sum is g.
      const float sum = g;
      const V sv = vset1(sum);
      const int64_t t = targets[i];
      float* drow = dlogits + i * nvp;
      const float* orow = logp + i * nv;
      // x - exp(y) * sum, the product fused into the subtraction
      int64_t d = 0;
      auto body = [&](int64_t at, int64_t count) {
        alignas(32) float gx[kVec] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (t >= at && t < at + count) gx[t - at] = g;
        const V y = count == kVec ? vload(orow + at) : vload(orow + at, count);
        const V r = vfnma(vexp(y), sv, _mm256_load_ps(gx));
        if (count == kVec)
          vstore(drow + at, r);
        else
          vstore(drow + at, r, count);
      };
      for (; d < nv - (nv % kVec); d += kVec) body(d, kVec);
      if (nv - d > 0) body(d, nv - d);
      for (int64_t c = nv; c < nvp; ++c) drow[c] = 0.0f;
    }
  });
}

}  // namespace forge::tcpu
