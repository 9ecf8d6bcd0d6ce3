// Whole-model gradient checks shared by the GPT-2 and Llama tests: the engine's fp32
// analytic gradients against central finite differences of an independent float64 model's
// loss, tensor by tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "forge/core/rng.h"
#include "forge/model/model.h"

namespace forge_test {

// Adds scale * N(0, 1) to every parameter: at their initial values biases (0) and norm
// weights (1) sit at special points where a wrong gradient path can still look right.
inline void perturb_params(forge::Model& model, uint64_t seed, double scale) {
  forge::Rng rng(seed);
  for (const auto& p : model.layout().tensors())
    for (size_t i = 0; i < p.numel; ++i)
      model.params()[p.offset + i] += static_cast<float>(scale * rng.normal());
}

inline std::vector<double> params_as_double(forge::Model& model) {
  const float* p = model.params();
  return std::vector<double>(p, p + model.layout().total_floats());
}

// Mean cross-entropy in float64 over N rows of logits [N, Vp] whose first V columns are the
// vocabulary (the padded columns are no token, so they take no part in the softmax).
inline double mean_cross_entropy(const std::vector<double>& logits, int N, int V, int Vp,
                                 const std::vector<int32_t>& targets) {
  double total = 0;
  for (int n = 0; n < N; ++n) {
    const double* row = logits.data() + static_cast<size_t>(n) * Vp;
    double mx = -1e300, z = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, row[v]);
    for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
    total += std::log(z) + mx - row[targets[n]];
  }
  return total / N;
}

struct GradcheckOptions {
  double h = 1e-6;    // central-difference step in float64
  double tol = 1e-4;  // per-tensor ||analytic - fd|| / ||fd||, fp32 gradients vs float64
  // Whether a tensor may have no gradient at all (it must then be exactly zero in the
  // engine too); otherwise such a tensor fails: comparing against nothing proves nothing.
  bool allow_zero_gradient = false;
};

// Checks grads (the engine's, in the flat layout) against central differences of loss(p)
// for every tensor of the layout; p holds the parameters in float64 and is restored.
// Returns the number of tensors compared against a non-zero gradient.
template <typename Loss>
int expect_gradients_match_finite_differences(const forge::ParamLayout& layout,
                                              const std::vector<float>& grads,
                                              std::vector<double>& p, const Loss& loss,
                                              const GradcheckOptions& opt = {}) {
  int checked = 0;
  for (const auto& t : layout.tensors()) {
    double num = 0, den = 0, worst = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      const size_t k = t.offset + i;
      const double saved = p[k];
      p[k] = saved + opt.h;
      const double up = loss(p);
      p[k] = saved - opt.h;
      const double down = loss(p);
      p[k] = saved;
      const double fd = (up - down) / (2 * opt.h);
      num += (grads[k] - fd) * (grads[k] - fd);
      den += fd * fd;
      worst = std::max(worst, std::abs(grads[k] - fd));
    }
    if (den == 0) {
      if (opt.allow_zero_gradient)
        EXPECT_EQ(num, 0.0) << t.name;
      else
        ADD_FAILURE() << t.name << ": no gradient at all; the check would prove nothing";
      continue;
    }
    EXPECT_LT(std::sqrt(num / den), opt.tol) << t.name << " worst abs error " << worst;
    ++checked;
  }
  return checked;
}

struct WholeModelCheck {
  std::vector<float> grads;  // the engine's gradients, flat layout
  int checked = 0;           // tensors compared against a non-zero gradient
};

// The whole-model check: the engine's fp32 forward loss against ref_loss (an independent
// float64 model of the same parameters) and its backward's gradients, tensor by tensor,
// against central differences of ref_loss.
template <typename RefLoss>
WholeModelCheck check_whole_model(forge::Model& model, const std::vector<int32_t>& tokens,
                                  const std::vector<int32_t>& targets, int B, int T,
                                  const RefLoss& ref_loss, const GradcheckOptions& opt = {}) {
  WholeModelCheck r;
  const float loss = model.forward(tokens.data(), targets.data(), B, T);
  // Dirty gradients: backward must overwrite every one of them.
  r.grads.assign(model.layout().total_floats(), 123.0f);
  model.backward(1.0f, r.grads.data());
  std::vector<double> p = params_as_double(model);
  const double want = ref_loss(p);
  EXPECT_NEAR(loss, want, 1e-5 * std::abs(want));
  r.checked = expect_gradients_match_finite_differences(model.layout(), r.grads, p, ref_loss, opt);
  return r;
}

}  // namespace forge_test
