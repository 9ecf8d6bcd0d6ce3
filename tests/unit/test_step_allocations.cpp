// The house rule "the step allocates nothing" (DESIGN.md): memory is planned at start-up.
// This file replaces the test binary's global operator new with one that counts, so that a
// training step (forward, backward, clip + AdamW) of each model family under each numerics
// profile can be checked for C++ heap allocations: strings, vectors, maps. oneDNN allocates a
// few small objects inside every primitive execution (its argument map), which forge's calls
// cannot avoid; those are told apart by where operator new was called from and reported, not
// failed. C allocations (malloc) are not seen here.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "forge/model/model.h"
#include "forge/numerics/numerics.h"
#include "forge/numerics/timed.h"
#include "training_step.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};  // by forge (and the C++ library code it instantiates)
std::atomic<long> g_in_onednn{0};    // called from inside libdnnl

bool called_from_onednn(void* return_address) {
  Dl_info info;
  return dladdr(return_address, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libdnnl") != nullptr;
}
}  // namespace

// The replaceable forms every other form of operator new and delete in libstdc++ ends in
// (arrays, nothrow and sized deletes call these); aligned forms are not used by forge.
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) {
    if (called_from_onednn(__builtin_return_address(0)))
      g_in_onednn.fetch_add(1, std::memory_order_relaxed);
    else
      g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// GCC 12 takes the free() in a replacement delete for a mismatch with new; here new is malloc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

using namespace forge;

ModelConfig tiny_config(const std::string& family) {
  ModelConfig m;
  m.family = family;
  m.vocab_size = 100;  // padded to 128 rows: the padded-vocabulary path runs too
  m.padded_vocab_size = 128;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 64;
  m.block_size = 32;
  if (family == "llama") {
    m.n_kv_head = 2;
    m.ffn_hidden = 160;
  }
  return m;
}

struct Counts {
  long forge = 0, onednn = 0;
};

// Allocations during one step of `family` under `profile`, after two warm-up steps (a
// library may set itself up on first use: oneDNN builds its primitives then). `timed` wraps
// the profile in the TimedNumerics of `forge bench --breakdown`, reset before the counted
// step as the bench does after its warm-up.
Counts allocations_in_a_step(const std::string& family, const std::string& profile,
                             bool timed = false) {
  // T below block_size: the unused positions' path runs too. 86 x 24 = 2064 rows: from 2048
  // rows on, the linear layers' forward reorders its weight first in fp32 as in bf16
  // (cpu/onednn_matmul.h).
  forge_test::TrainingStep run(tiny_config(family), profile, 86, 24, 5, timed);
  TimedNumerics* timer = run.timer;
  Counts during;
  for (int step = 1; step <= 3; ++step) {
    if (timer && step == 3) timer->reset();
    const long forge0 = g_allocations.load(), onednn0 = g_in_onednn.load();
    g_counting = step == 3;
    run.forward_backward();
    run.update(step);
    g_counting = false;
    during = {g_allocations.load() - forge0, g_in_onednn.load() - onednn0};
  }
  if (timer) {
    EXPECT_GT(timer->seconds().size(), 5u) << "the timer saw the step's ops";
  }
  return during;
}

TEST(StepAllocations, TheCounterSeesAllocations) {
  // The replacement is in force: without it the test below would pass vacuously.
  const long before = g_allocations.load();
  g_counting = true;
  auto s = std::make_unique<std::string>(100, 'x');
  std::vector<int> v(1000);
  g_counting = false;
  EXPECT_EQ(g_allocations.load() - before, 3);
}

TEST(StepAllocations, ATrainingStepAllocatesNothing) {
  for (const std::string family : {"gpt2", "llama"})
    for (const std::string& profile : numerics_profiles()) {
      SCOPED_TRACE(family + " under " + profile);
      const Counts n = allocations_in_a_step(family, profile);
      EXPECT_EQ(n.forge, 0) << "heap allocations in one step: memory belongs in the start-up plan";
      std::printf("%s under %s: %ld allocations by forge, %ld inside oneDNN's executions\n",
                  family.c_str(), profile.c_str(), n.forge, n.onednn);
    }
}

TEST(StepAllocations, ATimedStepAllocatesNothing) {
  // forge bench --breakdown times every op of the step; the timing must not allocate either.
  for (const std::string family : {"gpt2", "llama"}) {
    SCOPED_TRACE(family + " under fast, timed");
    EXPECT_EQ(allocations_in_a_step(family, "fast", true).forge, 0);
  }
}

}  // namespace
