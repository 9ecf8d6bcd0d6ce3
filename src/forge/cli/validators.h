// Checks for command-line options (numbers, paths) whose messages say plainly what was expected:
// CLI11's PositiveNumber and NonNegativeNumber print their ranges' ends as doubles ("Value 0 not in
// range 0.000000 to 179769313486231570814..."), and let a NaN through.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace forge::cli {

// A finite number for which ok(value) holds; otherwise "expected <want>, got <text>". `name`
// is what --help shows for the option's value.
template <typename Ok>
CLI::Validator number_check(Ok ok, std::string want, std::string name) {
  return CLI::Validator(
      [ok, want](std::string& text) -> std::string {
        double v = 0;
        if (CLI::detail::lexical_cast(text, v) && std::isfinite(v) && ok(v)) return {};
        return fmt::format("expected {}, got {}", want, text);
      },
      std::move(name));
}

// A whole number from lo to hi, both included.
inline CLI::Validator integer_in(long lo, long hi) {
  return number_check([=](double v) { return v >= lo && v <= hi && v == std::floor(v); },
                      fmt::format("an integer from {} to {}", lo, hi),
                      fmt::format("INT in [{}, {}]", lo, hi));
}
// A share above 0 and at most hi.
inline CLI::Validator share_up_to(double hi) {
  return number_check([=](double v) { return v > 0 && v <= hi; },
                      fmt::format("a share above 0 and at most {}", hi),
                      fmt::format("SHARE in (0, {}]", hi));
}
inline CLI::Validator positive_integer() {
  return number_check([](double v) { return v > 0 && v == std::floor(v); }, "an integer above 0",
                      "INT > 0");
}
inline CLI::Validator non_negative_integer() {
  return number_check([](double v) { return v >= 0 && v == std::floor(v); },
                      "an integer of at least 0", "INT >= 0");
}
inline CLI::Validator non_negative_number() {
  return number_check([](double v) { return v >= 0; }, "a number of at least 0", "NUMBER >= 0");
}

// A path option given an empty value: an unset shell variable (--out-dir "$OUT") read as "not
// given" wrote into the config's out_dir, and --resume "" trained afresh.
inline CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "expected a path, got an empty value" : std::string();
      },
      "PATH");
}

}  // namespace forge::cli
