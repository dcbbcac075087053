#!/usr/bin/env bash
# Installs what ckfmt needs to build and test (idempotent), then configures
# and builds it in ./build (not with CKFMT_SETUP_BUILD=0). Both README
# quick-start commands call this.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ ninja-build pkg-config
          liburing-dev libzstd-dev libxxhash-dev libdeflate-dev
          libflatbuffers-dev flatbuffers-compiler
          libgtest-dev libbenchmark-dev
          libcli11-dev nlohmann-json3-dev libfmt-dev
          libopenmpi-dev openmpi-bin
          python3-numpy python3-xxhash python3-zstandard)  # tests/spec
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# CKFMT_SETUP_BUILD=0: the packages only (scripts/sanitize.sh builds its own).
[ "${CKFMT_SETUP_BUILD:-1}" = 0 ] && exit 0
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" >/dev/null
cmake --build build -j "$(nproc)"
