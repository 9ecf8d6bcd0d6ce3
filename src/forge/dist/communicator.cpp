// The parts of the communicator every implementation shares, and the single-process one.
#include "forge/dist/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "forge/core/error.h"

namespace forge::dist {

Span chunk_of(size_t n, int rank, int world) {
  FORGE_CHECK(world >= 1 && rank >= 0 && rank < world, "rank {} of world {}", rank, world);
  const size_t per = ((n + world - 1) / world + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  const size_t begin = std::min(n, per * static_cast<size_t>(rank));
  return {begin, std::min(n, begin + per)};
}

size_t Communicator::scratch_floats(size_t n, int world) {
  return static_cast<size_t>(world) * chunk_of(n, 0, world).size();
}

void Communicator::all_reduce_sum(float* data, size_t n) {
  const size_t need = scratch_floats(n, world());
  if (scratch_.size() < need) scratch_.resize(need);
  wait(start_all_reduce(data, data, n, false, scratch_.data()));
}

void Communicator::reduce_scatter_sum(float* data, size_t n) {
  const size_t need = scratch_floats(n, world());
  if (scratch_.size() < need) scratch_.resize(need);
  wait(start_reduce_scatter(data, data, n, false, scratch_.data()));
}

double dist_timeout_seconds() {
  const char* s = std::getenv("FORGE_DIST_TIMEOUT_S");
  if (!s || !*s) return 300.0;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (*end != '\0' || !(v > 0))
    fail("environment FORGE_DIST_TIMEOUT_S: expected a positive number of seconds, got '{}'", s);
  return v;
}

bool launched_by_mpi() {
  // Open MPI, MPICH/Hydra and Slurm's PMI each export one of these to every rank.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

namespace {

// One process: the "sum over ranks" is the rank's own data; nothing moves.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string name() const override { return "single-process"; }

  Handle start_reduce_scatter(const float* x, float* acc, size_t n, bool accumulate,
                              float*) override {
    if (accumulate) {
      for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + x[i];
    } else if (acc != x) {
      std::memcpy(acc, x, n * sizeof(float));
    }
    return 0;
  }
  Handle start_all_gather(float*, size_t) override { return 0; }
  Handle start_all_reduce(const float* x, float* acc, size_t n, bool accumulate,
                          float* scratch) override {
    return start_reduce_scatter(x, acc, n, accumulate, scratch);
  }
  void progress() override {}
  bool test(Handle) override { return true; }
  void wait(Handle) override {}
  void broadcast(void*, size_t, int root) override {
    FORGE_CHECK(root == 0, "broadcast root {} in a single process", root);
  }
  void barrier() override {}
  void all_gather_bytes(const void* mine, void* all, size_t bytes) override {
    if (mine != all) std::memmove(all, mine, bytes);
  }
  void gather_to_root(const float* mine, float* out, const std::vector<size_t>& counts) override {
    FORGE_CHECK(counts.size() == 1, "gather over {} ranks in a single process", counts.size());
    if (mine != out) std::memmove(out, mine, counts[0] * sizeof(float));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcess>();
}

}  // namespace forge::dist
