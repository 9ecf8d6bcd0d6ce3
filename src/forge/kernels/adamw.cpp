#include "forge/kernels/adamw.h"

#include <algorithm>
#include <cmath>

namespace forge::kernels {

namespace {

struct AdamScalars {
  float decay_factor;  // 1 - lr * wd (applied to decay tensors only)
  float one_minus_beta1, beta2, one_minus_beta2;
  float step_size, bc2_sqrt, eps;
};

AdamScalars adam_scalars(const OptimizerStep& hp) {
  const double bc1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bc2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  return AdamScalars{static_cast<float>(1.0 - hp.lr * hp.weight_decay),
                     static_cast<float>(1.0 - hp.beta1),
                     static_cast<float>(hp.beta2),
                     static_cast<float>(1.0 - hp.beta2),
                     static_cast<float>(hp.lr / bc1),
                     static_cast<float>(std::sqrt(bc2)),
                     static_cast<float>(hp.eps)};
}

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

}  // namespace

namespace scalar {

double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) {
  double sq = 0.0;
  for (int t = 0; t < count; ++t)
    for (size_t i = 0; i < params[t].numel; ++i)
      sq += static_cast<double>(params[t].grad[i]) * params[t].grad[i];
  const double norm = std::sqrt(sq);
  const float coef = clip_coefficient(norm, hp.max_grad_norm);
  const AdamScalars s = adam_scalars(hp);
  for (int t = 0; t < count; ++t) {
    ParamRef& p = params[t];
    for (size_t i = 0; i < p.numel; ++i) {
      if (hp.max_grad_norm > 0.0) p.grad[i] *= coef;
      const float g = p.grad[i];
      if (p.decay) p.param[i] *= s.decay_factor;
      p.exp_avg[i] += s.one_minus_beta1 * (g - p.exp_avg[i]);
      p.exp_avg_sq[i] = p.exp_avg_sq[i] * s.beta2 + s.one_minus_beta2 * g * g;
      const float denom = std::sqrt(p.exp_avg_sq[i]) / s.bc2_sqrt + s.eps;
      p.param[i] += -s.step_size * (p.exp_avg[i] / denom);
    }
  }
  return norm;
}

}  // namespace scalar

namespace cpu {

namespace {

// Every tensor is cut into at most kSegments pieces whose partial sums are added in a fixed
// order, so the norm is the same bits whatever the thread count.
constexpr int kSegments = 64;
constexpr size_t kMinSegment = 16384;

double squared_norm(const float* g, size_t n) {
  const size_t seg = std::max(kMinSegment, (n + kSegments - 1) / kSegments);
  const int segments = static_cast<int>((n + seg - 1) / seg);
  double partial[kSegments] = {};
#pragma omp parallel for schedule(static) if (segments > 1)
  for (int s = 0; s < segments; ++s) {
    const size_t i0 = s * seg, i1 = std::min(n, i0 + seg);
    constexpr int kL = 8;
    double acc[kL] = {};
    size_t i = i0;
    for (; i + kL <= i1; i += kL)
      for (int k = 0; k < kL; ++k) acc[k] += static_cast<double>(g[i + k]) * g[i + k];
    double tail = 0.0;
    for (; i < i1; ++i) tail += static_cast<double>(g[i]) * g[i];
    for (int k = 0; k < kL; ++k) tail += acc[k];
    partial[s] = tail;
  }
  double total = 0.0;
  for (int s = 0; s < segments; ++s) total += partial[s];
  return total;
}

void update(const ParamRef& p, float coef, const AdamScalars& s) {
  const float decay = p.decay ? s.decay_factor : 1.0f;
  const size_t n = p.numel;
  constexpr size_t kChunk = 16384;
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  float* __restrict param = p.param;
  float* __restrict m = p.exp_avg;
  float* __restrict v = p.exp_avg_sq;
  const float* __restrict grad = p.grad;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; ++c) {
    const size_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    for (size_t i = i0; i < i1; ++i) {
      const float g = grad[i] * coef;
      const float mi = m[i] + s.one_minus_beta1 * (g - m[i]);
      const float vi = v[i] * s.beta2 + s.one_minus_beta2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const float denom = __builtin_sqrtf(vi) / s.bc2_sqrt + s.eps;
      param[i] = param[i] * decay - s.step_size * (mi / denom);
    }
  }
}

}  // namespace

double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp) {
  double sq = 0.0;
  for (int t = 0; t < count; ++t) sq += squared_norm(params[t].grad, params[t].numel);
  const double norm = std::sqrt(sq);
  const float coef = clip_coefficient(norm, hp.max_grad_norm);
  const AdamScalars s = adam_scalars(hp);
  for (int t = 0; t < count; ++t) update(params[t], coef, s);
  return norm;
}

}  // namespace cpu

}  // namespace forge::kernels
