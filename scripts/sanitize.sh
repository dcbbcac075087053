#!/usr/bin/env bash
# The whole test suite under GCC's AddressSanitizer and
# UndefinedBehaviorSanitizer, built in ./build-san. A report fails the test
# that triggered it (UBSan does not recover). Not part of CI: on 2 cores
# the build takes about 8 minutes and the run 2, which would more than
# double CI's time. Run it after changes to parsers, codecs or I/O; it
# found an undefined shift in the literals coder that no plain test could.
#
# Leaks are checked everywhere but in the MPI tests, where LeakSanitizer
# reports OpenMPI's and hwloc's own allocations. The package test builds a
# consumer without the sanitizer runtime, so it is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
CKFMT_SETUP_BUILD=0 scripts/setup.sh  # packages; GCC ships both sanitizers' runtimes

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCKFMT_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="-O1 $flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build build-san -j "$(nproc)"

export UBSAN_OPTIONS=print_stacktrace=1
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-san --output-on-failure -j "$(nproc)" \
  --timeout 900 -LE mpi -E '^package\.'
ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-san --output-on-failure -j "$(nproc)" \
  --timeout 900 -L mpi
