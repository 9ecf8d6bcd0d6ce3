// Collective communication between the ranks of a data-parallel run.
//
// Every sum here is taken in a FIXED order, rank 0 first:
//     out[i] = ((x_0[i] + x_1[i]) + x_2[i]) + ... + x_{W-1}[i]
// whatever the timing, the transport or the algorithm underneath, and every rank ends with
// the same bits. That is what lets `mpirun -np 2` reproduce, bit for bit, one process that
// accumulates 2 micro-steps (it adds micro-step 0's gradient, then micro-step 1's). MPI's own
// MPI_SUM reductions promise no order, so the MPI implementation never uses them for floats:
// it moves the data (all-to-all, all-gather) and does the adds itself.
//
// Reduce-scatter and all-gather share one partition of an n-float vector into `world` chunks
// (chunk_of below): rank r owns chunk r. Chunk boundaries fall on multiples of kChunkAlign
// floats, so a chunk never splits a vector register of a tensor that starts aligned.
//
// Nonblocking operations: start_*() returns a handle at once; progress() / test() / wait()
// move every pending operation forward (MPI progresses nonblocking collectives only inside
// MPI calls, so the trainer calls progress() between layers of the backward pass). Buffers
// given to a started operation must stay untouched until it completes. Operations that need
// scratch take it from the caller (scratch_floats() says how much), so nothing allocates
// while a step runs.
//
// Failures: every wait is bounded (FORGE_DIST_TIMEOUT_S, default 300 s). A peer that died or
// stalled makes wait() throw forge::Error naming the rank, the operation and the timeout,
// instead of hanging forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace forge::dist {

constexpr size_t kChunkAlign = 16;

struct Span {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// Chunk r of n floats split over world ranks: equal sizes rounded up to kChunkAlign, the
// last chunks possibly shorter or empty.
Span chunk_of(size_t n, int rank, int world);

class Communicator {
 public:
  using Handle = int;

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string name() const = 0;  // "single-process" | "mpi"

  // Scratch floats an operation on n floats needs (world * the largest chunk).
  static size_t scratch_floats(size_t n, int world);

  // --- nonblocking -------------------------------------------------------------------
  // Reduce-scatter: over chunk c = chunk_of(n, rank, world) only,
  //   acc[c] = (accumulate ? acc[c] + x_0[c] : x_0[c]) + x_1[c] + ... + x_{W-1}[c]
  // where x_k is rank k's x. acc may be x. Elements of acc outside chunk c are untouched.
  virtual Handle start_reduce_scatter(const float* x, float* acc, size_t n, bool accumulate,
                                      float* scratch) = 0;
  // All-gather: chunk k of data (n floats) is copied from rank k to every rank.
  virtual Handle start_all_gather(float* data, size_t n) = 0;
  // All-reduce: reduce-scatter then all-gather; afterwards all of acc holds the ordered sum
  // on every rank.
  virtual Handle start_all_reduce(const float* x, float* acc, size_t n, bool accumulate,
                                  float* scratch) = 0;
  // Moves every pending operation forward without waiting.
  virtual void progress() = 0;
  virtual bool test(Handle h) = 0;  // progresses; true once h has completed (h is then free)
  virtual void wait(Handle h) = 0;  // blocks (bounded, see above) until h completes

  // --- blocking ----------------------------------------------------------------------
  // In place, with internal scratch (these allocate on first use of a size: not for the
  // step's large buffers, which go through the nonblocking calls with planned scratch).
  void all_reduce_sum(float* data, size_t n);
  void reduce_scatter_sum(float* data, size_t n);  // chunk r of data := ordered sum
  void all_gather(float* data, size_t n) { wait(start_all_gather(data, n)); }
  // bytes from root's data to every rank's data.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // all[k * bytes .. (k+1) * bytes) := rank k's mine, on every rank.
  virtual void all_gather_bytes(const void* mine, void* all, size_t bytes) = 0;
  // On rank 0: out := rank 0's n_0 floats, then rank 1's n_1, ... (counts[k] = n_k, the
  // same on every rank). Elsewhere out is not touched (may be null).
  virtual void gather_to_root(const float* mine, float* out, const std::vector<size_t>& counts) = 0;
  // Marks the run as failed: on exit the process leaves without the collective shutdown
  // (which would wait for peers that may be gone), so the launcher ends the other ranks.
  virtual void mark_failed() {}

 private:
  std::vector<float> scratch_;
};

// MPI when this process was started by an MPI launcher (mpirun / mpiexec / srun with PMI),
// otherwise the single-process communicator. MPI is initialised on first call and shut
// down at exit.
std::unique_ptr<Communicator> make_communicator();
std::unique_ptr<Communicator> make_single_process_communicator();
// True when the environment says an MPI launcher started this process.
bool launched_by_mpi();
// FORGE_DIST_TIMEOUT_S (default 300): how long a collective may stall before wait() throws.
double dist_timeout_seconds();

}  // namespace forge::dist
