#include "forge/core/stop_signals.h"

#include <pthread.h>

#include <csignal>
#include <cstddef>

namespace forge {

namespace {

volatile std::sig_atomic_t stop_signal = 0;

// Records the signal and puts the default action back, so that a second one ends the process.
extern "C" void record_stop_signal(int sig) {
  stop_signal = sig;
  std::signal(sig, SIG_DFL);
}

// Room for the frame with every register state the CPU may save (AMX's tiles are 8 KiB).
constexpr size_t kStackBytes = 256 * 1024;

}  // namespace

StopSignals::StopSignals(bool install, bool restart_calls) : installed_(install) {
  if (!installed_) return;
  stop_signal = 0;
  stack_.resize(kStackBytes);
  stack_t ss{};
  ss.ss_sp = stack_.data();
  ss.ss_size = stack_.size();
  sigaltstack(&ss, &old_stack_);
  struct sigaction sa {};
  sa.sa_handler = record_stop_signal;
  sa.sa_flags = SA_ONSTACK | (restart_calls ? SA_RESTART : 0);
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  if (!installed_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaltstack(&old_stack_, nullptr);
}

int StopSignals::requested() const { return stop_signal; }

void StopSignals::route_to_main_thread() const {
  if (!installed_) return;
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  const pthread_t main_thread = pthread_self();
#pragma omp parallel
  if (!pthread_equal(pthread_self(), main_thread)) pthread_sigmask(SIG_BLOCK, &both, nullptr);
}

}  // namespace forge
