// forge: train decoder-only language models, proven against PyTorch.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>

#include "forge/cli/commands.h"
#include "forge/core/env.h"
#include "forge/core/error.h"
#include "forge/kernels/cpu/dispatch.h"

int main(int argc, char** argv) {
  CLI::App app{
      "forge: a C++ training engine for decoder-only language models, proven against PyTorch"};
  app.require_subcommand(1);
  forge::cli::register_train(app);
  forge::cli::register_eval(app);
  forge::cli::register_sample(app);
  forge::cli::register_data(app);
  forge::cli::register_export(app);
  forge::cli::register_verify(app);
  forge::cli::register_bench(app);
  forge::cli::register_tokenize(app);
  try {
    forge::read_environment_switches();
    forge::kernels::cpu::active_isa();  // FORGE_CPU_ISA, checked before any command runs
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "forge: {} (see forge --help)\n", e.what());
    return 2;
  } catch (const forge::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "forge: error: {}\n", e.what());
    return 1;
  } catch (const nlohmann::json::exception& e) {
    fmt::print(stderr, "forge: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "forge: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
