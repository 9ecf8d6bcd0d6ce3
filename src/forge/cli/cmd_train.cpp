#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "forge/cli/commands.h"
#include "forge/cli/validators.h"
#include "forge/core/error.h"
#include "forge/numerics/numerics.h"
#include "forge/train/trainer.h"

namespace forge::cli {

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model from a JSON config");
  auto opt = std::make_shared<TrainOptions>();
  auto act_steps = std::make_shared<std::string>();
  cmd->add_option("--config", opt->config_path, "config JSON (see configs/)")
      ->check(non_empty_path())
      ->required();
  auto* resume = cmd->add_option("--resume", opt->resume,
                                 "checkpoint directory to continue from, bit for bit (or a run's "
                                 "OUT/checkpoints/latest, or OUT: the checkpoint it names)")
                     ->check(non_empty_path());
  cmd->add_option("--init", opt->init, "safetensors file with the initial parameters (HF names)")
      ->check(non_empty_path())
      ->excludes(resume);
  cmd->add_option("--numerics", opt->numerics,
                  fmt::format("numerics profile: {} (default: the config's; with --resume, the "
                              "checkpoint's)",
                              fmt::join(numerics_profiles(), " | ")))
      ->check(CLI::IsMember(numerics_profiles()));
  auto* dump =
      cmd->add_option("--dump", opt->dump_dir, "write equivalence dumps into this directory")
          ->check(non_empty_path());
  cmd->add_option("--dump-level", opt->dump_level,
                  "1: loss, grads, params per step; 2: + activations")
      ->check(integer_in(1, 2))
      ->needs(dump);
  cmd->add_option("--dump-act-steps", *act_steps, "steps with level-2 activations, e.g. 1,8")
      ->needs(dump);
  cmd->add_option("--steps", opt->steps, "override train.steps (also the schedule's length)")
      ->check(positive_integer());
  cmd->add_option(
         "--stop-after", opt->stop_after,
         "stop at step N (counted from the run's start, as a resumed run counts) with a checkpoint")
      ->check(positive_integer());
  cmd->add_option("--out-dir", opt->out_dir, "override out_dir")->check(non_empty_path());
  cmd->add_flag("--overwrite", opt->overwrite,
                "replace an earlier run in the output folder (its checkpoints and metrics); "
                "without it, such a folder is refused")
      ->excludes(resume);
  cmd->add_flag("--quiet", opt->quiet,
                "no per-step lines or progress bar (metrics.jsonl is still written)");
  cmd->add_option(
         "--dp-sharding", opt->dp_sharding,
         "data parallel: none (every rank keeps the whole AdamW state) or zero1 (each of N "
         "ranks keeps 1/N); default: FORGE_DP_SHARDING, else none")
      ->check(CLI::IsMember({"none", "zero1"}));
  cmd->callback([opt, act_steps] {
    if (!opt->dump_dir.empty() && opt->dump_level == 0) opt->dump_level = 1;
    if (!act_steps->empty()) {
      if (opt->dump_level != 2)
        fail("--dump-act-steps: activations are dumped at level 2 only; add --dump-level 2");
      std::stringstream ss(*act_steps);
      std::string item;
      while (std::getline(ss, item, ',')) {
        size_t used = 0;
        long long step = 0;
        try {
          step = std::stoll(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != item.size() || step < 1)
          fail("--dump-act-steps: expected comma-separated step numbers from 1, got '{}'",
               *act_steps);
        opt->dump_act_steps.insert(step);
      }
    }
    const TrainResult result = run_training(*opt);
    // Stopped by a signal (after its checkpoint): the shell's status for that signal.
    if (result.interrupted_by) {
      std::fflush(stdout);
      std::exit(128 + result.interrupted_by);
    }
  });
}

}  // namespace forge::cli
