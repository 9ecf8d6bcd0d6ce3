// Helpers shared by the unit tests: seeded random data, float64 comparisons, central finite
// differences, runs over every compiled instruction set, temporary folders and the message
// of an expected forge::Error. One copy, so a fix to a comparison reaches every test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "forge/core/error.h"
#include "forge/kernels/cpu/dispatch.h"

namespace forge_test {

using Floats = std::vector<float>;
using Doubles = std::vector<double>;

inline Floats random_floats(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Floats v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Doubles widen(const Floats& f) { return Doubles(f.begin(), f.end()); }

// ||a - b|| / ||b||, with b the float64 truth. An all-zero truth fails the test: any
// result would be "close" to it relative to nothing, so the comparison would prove nothing.
template <typename A>
double rel_l2(const A& a, const Doubles& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::isfinite(static_cast<double>(a[i]))) << "element " << i;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  EXPECT_GT(den, 0.0) << "the reference is all zeros: the test would prove nothing";
  return std::sqrt(num / std::max(den, 1e-300));
}

// Gradient of L(x) = sum_i w_i f(x)_i by central differences in double.
inline Doubles numeric_gradient(const std::function<Doubles(const Doubles&)>& f, Doubles x,
                                const Doubles& w, double h = 1e-6) {
  Doubles g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const Doubles up = f(x);
    x[i] = saved - h;
    const Doubles down = f(x);
    x[i] = saved;
    double diff = 0.0;
    for (size_t j = 0; j < w.size(); ++j) diff += w[j] * (up[j] - down[j]);
    g[i] = diff / (2 * h);
  }
  return g;
}

// Runs `body` once per instruction set this CPU supports (AVX-512, AVX2, generic), so
// every compiled variant of the SIMD kernels is checked, not only the one dispatch picks.
inline void for_each_isa(const std::function<void()>& body) {
  namespace cpu = forge::kernels::cpu;
  using cpu::Isa;
  const Isa saved = cpu::active_isa();
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kGeneric}) {
    if (static_cast<int>(isa) > static_cast<int>(cpu::detected_isa())) continue;
    SCOPED_TRACE(testing::Message() << "isa=" << cpu::isa_name(isa));
    cpu::set_active_isa(isa);
    body();
  }
  cpu::set_active_isa(saved);
}

// A fresh directory per test, removed afterwards (made writable first: some tests take the
// write permission away to provoke errors).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "forge_test_") {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs f, expects a forge::Error, and returns its message.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const forge::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected forge::Error";
  return "";
}

}  // namespace forge_test
