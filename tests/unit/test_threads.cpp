// Flushing subnormals (core/threads.h): on every thread of the team, on threads started
// later, cleared again on request, and only for the profiles that do not promise bit-for-bit
// equality with PyTorch.
#include <gtest/gtest.h>
#include <omp.h>

#include <thread>
#include <vector>

#include "forge/core/threads.h"
#include "forge/numerics/numerics.h"

namespace forge {
namespace {

// What one thread computes: a product whose exact result is subnormal (FTZ rounds it to
// zero) and a subnormal operand times one (DAZ reads it as zero).
struct Results {
  float subnormal_product = -1.0f, subnormal_operand = -1.0f;
};

Results compute() {
  volatile float tiny = 1e-30f, small = 1e-10f, subnormal = 1e-40f, one = 1.0f;
  return {tiny * small, subnormal * one};
}

// Each thread of a team of `threads`, then a thread started after the setting.
std::vector<Results> on_every_thread(int threads) {
  std::vector<Results> out(static_cast<size_t>(threads) + 1);
#pragma omp parallel num_threads(threads)
  out[static_cast<size_t>(omp_get_thread_num())] = compute();
  std::thread later([&] { out.back() = compute(); });
  later.join();
  return out;
}

TEST(SubnormalFlush, FlushesOnEveryThreadAndClearsAgain) {
  const int threads = std::max(2, omp_get_max_threads());
  omp_set_num_threads(threads);
  set_subnormals_flushed(true);
  for (const Results& r : on_every_thread(threads)) {
    EXPECT_EQ(r.subnormal_product, 0.0f);
    EXPECT_EQ(r.subnormal_operand, 0.0f);
  }
  set_subnormals_flushed(false);
  for (const Results& r : on_every_thread(threads)) {
    EXPECT_GT(r.subnormal_product, 0.0f);
    EXPECT_LT(r.subnormal_product, 1.1754944e-38f);
    EXPECT_EQ(r.subnormal_operand, 1e-40f);
  }
}

TEST(SubnormalFlush, OnlyTheProfilesWithoutBitwiseEqualityFlush) {
  ASSERT_TRUE(subnormal_flush_requested()) << "FORGE_FLUSH_SUBNORMALS=0 in the environment";
  EXPECT_TRUE(make_numerics("fast")->flushes_subnormals());
  EXPECT_TRUE(make_numerics("bf16")->flushes_subnormals());
  EXPECT_FALSE(make_numerics("torch-cpu")->flushes_subnormals());
  EXPECT_NE(make_numerics("fast")->arithmetic().find("subnormals flushed to zero"),
            std::string::npos);
}

}  // namespace
}  // namespace forge
