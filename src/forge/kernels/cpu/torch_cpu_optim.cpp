// torch-cpu optimizer, ported from PyTorch 1.13.1:
//  - torch/nn/utils/clip_grad.py clip_grad_norm_: torch.norm(g, 2) per gradient
//    (cpu/ReduceOpsKernel.cpp, see torch_cpu_reduce.cpp), torch.norm of their stack,
//    `max_norm / (total + 1e-6)`, which Tensor.__rtruediv__ evaluates as
//    (total + 1e-6).reciprocal() * max_norm, clamp(max=1.0), then g.mul_(coef);
//  - torch/optim/adamw.py _single_tensor_adamw: the in-place ops in their order, every Python
//    double scalar rounded to float where it meets a float tensor, bias corrections in
//    double. Each op is elementwise, so one pass per element computes exactly the sequence
//    of whole-tensor passes. add_(alpha=) (ufunc/add.h: vec::fmadd, and `self + alpha *
//    other` in the scalar lambda) and addcmul_ (`self + value * t1 * t2`) round their last
//    product once into the sum; addcdiv_ divides before its add. The vector/scalar split of
//    cpu_kernel_vec is kept (elementwise()) so that a lane rule differing from the tail's
//    would show up in one place.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_optim.h"

#include <algorithm>
#include <cmath>

#include "forge/kernels/cpu/torch_cpu_reduce.h"
#include "forge/kernels/cpu/torch_cpu_vec.h"

namespace forge::tcpu {

float clip_grad_norm(float* const* grads, const int64_t* numel, int count, double max_norm,
                     float* norms) {
  for (int i = 0; i < count; ++i) norms[i] = norm2(grads[i], numel[i]);
  const float total = norm2(norms, count);
  if (max_norm <= 0) return total;
  float coef = (1.0f / (total + static_cast<float>(1e-6))) * static_cast<float>(max_norm);
  coef = std::min(coef, 1.0f);
  for (int i = 0; i < count; ++i) {
    float* g = grads[i];
    const int64_t n = numel[i];
#pragma omp parallel for schedule(static) if (n > kGrainSize)
    for (int64_t j = 0; j < n; ++j) g[j] = g[j] * coef;
  }
  return total;
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                double lr, double beta1, double beta2, double eps, double weight_decay,
                int64_t step) {
  const double stepd = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(beta1, stepd);
  const double bias_correction2 = 1 - std::pow(beta2, stepd);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);

  const float decay = static_cast<float>(1 - lr * weight_decay);
  const float b1 = static_cast<float>(beta1), one_minus_b1 = static_cast<float>(1 - beta1);
  const float b2 = static_cast<float>(beta2), one_minus_b2 = static_cast<float>(1 - beta2);
  const float bc2s = static_cast<float>(bias_correction2_sqrt);
  const float epsf = static_cast<float>(eps);
  const float neg_step = static_cast<float>(-step_size);
  auto update = [&](int64_t i, bool vector_lane) {
    const float g = grad[i];
    float p = param[i] * decay;                     // param.mul_(1 - lr * wd)
    float m = exp_avg[i] * b1;                      // exp_avg.mul_(beta1)
    m = vector_lane ? std::fma(g, one_minus_b1, m)  //   .add_(grad, alpha=1 - beta1)
                    : std::fma(one_minus_b1, g, m);
    float v = exp_avg_sq[i] * b2;                    // exp_avg_sq.mul_(beta2)
    v = std::fma(one_minus_b2 * g, g, v);            //   .addcmul_(grad, grad, 1 - beta2)
    const float denom = std::sqrt(v) / bc2s + epsf;  // (sqrt / bc2_sqrt).add_(eps)
    p = p + neg_step * m / denom;                    // addcdiv_(m, denom, -step_size)
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  };
  elementwise(
      n, kGrainSize,
      [&](int64_t i) {
        for (int64_t k = 0; k < kVec; ++k) update(i + k, true);
      },
      [&](int64_t i) { update(i, false); });
}

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kGrainSize)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace forge::tcpu
