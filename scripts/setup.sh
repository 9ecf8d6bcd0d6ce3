#!/usr/bin/env bash
# Installs whatever is missing, then builds forge in Release. Called by `make train`,
# `make test` and `make build`; safe to run again (it only installs what is absent).
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  build-essential cmake pkg-config git ccache clang-format
  libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenblas-dev libsleef-dev libdnnl-dev libpcre2-dev
  libopenmpi-dev openmpi-bin
  python3-torch python3-numpy python3-venv
  fortunes fortunes-min
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The project's own Python environment, from the python3 on PATH.
REQ=reference/requirements.txt
STAMP=.venv/.forge-requirements
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
if ! cmp -s "$REQ" "$STAMP"; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$STAMP"
fi

if [ "${FORGE_SETUP_NO_BUILD:-0}" != 1 ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)"
fi
