// The communicator: chunk partition, the single-process implementation, and (launched
// under mpirun by the DistMpi tests themselves) the MPI implementation with 2 and 3 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "forge/dist/communicator.h"

namespace {

using forge::dist::chunk_of;
using forge::dist::Communicator;
using forge::dist::Span;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Rank k's contribution: values of very different magnitudes, so that a sum taken in another
// order than rank 0 first would round differently.
std::vector<float> contribution(int k, size_t n, uint32_t seed = 7) {
  std::mt19937 rng(seed * 1000 + k);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = u(rng) * std::ldexp(1.0f, (k * 7 + static_cast<int>(i)) % 24 - 12);
  return v;
}

// The reference: acc (or x_0) + x_1 + ... in rank order, in float.
std::vector<float> ordered_sum(int world, size_t n, const std::vector<float>* acc) {
  std::vector<float> s = contribution(0, n);
  if (acc)
    for (size_t i = 0; i < n; ++i) s[i] = (*acc)[i] + s[i];
  for (int k = 1; k < world; ++k) {
    const std::vector<float> x = contribution(k, n);
    for (size_t i = 0; i < n; ++i) s[i] = s[i] + x[i];
  }
  return s;
}

TEST(DistChunks, CoverEveryElementOnceAligned) {
  for (size_t n : {0ul, 1ul, 15ul, 16ul, 17ul, 1000ul, 1001ul, 65536ul + 5}) {
    for (int world : {1, 2, 3, 4, 7}) {
      size_t next = 0;
      for (int r = 0; r < world; ++r) {
        const Span c = chunk_of(n, r, world);
        EXPECT_EQ(c.begin, next) << "n=" << n << " world=" << world << " rank=" << r;
        EXPECT_LE(c.end, n);
        if (c.size() > 0 && c.end < n) {
          EXPECT_EQ(c.end % forge::dist::kChunkAlign, 0u);
        }
        next = c.end;
      }
      EXPECT_EQ(next, n) << "n=" << n << " world=" << world;
      EXPECT_GE(Communicator::scratch_floats(n, world), n);
    }
  }
}

TEST(DistSingleProcess, CollectivesAreIdentities) {
  auto comm = forge::dist::make_single_process_communicator();
  EXPECT_EQ(comm->world(), 1);
  EXPECT_EQ(comm->rank(), 0);
  const size_t n = 37;
  std::vector<float> x = contribution(0, n), acc = contribution(5, n), scratch(n);
  std::vector<float> expect(n);
  for (size_t i = 0; i < n; ++i) expect[i] = acc[i] + x[i];
  comm->wait(comm->start_reduce_scatter(x.data(), acc.data(), n, true, scratch.data()));
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(bits(acc[i]), bits(expect[i]));
  comm->wait(comm->start_all_reduce(x.data(), acc.data(), n, false, scratch.data()));
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(bits(acc[i]), bits(x[i]));
  comm->all_reduce_sum(x.data(), n);
  EXPECT_EQ(x, contribution(0, n));
  double d = 3.5, all = 0;
  comm->all_gather_bytes(&d, &all, sizeof d);
  EXPECT_EQ(all, 3.5);
  std::vector<float> out(n);
  comm->gather_to_root(x.data(), out.data(), {n});
  EXPECT_EQ(out, x);
  comm->broadcast(&d, sizeof d, 0);
  comm->barrier();
}

// --- MPI ----------------------------------------------------------------------------------
// Run under mpirun, these check the MPI communicator against the ordered sums above; run by
// plain ctest, each launches itself under mpirun and passes only if every rank passed.

std::string mpirun_prefix(int np) {
  return "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) +
         " --mca btl self,vader,tcp --mca btl_tcp_if_include lo -x OMP_NUM_THREADS=1 ";
}

// Outside mpirun: runs this very test as `mpirun -np world` and records a failure unless
// every rank passed.
void launch_under_mpirun(int world) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = mpirun_prefix(world) + self +
                          " --gtest_filter=" + info->test_suite_name() + "." + info->name() +
                          " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "under mpirun (rerun to see its output): " << cmd;
}

