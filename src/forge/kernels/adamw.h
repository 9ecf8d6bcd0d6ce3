// Global-norm gradient clipping followed by AdamW, with torch's formulas
// (torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW, single-tensor path):
//   norm = || (||g_1||, ..., ||g_n||) ||                      (fp32, torch's summation order)
//   coef = min(1, max_norm / (norm + 1e-6))                  (fp32; only when max_norm > 0)
//   g    = coef * grad
//   param *= 1 - lr * weight_decay                           (decoupled; decay tensors only)
//   m  = m + (1 - beta1) (g - m)                             (torch's lerp)
//   v  = beta2 v + (1 - beta2) g^2
//   bc1 = 1 - beta1^step,  bc2 = 1 - beta2^step
//   param -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// Returns the norm before clipping.
#pragma once

#include "forge/numerics/numerics.h"

namespace forge::kernels {

// clip_grad_norm_'s total norm, bit for bit as PyTorch computes it in fp32 (per-tensor
// torch.linalg.vector_norm, then the norm of those norms).
float global_grad_norm(const ParamRef* params, int count);

namespace scalar {
// Clips the gradients in place, as torch does, then updates.
double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp);
}  // namespace scalar

namespace cpu {
// One reading pass for the norm, then one fused pass per tensor that applies the clip
// coefficient on the fly and updates param, m and v; gradients are left untouched.
double optimizer_step(ParamRef* params, int count, const OptimizerStep& hp);
}  // namespace cpu

}  // namespace forge::kernels
