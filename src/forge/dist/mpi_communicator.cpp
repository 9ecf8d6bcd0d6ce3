// The MPI communicator. Floats are never summed by MPI (MPI_SUM promises no order); data
// is moved with all-to-all / all-gather and added here, rank 0 first, so the result has the
// same bits on every rank and in every run.
//
//   reduce-scatter on n floats, rank r owning chunk c_r:
//     MPI_Ialltoallv: rank k's chunk c_r -> scratch[k * |c_r|] on rank r   (for every k)
//     then acc[c_r] = (acc[c_r] +) scratch[0] + scratch[1] + ... in rank order
//   all-gather:  MPI_Iallgatherv in place, chunk k from rank k
//   all-reduce:  the two in sequence (the same traffic as a ring all-reduce: each rank sends
//                and receives 2 (W-1)/W of the data)
//
// MPI matches collectives on a communicator by the order in which ranks start them. An
// all-reduce starts its all-gather when its all-to-all completes, which happens at different
// moments on different ranks, so its two halves cannot share a communicator with other
// operations started in between. Each operation therefore runs on one of kChannels
// duplicated communicators, chosen by its sequence number (the same on every rank, since
// every rank starts operations in the same program order); before an operation reuses a
// channel, the previous one on it is driven until all its collectives have been started.
// Only MPI's C API: keep its deprecated C++ bindings (and their warnings) out.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "forge/core/error.h"
#include "forge/dist/communicator.h"

namespace forge::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChannels = 16;

// MPI is initialised once per process and shut down at exit, unless the run failed: then
// MPI_Finalize (a collective shutdown) could wait forever on a dead peer, so the process
// leaves without it and the launcher ends the other ranks.
struct MpiRuntime {
  bool initialised = false;
  bool failed = false;
  ~MpiRuntime() {
    int finalized = 0;
    if (initialised && !failed && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
      MPI_Finalize();
  }
};
MpiRuntime& runtime() {
  static MpiRuntime r;
  return r;
}

// The launcher ends the surviving ranks with SIGTERM when one rank dies. Say so in one line
// (async-signal-safe: write and _exit only) instead of vanishing silently. A checkpoint being
// written at that moment stays a *.tmp directory and never becomes the latest one.
char g_term_line[160];
size_t g_term_len = 0;
extern "C" void on_sigterm(int) {
  if (g_term_len) {
    [[maybe_unused]] ssize_t w = ::write(2, g_term_line, g_term_len);
  }
  ::_exit(143);
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

int to_int(size_t n, const char* what) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max()))
    fail("MPI {}: {} elements exceed MPI's int count; use smaller buckets", what, n);
  return static_cast<int>(n);
}

