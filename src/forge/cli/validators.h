// Number checks for command-line options whose messages say plainly what was expected: CLI11's
// PositiveNumber and NonNegativeNumber print their ranges' ends as doubles ("Value 0 not in
// range 0.000000 to 179769313486231570814..."), and let a NaN through.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace forge::cli {

// A finite number (a whole one when `whole`) above lo, or from lo on when not `strict`.
inline CLI::Validator number_from(double lo, bool strict, bool whole) {
  const std::string want = fmt::format("{} {} {}", whole ? "an integer" : "a number",
                                       strict ? "above" : "of at least", lo);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        const bool ok = CLI::detail::lexical_cast(text, v) && std::isfinite(v) &&
                        (strict ? v > lo : v >= lo) && (!whole || v == std::floor(v));
        return ok ? std::string() : fmt::format("expected {}, got {}", want, text);
      },
      fmt::format("{} {} {}", whole ? "INT" : "NUMBER", strict ? ">" : ">=", lo));
}
// A whole number from lo to hi, both included.
inline CLI::Validator integer_in(long lo, long hi) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        const bool ok = CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v >= lo &&
                        v <= hi && v == std::floor(v);
        return ok ? std::string()
                  : fmt::format("expected an integer from {} to {}, got {}", lo, hi, text);
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}
// A share above 0 and at most hi.
inline CLI::Validator share_up_to(double hi) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (CLI::detail::lexical_cast(text, v) && v > 0 && v <= hi) return {};
        return fmt::format("expected a share above 0 and at most {}, got {}", hi, text);
      },
      fmt::format("SHARE in (0, {}]", hi));
}
inline CLI::Validator positive_integer() { return number_from(0, true, true); }
inline CLI::Validator non_negative_integer() { return number_from(0, false, true); }
inline CLI::Validator non_negative_number() { return number_from(0, false, false); }

}  // namespace forge::cli
