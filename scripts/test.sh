#!/usr/bin/env bash
# README quick start, command 2: install what is missing, build, run the
# whole test suite. .ci/run runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
