// The `forge` subcommands. Each file registers its own options and its handler.
#pragma once

#include <CLI/CLI.hpp>

namespace forge::cli {

void register_train(CLI::App& app);
void register_eval(CLI::App& app);
void register_sample(CLI::App& app);
void register_data(CLI::App& app);
void register_export(CLI::App& app);
void register_verify(CLI::App& app);
void register_bench(CLI::App& app);
void register_tokenize(CLI::App& app);  // tokenize and tokenizer train

}  // namespace forge::cli
