#!/usr/bin/env bash
# README quick start, command 2: install what is missing, build, run the
# whole test suite. .ci/run runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
# The parsers of untrusted bytes once more, under ASan and UBSan: a read out
# of bounds that happens not to crash passes the plain build.
scripts/sanitize.sh replays
