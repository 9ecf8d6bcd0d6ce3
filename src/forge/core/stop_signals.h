// SIGINT (Ctrl-C) and SIGTERM (a scheduler's stop) caught as a request rather than an end: the
// first is recorded for the program to act on (`forge train` stops after the step in progress
// and writes a checkpoint; `forge verify` passes it to the run it waits for); a second one
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
  // restart_calls: a system call the signal interrupts goes on (SA_RESTART); without, it
  // returns EINTR, for a program blocked in one (waitpid) that must act on the signal.
  explicit StopSignals(bool install, bool restart_calls = true);
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
