// Errors that reach the user. Every message names the file, the field and what was
// expected; the CLI prints it as one line and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace forge {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Error("config.json: field 'train.steps': expected a positive integer, got -3")
template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace forge

// Internal invariants (not user input): still an exception, never abort().
#define FORGE_CHECK(cond, ...)                                                \
  do {                                                                        \
    if (!(cond))                                                              \
      ::forge::fail("internal check failed at {}:{}: {}", __FILE__, __LINE__, \
                    fmt::format(__VA_ARGS__));                                \
  } while (0)