void check_collectives() {
  auto comm = forge::dist::make_communicator();
  ASSERT_EQ(comm->name(), "mpi");
  ASSERT_GE(comm->world(), 2) << "run with at least 2 ranks";
  const int r = comm->rank(), W = comm->world();
  for (size_t n : {1ul, 17ul, 1000ul, 100003ul}) {
    // all-reduce, overwrite and accumulate, bit for bit against the ordered float sum
    std::vector<float> acc0 = contribution(99, n);
    const std::vector<float> expect_plain = ordered_sum(W, n, nullptr);
    const std::vector<float> expect_acc = ordered_sum(W, n, &acc0);
    std::vector<float> scratch(Communicator::scratch_floats(n, W));
    std::vector<float> x = contribution(r, n), acc(n, -1.0f);
    comm->wait(comm->start_all_reduce(x.data(), acc.data(), n, false, scratch.data()));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(bits(acc[i]), bits(expect_plain[i])) << "all-reduce n=" << n << " i=" << i;
    acc = acc0;
    comm->wait(comm->start_all_reduce(x.data(), acc.data(), n, true, scratch.data()));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(bits(acc[i]), bits(expect_acc[i])) << "accumulate n=" << n << " i=" << i;
    // in place (acc == x), blocking form
    comm->all_reduce_sum(x.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits(x[i]), bits(expect_plain[i]));

    // reduce-scatter: only the own chunk is written
    x = contribution(r, n);
    std::vector<float> rs(n, 42.0f);
    comm->wait(comm->start_reduce_scatter(x.data(), rs.data(), n, false, scratch.data()));
    const Span mine = chunk_of(n, r, W);
    for (size_t i = 0; i < n; ++i) {
      if (i >= mine.begin && i < mine.end)
        ASSERT_EQ(bits(rs[i]), bits(expect_plain[i])) << "reduce-scatter n=" << n << " i=" << i;
      else
        ASSERT_EQ(rs[i], 42.0f) << "reduce-scatter wrote outside its chunk at " << i;
    }
    // all-gather completes the vector from the chunks
    comm->all_gather(rs.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits(rs[i]), bits(expect_plain[i]));
  }

  // several operations in flight at once, completed in reverse order
  const size_t n = 4099;
  std::vector<std::vector<float>> xs, accs, scr;
  std::vector<Communicator::Handle> hs;
  for (int b = 0; b < 4; ++b) {
    xs.push_back(contribution(r, n));
    accs.emplace_back(n);
    scr.emplace_back(Communicator::scratch_floats(n, W));
  }
  for (int b = 0; b < 4; ++b)
    hs.push_back(comm->start_all_reduce(xs[b].data(), accs[b].data(), n, false, scr[b].data()));
  for (int b = 3; b >= 0; --b) comm->wait(hs[b]);
  const std::vector<float> expect = ordered_sum(W, n, nullptr);
  for (int b = 0; b < 4; ++b)
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits(accs[b][i]), bits(expect[i]));

  // broadcast, all-gather of bytes, gather to root, barrier
  double v = r == 1 ? 2.25 : -1.0;
  comm->broadcast(&v, sizeof v, 1);
  EXPECT_EQ(v, 2.25);
  std::vector<double> all(W);
  const double mine_d = 10.0 + r;
  comm->all_gather_bytes(&mine_d, all.data(), sizeof(double));
  for (int k = 0; k < W; ++k) EXPECT_EQ(all[k], 10.0 + k);
  std::vector<size_t> counts;
  size_t total = 0;
  for (int k = 0; k < W; ++k) {
    counts.push_back(3 + k);
    total += 3 + k;
  }
  std::vector<float> part(counts[r], static_cast<float>(r)), gathered(total, -1.0f);
  comm->gather_to_root(part.data(), r == 0 ? gathered.data() : nullptr, counts);
  if (r == 0) {
    size_t off = 0;
    for (int k = 0; k < W; ++k)
      for (size_t i = 0; i < counts[k]; ++i) EXPECT_EQ(gathered[off++], static_cast<float>(k));
  }
  comm->barrier();
}

// Under mpirun (any number of ranks >= 2): the checks. Under plain ctest: 2 and 3 ranks.
TEST(DistMpi, OrderedCollectives) {
  if (forge::dist::launched_by_mpi()) {
    check_collectives();
    return;
  }
  launch_under_mpirun(2);
  launch_under_mpirun(3);
}

}  // namespace
