// forge: train decoder-only language models, proven against PyTorch.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "forge/cli/commands.h"
#include "forge/core/env.h"
#include "forge/core/error.h"
#include "forge/io/mapped_file.h"
#include "forge/kernels/cpu/dispatch.h"

namespace {

// CLI11 answers a mistyped command with "A subcommand is required", naming neither the word
// nor the choices: the command words (`forge data prepare`: two) are checked first.
void check_command_words(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path;  // the command words read so far, each followed by ": "
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const auto subs = at->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return;  // a command's positional arguments from here on
    std::vector<std::string> names;
    CLI::App* next = nullptr;
    for (CLI::App* sub : subs) {
      names.push_back(sub->get_name());
      if (sub->get_name() == argv[i]) next = sub;
    }
    if (!next)
      throw CLI::ValidationError(fmt::format("{}unknown command '{}' (expected one of: {})", path,
                                             argv[i], fmt::join(names, ", ")));
    at = next;
    path += next->get_name() + ": ";
  }
}

}  // namespace

int main(int argc, char** argv) {
  forge::install_mapped_file_bus_handler();  // a mapped file cut short: a line naming it
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
    check_command_words(app, argc, argv);
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
  // Output that did not arrive (a full disk behind a redirection) is an error, not a success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fmt::print(stderr, "forge: error: cannot write the output: {}\n", std::strerror(errno));
    return 1;
  }
  return 0;
}
