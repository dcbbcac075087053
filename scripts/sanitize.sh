#!/usr/bin/env bash
# The test suite under GCC's sanitizers. The whole suite is not part of CI:
# on 2 cores a build takes about 8 minutes and a run 2, which would more
# than double CI's time. Run it after changes to parsers, codecs, I/O or
# threading; it found an undefined shift in the literals coder that no
# plain test could. CI runs the fuzz replays alone (`replays`: a 4-minute
# build, a 10-second run), so that every parser of untrusted bytes meets
# its seeds' mutants under the sanitizers on every change.
#
#   scripts/sanitize.sh           AddressSanitizer + UndefinedBehaviorSanitizer,
#                                 in ./build-san
#   scripts/sanitize.sh replays   the same, building and running only the
#                                 fuzz replays (ctest -L fuzz), in
#                                 ./build-san-replays with line tables only
#                                 (-g1: reports keep file and line but not
#                                 inlined frames; a fifth less build time)
#   scripts/sanitize.sh thread    ThreadSanitizer, in ./build-tsan (data races
#                                 among the I/O, codec and copy threads)
#
# A report fails the test that triggered it. Leaks are checked everywhere
# but in the MPI tests, where LeakSanitizer reports OpenMPI's and hwloc's
# own allocations; ThreadSanitizer skips the MPI tests, whose ranks are
# processes. The package test builds a consumer without the sanitizer
# runtime, and the Python binding's loads the library into a python3
# without it, so both are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
CKFMT_SETUP_BUILD=0 scripts/setup.sh  # packages; GCC ships the sanitizers' runtimes

if [ "${1:-}" = thread ]; then
  dir=build-tsan
  flags="-fsanitize=thread -fno-omit-frame-pointer"
else
  dir=build-san
  flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
fi
target=all
debug_info=-g
if [ "${1:-}" = replays ]; then
  dir=build-san-replays
  target=fuzz_replays
  debug_info=-g1
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCKFMT_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="-O1 $flags" -DCMAKE_CXX_FLAGS_DEBUG="$debug_info" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$dir" -j "$(nproc)" --target "$target"

run() { ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 900 "$@"; }
export UBSAN_OPTIONS=print_stacktrace=1
if [ "$target" = fuzz_replays ]; then
  ASAN_OPTIONS=detect_leaks=1 run -L fuzz
elif [ "$dir" = build-tsan ]; then
  TSAN_OPTIONS=halt_on_error=1 run -LE 'mpi|python' -E '^package\.'
else
  ASAN_OPTIONS=detect_leaks=1 run -LE 'mpi|python' -E '^package\.'
  ASAN_OPTIONS=detect_leaks=0 run -L mpi
fi
