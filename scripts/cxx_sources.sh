#!/usr/bin/env bash
# The C++ sources the house style covers (`make format` rewrites them, test_format.sh checks
# them), one per line: every .cpp, .h and .inc under src, tests and bench. From git where the
# tree is a checkout, else (a copy without its history) from the folders themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .git ] || [ -f .git ]; then
  git ls-files -- 'src/*.cpp' 'src/*.h' 'src/*.inc' 'tests/*.cpp' 'tests/*.h' 'tests/*.inc' \
    'bench/*.cpp' 'bench/*.h' 'bench/*.inc'
else
  find src tests bench -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.inc' \) | sort
fi
