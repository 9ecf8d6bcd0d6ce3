#include <fmt/format.h>

#include <cstdlib>

#include "forge/cli/commands.h"
#include "forge/cli/validators.h"
#include "forge/numerics/numerics.h"
#include "forge/verify/verify.h"

namespace forge::cli {

void register_verify(CLI::App& app) {
  auto o = std::make_shared<verify::VerifyOptions>();
  auto* cmd = app.add_subcommand(
      "verify", "run a gate of the equivalence ladder: the engine against PyTorch (or itself)");
  cmd->add_option("--gate", o->gate, "alignment | multistep | resume | long-horizon | dp | perf")
      ->required()
      ->check(CLI::IsMember({"alignment", "multistep", "resume", "long-horizon", "dp", "perf"}));
  cmd->add_option("--profile", o->profile,
                  fmt::format("numerics profile: {}", fmt::join(numerics_profiles(), " | ")))
      ->required()
      ->check(CLI::IsMember(numerics_profiles()));
  cmd->add_option("--config", o->config, "config JSON read by both sides")
      ->check(non_empty_path())
      ->required();
  cmd->add_option("--out", o->out_dir, "report folder (default runs/verify/<gate>-<profile>)")
      ->check(non_empty_path());
  cmd->add_option("--steps", o->steps, "override the gate's step count")->check(positive_integer());
  cmd->add_option("--threads", o->threads,
                  "threads on both sides (0: all cores; default: train.threads)")
      ->check(integer_in(0, 4096));
  cmd->add_option(
         "--python", o->python,
         "reference interpreter (default: .venv/bin/python; /usr/bin/python3 for torch-cpu)")
      ->check(non_empty_path());
  cmd->add_option("--source-dir", o->source_dir,
                  "checkout holding reference/ (default: found above the binary or the cwd)")
      ->check(non_empty_path());
  cmd->add_flag(
      "--calibrate", o->calibrate,
      "alignment, multistep and dp of fast and bf16: also compare a second PyTorch run (torch "
      "1.13 for fast, bf16 autocast for bf16) with the reference, to tell a failure "
      "PyTorch shares with itself from one it does not; the verdict stays the engine's");
  cmd->add_option("--calibration-python", o->calibration_python,
                  "the second PyTorch for --calibrate under fast (default /usr/bin/python3)");
  cmd->callback([o] {
    const int rc = verify::run_verify(*o);
    // The report is printed; a gate below its rung is an ordinary outcome, not an error.
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace forge::cli
