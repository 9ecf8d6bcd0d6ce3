// Shared by the torch-cpu bit-for-bit tests (test_torch_cpu.cpp, test_torch_cpu_llama.cpp):
// fixtures that a script under tests/tools writes by running Debian's PyTorch 1.13.1
// (/usr/bin/python3, ATEN_CPU_CAPABILITY=avx2, OpenMP and OpenBLAS pinned to n threads) on
// awkward shapes, and a bit-equality assertion that reports ULP distances. A missing torch
// makes the fixture step fail, and with it every test that needs the fixtures.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "forge/kernels/cpu/torch_cpu_linear.h"

namespace forge_test {

inline std::string source_dir() {
  if (const char* s = std::getenv("FORGE_SOURCE_DIR")) return s;
  return FORGE_SOURCE_DIR;
}

// One fixture directory per (script, thread count), generated once per test process and
// removed at exit.
struct TorchFixtures {
  std::filesystem::path dir;
  nlohmann::json index;
  std::string error;

  TorchFixtures(const std::string& script, int threads) {
    std::ostringstream name, os;
    name << "forge_" << std::filesystem::path(script).stem().string() << "_" << ::getpid() << "_t"
         << threads;
    dir = std::filesystem::temp_directory_path() / name.str();
    std::filesystem::remove_all(dir);
    // OpenBLAS reads its thread count at load: pin it like OpenMP's (see set_blas_threads).
    os << "ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=" << threads
       << " OPENBLAS_NUM_THREADS=" << threads << " /usr/bin/python3 '" << source_dir()
       << "/tests/tools/" << script << "' --out '" << dir.string() << "' --threads " << threads
       << " 2>&1";
    const std::string cmd = os.str();
    if (std::system(cmd.c_str()) != 0) {
      error = "fixture script failed (is Debian's python3-torch 1.13.1 installed?): " + cmd;
      return;
    }
    std::ifstream f(dir / "index.json");
    index = nlohmann::json::parse(f);
  }
  ~TorchFixtures() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  template <typename T>
  std::vector<T> load(const nlohmann::json& c, const std::string& name) const {
    const auto& t = c.at("tensors").at(name);
    std::ifstream f(dir / t.at("file").get<std::string>(), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }
  std::vector<float> f32(const nlohmann::json& c, const std::string& name) const {
    return load<float>(c, name);
  }
  std::vector<int32_t> i32(const nlohmann::json& c, const std::string& name) const {
    return load<int32_t>(c, name);
  }
};

inline TorchFixtures& torch_fixtures(const std::string& script, int threads) {
  static std::map<std::pair<std::string, int>, std::unique_ptr<TorchFixtures>> cache;
  auto& p = cache[{script, threads}];
  if (!p) p = std::make_unique<TorchFixtures>(script, threads);
  return *p;
}

// Floats mapped onto integers in value order, so that a difference counts ULPs.
inline int64_t ordered(float x) {
  int32_t i;
  std::memcpy(&i, &x, 4);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
}

// Bit equality; on failure, the count of differing elements, the max ULP distance and the
// first difference.
inline ::testing::AssertionResult bits_equal(const std::vector<float>& got,
                                             const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0)
    return ::testing::AssertionSuccess();
  size_t ndiff = 0, first = got.size();
  int64_t max_ulp = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) == 0) continue;
    if (first == got.size()) first = i;
    ++ndiff;
    const int64_t d = ordered(got[i]) - ordered(want[i]);
    max_ulp = std::max<int64_t>(max_ulp, d < 0 ? -d : d);
  }
  std::ostringstream os;
  os.precision(9);
  os << ndiff << "/" << got.size() << " elements differ, max ULP " << max_ulp << ", first at "
     << first << ": got " << got[first] << " want " << want[first];
  return ::testing::AssertionFailure() << os.str();
}

// A test over one fixture script, run once per thread count (the test parameter), with
// OpenMP and OpenBLAS pinned to it. Script: a type with `static constexpr const char* name`.
template <typename Script>
class TorchCpuFixtureTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    threads_ = GetParam();
    fx_ = &torch_fixtures(Script::name, threads_);
    ASSERT_TRUE(fx_->error.empty()) << fx_->error;
    ASSERT_EQ(fx_->index.at("torch").template get<std::string>().rfind("1.13", 0), 0u);
    saved_threads_ = omp_get_max_threads();
    omp_set_num_threads(threads_);
    forge::tcpu::set_blas_threads(threads_);
  }
  void TearDown() override {
    omp_set_num_threads(saved_threads_);
    forge::tcpu::set_blas_threads(saved_threads_);
  }

  // The script's cases for one op; none is a failure (a fixture script that lost an op).
  std::vector<nlohmann::json> cases(const std::string& op) const {
    std::vector<nlohmann::json> out;
    for (const auto& c : fx_->index.at("cases"))
      if (c.at("op") == op) out.push_back(c);
    EXPECT_FALSE(out.empty()) << "no fixtures for " << op;
    return out;
  }

  int threads_ = 1, saved_threads_ = 1;
  TorchFixtures* fx_ = nullptr;
};

}  // namespace forge_test

// Inside a loop over cases `c`: bit equality, naming the case and the tensor on failure.
#define EXPECT_BITS(got, want, what) \
  EXPECT_TRUE(forge_test::bits_equal(got, want)) << c.at("name").get<std::string>() << " " << what
