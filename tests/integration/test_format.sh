#!/usr/bin/env bash
# The C++ sources are as `make format` writes them: clang-format (Debian 12's, which
# scripts/setup.sh installs) with the repository's .clang-format, 100 columns. The house style
# is checked here, not hoped for; a missing clang-format fails the test.
# Usage: bash test_format.sh FORGE_BINARY SOURCE_DIR
set -euo pipefail
SRC=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v clang-format >/dev/null || fail "clang-format is missing (scripts/setup.sh installs it)"
cd "$SRC"
mapfile -t files < <(scripts/cxx_sources.sh)  # the list `make format` rewrites
((${#files[@]} > 100)) || fail "found ${#files[@]} sources under $SRC, expected more than 100"
clang-format --dry-run --Werror "${files[@]}" ||
  fail "sources differ from clang-format's output: run \`make format\`"
echo "ok: ${#files[@]} sources as $(clang-format --version | head -n 1) writes them"
