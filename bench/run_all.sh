#!/usr/bin/env bash
# Builds and runs ckfmt's benchmarks: the end-to-end save/load benchmark
# (raw disk bandwidth, ckfmt save/load, table at the end and a grep-able
# CKFMT_E2E line), the micro benchmarks, and the side-by-side comparison
# with torch.save, DCP and safetensors plus the real-weights ratios
# (bench/compare/run.sh, in its own venv; skipped if torch cannot be had).
#
#   bench/run_all.sh                         # 2 GiB state, 5 runs (a few minutes)
#   bench/run_all.sh --size-gib 0.25 --runs 2   # quick
#   bench/run_all.sh --dir /mnt/nvme/tmp     # measure another disk
#
# Arguments go to ckfmt-bench-e2e. Environment: BUILD_DIR (default build; it
# is configured as Release if it does not exist yet), MICRO_ARGS (arguments
# for ckfmt_micro_bench, e.g. "--benchmark_filter=Zstd"), SKIP_MICRO=1,
# SKIP_COMPARE=1. The comparison gets --dir, --size-gib and --runs too.
# The outputs are also written to $BUILD_DIR/bench/*.txt; the last block
# checks them against the speed targets (bench/targets.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target ckfmt-bench-e2e ckfmt_micro_bench

build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
echo "== build type: ${build_type:-?}; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== end-to-end benchmark: $BUILD_DIR/bench/ckfmt-bench-e2e $*"
"$BUILD_DIR/bench/ckfmt-bench-e2e" "$@" | tee "$BUILD_DIR/bench/e2e.txt"

if [ "${SKIP_MICRO:-0}" != 1 ]; then
  echo
  echo "== micro benchmarks: $BUILD_DIR/bench/ckfmt_micro_bench ${MICRO_ARGS:-}"
  # shellcheck disable=SC2086
  "$BUILD_DIR/bench/ckfmt_micro_bench" ${MICRO_ARGS:-} | tee "$BUILD_DIR/bench/micro.txt"
fi

if [ "${SKIP_COMPARE:-0}" != 1 ]; then
  compare_args=()
  args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --dir | --size-gib | --runs) compare_args+=("${args[i]}" "${args[i + 1]:-}") ;;
    esac
  done
  echo
  echo "== side by side: bench/compare/run.sh ${compare_args[*]}"
  # It needs the shared library and the CLI of this build.
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target ckfmt ckfmt_c
  BUILD_DIR="$BUILD_DIR" bench/compare/run.sh "${compare_args[@]}" | tee "$BUILD_DIR/bench/compare.txt"
fi

echo
echo "== summary"
# The table is the last block of the e2e output, from its header line on.
sed -n '/^ckfmt-bench-e2e: .* logical state/,$p' "$BUILD_DIR/bench/e2e.txt"

echo
echo "== targets (bench/targets.sh $BUILD_DIR/bench)"
bench/targets.sh "$BUILD_DIR/bench"
