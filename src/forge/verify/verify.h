// `forge verify`: runs the engine and the PyTorch reference side by side (or the engine
// against itself), compares their dumps with the reference's comparer and reports the rung
// reached, as ../shared/EQUIVALENCE.md specifies for each gate.
#pragma once

#include <filesystem>
#include <string>

namespace forge::verify {

struct VerifyOptions {
  std::string gate;        // alignment | multistep | resume | long-horizon
  std::string profile;     // fast | torch-cpu | bf16
  std::string config;      // the run's config JSON (read by both sides)
  std::string out_dir;     // default runs/verify/<gate>-<profile>
  int steps = -1;          // overrides the gate's step count
  int threads = -1;        // overrides train.threads on both sides
  std::string python;      // reference interpreter (default by profile)
  std::string source_dir;  // the checkout holding reference/ (default: found from the binary)
  // alignment and multistep of fast and bf16: also hold a second PyTorch run against the
  // reference under the same gate (torch 1.13 for fast, torch's bf16 autocast for bf16), so
  // that a failure PyTorch shares with itself is told from one it does not. The verdict and
  // the exit status stay the engine's.
  bool calibrate = false;
  std::string calibration_python;  // the second PyTorch for fast (default /usr/bin/python3)
};

// Runs the gate; prints the report and the final `gate G profile P: RUNG` line on stdout,
// progress on stderr. Returns 0 only when the gate's required rung is reached.
int run_verify(const VerifyOptions& options);

// The checkout holding the PyTorch reference (reference/forge_ref): source_dir when given (an
// error if it has none), else $FORGE_SOURCE_DIR's (likewise), else the first found above the
// running binary (which normally lives in one of its build trees) or the current folder; empty
// when none is. `forge verify` and `forge bench` both run the reference from it.
std::filesystem::path find_reference_checkout(const std::string& source_dir);

}  // namespace forge::verify
