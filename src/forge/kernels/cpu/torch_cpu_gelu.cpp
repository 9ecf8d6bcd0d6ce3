// torch-cpu tanh-GELU, ported from PyTorch 1.13.1 aten/src/ATen/native/cpu/Activation.cpp
// GeluKernelImpl / GeluBackwardKernelImpl (GeluType::Tanh) run through cpu_kernel_vec: the
// vector lambda (Sleef_tanhf8_u10) on pairs of vectors from each chunk's start, the scalar
// lambda (glibc tanhf) on the rest of the chunk. Chunks come from the grain GeluKernelImpl
// picks (numel / threads above 16384 elements); the backward keeps the default grain.
// No automatic contraction: every FMA in this file is written out (see torch_cpu_vec.h).
#pragma GCC optimize("fp-contract=off")
#include "forge/kernels/cpu/torch_cpu_gelu.h"

#include <cmath>

#include "forge/kernels/cpu/torch_cpu_vec.h"

namespace forge::tcpu {
namespace {

constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
constexpr float kKappa = 0.044715f;
constexpr float kThreeKappa = 3.0f * kKappa;  // scalar_t(3) * kKappa, folded by the compiler

}  // namespace

void gelu_forward(float* out, const float* x, size_t n_) {
  const int64_t n = static_cast<int64_t>(n_);
  int64_t grain = kGrainSize;
  if (n > 16384) grain = n / torch_threads();
  const V beta = vset1(kBeta), kappa = vset1(kKappa), one = vset1(1.0f), half = vset1(0.5f);
  elementwise(
      n, grain,
      [&](int64_t i) {
        const V xv = vload(x + i);
        const V cube = vmul(vmul(xv, xv), xv);
        const V inner = vmul(beta, vfma(kappa, cube, xv));
        vstore(out + i, vmul(vmul(half, xv), vadd(one, vtanh(inner))));
      },
      [&](int64_t i) {
        const float xs = x[i];
        const float cube = xs * xs * xs;
        const float inner = kBeta * std::fma(kKappa, cube, xs);
        out[i] = 0.5f * xs * (1.0f + std::tanh(inner));
      });
}

void gelu_backward(float* dinp, const float* x, const float* dout, size_t n_) {
  const int64_t n = static_cast<int64_t>(n_);
  const V beta = vset1(kBeta), kappa = vset1(kKappa), one = vset1(1.0f), half = vset1(0.5f),
          three_kappa = vset1(kThreeKappa);
  elementwise(
      n, kGrainSize,
      [&](int64_t i) {
        const V xv = vload(x + i), dy = vload(dout + i);
        const V x_sq = vmul(xv, xv);
        const V cube = vmul(x_sq, xv);
        const V inner = vmul(beta, vfma(kappa, cube, xv));
        const V th = vtanh(inner);
        const V left = vmul(half, xv);
        const V right = vadd(one, th);
        const V tanh_d = vfnma(th, th, one);
        const V inner_d = vmul(beta, vfma(three_kappa, x_sq, one));
        const V right_d = vmul(vmul(left, tanh_d), inner_d);
        // left_derivative (0.5 * right) is the product fused into the final sum
        vstore(dinp + i, vmul(dy, vfma(half, right, right_d)));
      },
      [&](int64_t i) {
        const float xs = x[i], dy = dout[i];
        const float x_sq = xs * xs;
        const float cube = x_sq * xs;
        const float inner = kBeta * std::fma(kKappa, cube, xs);
        const float th = std::tanh(inner);
        const float left = 0.5f * xs;
        const float right = 1.0f + th;
        const float tanh_d = std::fma(-th, th, 1.0f);
        const float inner_d = kBeta * std::fma(kThreeKappa, x_sq, 1.0f);
        const float right_d = left * tanh_d * inner_d;
        dinp[i] = dy * std::fma(0.5f, right, right_d);
      });
}

}  // namespace forge::tcpu
