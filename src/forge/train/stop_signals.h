// How `forge train` stops on SIGINT (Ctrl-C) or SIGTERM (a scheduler's stop): the first signal
// asks the run to stop after the step in progress (it then writes a checkpoint); a second one
// ends the process at once.
#pragma once

#include <signal.h>

#include <vector>

namespace forge {

// While it lives, SIGINT and SIGTERM are caught (install: false leaves them alone, as data
// parallel does: each rank would stop at its own step, and the checkpoint is collective).
//
// The handler runs on a stack of its own (SA_ONSTACK): delivered on the thread's stack, the
// signal frame overwrote what oneDNN's JIT GEMM kernels keep below their stack pointer, and the
// step in progress corrupted the heap (seen in dnnl_sgemm's free, in about a third of the runs
// stopped mid-step; never with torch-cpu's GEMMs, nor with the frame moved off the stack).
// Only the main thread takes the signals: the team's other threads block them.
class StopSignals {
 public:
  explicit StopSignals(bool install);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal that asked for a stop, or 0.
  int requested() const;
  // The OpenMP team's other threads block the signals, so that only the main thread (with
  // the stack of its own) takes them; to be called once the team has its final size.
  void route_to_main_thread() const;

 private:
  bool installed_;
  std::vector<char> stack_;
  stack_t old_stack_{};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace forge
