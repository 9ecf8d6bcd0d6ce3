// torch-cpu optimizer arithmetic: torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW's
// single-tensor path (PyTorch 1.13.1, fp32 tensors, Python-double hyperparameters).
#pragma once

#include <cstdint>

namespace forge::tcpu {

// clip_grad_norm_(max_norm, norm_type=2): per-tensor torch.norm, the norm of the stacked
// norms, then every gradient *= clamp(max_norm * reciprocal(total + 1e-6), max=1). Returns
// the total norm (fp32). max_norm <= 0: the norm only, no clipping.
float clip_grad_norm(float* const* grads, const int64_t* numel, int count, double max_norm,
                     float* norms_scratch);

// torch/optim/adamw.py _single_tensor_adamw on one tensor; step is 1-based.
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                double lr, double beta1, double beta2, double eps, double weight_decay,
                int64_t step);

// a + b elementwise (the residual and gradient-accumulation adds): exact in any order.
void add(float* out, const float* a, const float* b, int64_t n);

}  // namespace forge::tcpu