class Mpi final : public Communicator {
 public:
  // FORGE_DIST_TIMEOUT_S is read before MPI starts: a rank that refuses it then simply exits,
  // and the launcher ends the others; refused after MPI_Init, it stayed alive in MPI's exit
  // while the other ranks waited for it until their timeout.
  Mpi() : timeout_s_(dist_timeout_seconds()) {
    MpiRuntime& rt = runtime();
    if (!rt.initialised) {
      int already = 0;
      MPI_Initialized(&already);
      if (!already) {
        int provided = 0;
        // Only the main thread calls MPI (OpenMP threads compute, never communicate).
        if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
          fail("MPI_Init_thread failed (is this process started by mpirun?)");
      }
      rt.initialised = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    for (int c = 0; c < kChannels; ++c) {
      channel_last_[c] = -1;
      check(MPI_Comm_dup(comm_, &channels_[c]), "MPI_Comm_dup");
      MPI_Comm_set_errhandler(channels_[c], MPI_ERRORS_RETURN);
    }
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    g_term_len = static_cast<size_t>(std::snprintf(
        g_term_line, sizeof(g_term_line),
        "forge: error: rank %d: stopped by the MPI launcher (another rank failed or the job "
        "was cancelled)\n",
        rank_));
    g_term_len = std::min(g_term_len, sizeof(g_term_line) - 1);
    std::signal(SIGTERM, on_sigterm);
    ops_.reserve(64);
  }
  ~Mpi() override {
    if (runtime().failed) return;
    for (MPI_Comm& c : channels_) MPI_Comm_free(&c);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string name() const override { return "mpi"; }
  void mark_failed() override { runtime().failed = true; }

  Handle start_reduce_scatter(const float* x, float* acc, size_t n, bool accumulate,
                              float* scratch) override {
    const Handle h = new_op(Kind::ReduceScatter, x, acc, n, accumulate, scratch);
    start_exchange(ops_[h]);
    return h;
  }
  Handle start_all_gather(float* data, size_t n) override {
    const Handle h = new_op(Kind::AllGather, nullptr, data, n, false, nullptr);
    start_gather(ops_[h]);
    return h;
  }
  Handle start_all_reduce(const float* x, float* acc, size_t n, bool accumulate,
                          float* scratch) override {
    const Handle h = new_op(Kind::AllReduce, x, acc, n, accumulate, scratch);
    start_exchange(ops_[h]);
    return h;
  }

  void progress() override {
    for (Op& op : ops_)
      if (op.stage == Stage::Exchange || op.stage == Stage::Gather) advance(op);
  }
  bool test(Handle h) override {
    FORGE_CHECK(h >= 0 && h < static_cast<int>(ops_.size()) && ops_[h].stage != Stage::Free,
                "MPI: test() on an unknown handle {}", h);
    progress();
    if (ops_[h].stage != Stage::Done) return false;
    ops_[h].stage = Stage::Free;
    return true;
  }
  void wait(Handle h) override {
    const auto t0 = Clock::now();
    int spins = 0;
    while (!test(h)) {
      if (++spins > 1000) std::this_thread::yield();  // stay responsive, leave the core
      if ((spins & 1023) == 0) check_deadline(t0, ops_[h].what());
    }
  }

  void broadcast(void* data, size_t bytes, int root) override {
    MPI_Request r;
    check(MPI_Ibcast(data, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_, &r), "MPI_Ibcast");
    wait_request(r, "broadcast");
  }
  void barrier() override {
    MPI_Request r;
    check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    wait_request(r, "barrier");
  }
  void all_gather_bytes(const void* mine, void* all, size_t bytes) override {
    MPI_Request r;
    const int b = to_int(bytes, "all-gather");
    check(MPI_Iallgather(mine, b, MPI_BYTE, all, b, MPI_BYTE, comm_, &r), "MPI_Iallgather");
    wait_request(r, "all-gather");
  }
  void gather_to_root(const float* mine, float* out, const std::vector<size_t>& counts) override {
    FORGE_CHECK(static_cast<int>(counts.size()) == world_, "gather counts for {} ranks, world {}",
                counts.size(), world_);
    std::vector<int> rc(world_), rd(world_);
    size_t off = 0;
    for (int k = 0; k < world_; ++k) {
      rc[k] = to_int(counts[k], "gather");
      rd[k] = to_int(off, "gather");
      off += counts[k];
    }
    MPI_Request r;
    check(MPI_Igatherv(mine, rc[rank_], MPI_FLOAT, out, rc.data(), rd.data(), MPI_FLOAT, 0, comm_,
                       &r),
          "MPI_Igatherv");
    wait_request(r, "gather");
  }

 private:
  enum class Kind { ReduceScatter, AllGather, AllReduce };
  enum class Stage { Free, Exchange, Gather, Done };
  struct Op {
    Kind kind = Kind::AllReduce;
    Stage stage = Stage::Free;
    MPI_Request req = MPI_REQUEST_NULL;
    const float* x = nullptr;
    float* acc = nullptr;
    size_t n = 0;
    bool accumulate = false;
    float* scratch = nullptr;
    Span mine;
    std::vector<int> sc, sd, rc, rd;  // all-to-all counts/displacements, then all-gather's
    uint64_t seq = 0;                 // start order, the same on every rank
    MPI_Comm comm = MPI_COMM_NULL;    // its channel
    const char* what() const {
      return kind == Kind::ReduceScatter ? "reduce-scatter"
             : kind == Kind::AllGather   ? "all-gather"
                                         : "all-reduce";
    }
  };

  void check(int rc, const char* call) const {
    if (rc != MPI_SUCCESS)
      fail("rank {}: {} failed: {} (did another rank die?)", rank_, call, mpi_error_string(rc));
  }
  void check_deadline(Clock::time_point t0, const char* what) const {
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (waited > timeout_s_)
      fail(
          "rank {}: no answer from the other ranks for {:.0f} s during {} (a rank died or "
          "stalled; FORGE_DIST_TIMEOUT_S sets this limit)",
          rank_, waited, what);
  }
  void wait_request(MPI_Request& r, const char* what) {
    const auto t0 = Clock::now();
    int done = 0, spins = 0;
    while (true) {
      check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      progress();  // keep the bucket operations moving too
      if (++spins > 1000) std::this_thread::yield();
      if ((spins & 1023) == 0) check_deadline(t0, what);
    }
  }

  // Reuses a finished slot; the pool grows only when more operations are in flight than
  // ever before (the first step), so steady-state steps allocate nothing.
  Handle new_op(Kind kind, const float* x, float* acc, size_t n, bool accumulate, float* scratch) {
    size_t slot = 0;
    while (slot < ops_.size() && ops_[slot].stage != Stage::Free) ++slot;
    if (slot == ops_.size()) {
      ops_.emplace_back();
      Op& o = ops_.back();
      o.sc.resize(world_);
      o.sd.resize(world_);
      o.rc.resize(world_);
      o.rd.resize(world_);
    }
    // The channel's previous operation must have started all its collectives first.
    const int ch = static_cast<int>(seq_ % kChannels);
    const Handle prev = channel_last_[ch];
    if (prev >= 0 && ops_[prev].seq == channel_seq_[ch]) {
      const auto t0 = Clock::now();
      int spins = 0;
      while (ops_[prev].stage == Stage::Exchange && ops_[prev].kind == Kind::AllReduce) {
        advance(ops_[prev]);
        if ((++spins & 1023) == 0) check_deadline(t0, ops_[prev].what());
      }
    }
    Op& op = ops_[slot];
    op.seq = seq_++;
    op.comm = channels_[ch];
    channel_last_[ch] = static_cast<Handle>(slot);
    channel_seq_[ch] = op.seq;
    op.kind = kind;
    op.x = x;
    op.acc = acc;
    op.n = n;
    op.accumulate = accumulate;
    op.scratch = scratch;
    op.mine = chunk_of(n, rank_, world_);
    return static_cast<Handle>(slot);
  }

  void start_exchange(Op& op) {
    const int mine = to_int(op.mine.size(), op.what());
    for (int k = 0; k < world_; ++k) {
      const Span c = chunk_of(op.n, k, world_);
      op.sc[k] = to_int(c.size(), op.what());
      op.sd[k] = to_int(c.begin, op.what());
      op.rc[k] = mine;
      op.rd[k] = to_int(static_cast<size_t>(k) * op.mine.size(), op.what());
    }
    op.stage = Stage::Exchange;
    check(MPI_Ialltoallv(op.x, op.sc.data(), op.sd.data(), MPI_FLOAT, op.scratch, op.rc.data(),
                         op.rd.data(), MPI_FLOAT, op.comm, &op.req),
          "MPI_Ialltoallv");
  }

  void start_gather(Op& op) {
    for (int k = 0; k < world_; ++k) {
      const Span c = chunk_of(op.n, k, world_);
      op.rc[k] = to_int(c.size(), op.what());
      op.rd[k] = to_int(c.begin, op.what());
    }
    op.stage = Stage::Gather;
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.acc, op.rc.data(), op.rd.data(),
                          MPI_FLOAT, op.comm, &op.req),
          "MPI_Iallgatherv");
  }

  // The ordered sum of the received chunks, rank 0 first.
  void sum_chunks(Op& op) {
    const size_t m = op.mine.size();
    float* out = op.acc + op.mine.begin;
    const float* s = op.scratch;
    if (op.accumulate) {
      for (size_t i = 0; i < m; ++i) out[i] = out[i] + s[i];
    } else {
      std::memcpy(out, s, m * sizeof(float));
    }
    for (int k = 1; k < world_; ++k) {
      const float* sk = s + static_cast<size_t>(k) * m;
      for (size_t i = 0; i < m; ++i) out[i] = out[i] + sk[i];
    }
  }

  void advance(Op& op) {
    int done = 0;
    check(MPI_Test(&op.req, &done, MPI_STATUS_IGNORE), op.what());
    if (!done) return;
    if (op.stage == Stage::Exchange) {
      sum_chunks(op);
      if (op.kind == Kind::AllReduce) {
        start_gather(op);
        return;
      }
    }
    op.stage = Stage::Done;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;  // the blocking calls (single-stage, program order)
  MPI_Comm channels_[kChannels] = {};
  Handle channel_last_[kChannels];  // -1: no operation yet
  uint64_t channel_seq_[kChannels] = {};
  uint64_t seq_ = 0;
  int rank_ = 0, world_ = 1;
  double timeout_s_ = 300;
  std::vector<Op> ops_;
};

}  // namespace

std::unique_ptr<Communicator> make_communicator() {
  if (!launched_by_mpi()) return make_single_process_communicator();
  return std::make_unique<Mpi>();
}

}  // namespace forge::dist
