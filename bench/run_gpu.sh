#!/usr/bin/env bash
# On a machine with a CUDA GPU: the CUDA tests, under compute-sanitizer's
# memcheck, synccheck and initcheck where it is installed; in a build with
# NCCL, the one-rank NCCL tests, also under memcheck (without API-error
# reports: NCCL's own start-up probes kernel images and reports errors it
# handles); then three runs of ckfmt-bench-gpu (pinned copy bandwidth, raw
# disk, GPU -> file save and file -> GPU load as fractions of min(copy,
# disk), the NCCL DistSave, async-save blocked time, a byte-plane save from
# the GPU against the same from host memory); then, where python3
# has torch with CUDA and safetensors, the side-by-side run on GPU tensors
# (bench/compare/compare.py --device cuda: ckfmt through its C ABI beside
# torch.save, DCP and safetensors, 2 GiB, 5 runs). The README's GPU tables
# come from it.
#
#   bench/run_gpu.sh [--dir DIR] [--size-mib 4096] [--runs 5]
#
# Arguments go to ckfmt-bench-gpu (--dir to compare.py too). Environment: BUILD_DIR (default build,
# built with the CUDA toolkit: see README "GPU tensors"). Exits 1 if a test
# or a sanitizer fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--size-mib 4096 --runs 5)
tests="$BUILD_DIR/tests/gpu/ckfmt_gpu_cuda_tests"
bench="$BUILD_DIR/bench/ckfmt-bench-gpu"
for f in "$tests" "$bench"; do
  [ -x "$f" ] || { echo "run_gpu: $f is missing: build with the CUDA toolkit first"; exit 1; }
done

nccl_tests="$BUILD_DIR/tests/gpu/ckfmt_gpu_nccl_tests"
c_api_tests="$BUILD_DIR/tests/ckfmt_c_api_device_tests"
echo "== CUDA tests"
"$tests"
echo "== C ABI device tests"
"$c_api_tests"
if [ -x "$nccl_tests" ]; then
  echo "== NCCL tests (one rank)"
  "$nccl_tests"
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_gpu: no GPU here (nvidia-smi -L fails): nothing measured"
  exit 0
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1 || true)
if [ -n "$sanitizer" ]; then
  for tool in memcheck synccheck initcheck; do
    echo "== CUDA tests under compute-sanitizer --tool $tool"
    "$sanitizer" --tool "$tool" --error-exitcode 9 "$tests" --gtest_brief=1
  done
  if [ -x "$nccl_tests" ]; then
    echo "== NCCL tests under compute-sanitizer --tool memcheck"
    "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 9 "$nccl_tests" --gtest_brief=1
  fi
else
  echo "== no compute-sanitizer here: skipped"
fi

for i in 1 2 3; do
  echo "== ckfmt-bench-gpu ${args[*]}, run $i of 3"
  "$bench" "${args[@]}"
done

dir_args=()
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[i]}" = --dir ] && dir_args=(--dir "${args[i + 1]}")
done
if python3 -c "import torch, safetensors; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "== side by side on GPU tensors: compare.py --device cuda"
  python3 bench/compare/compare.py --lib "$BUILD_DIR/engine/libckfmt.so" \
    --raw-tool "$BUILD_DIR/bench/ckfmt-bench-e2e" --device cuda --size-gib 2 --runs 5 "${dir_args[@]}"
else
  echo "== no python3 with torch (CUDA) and safetensors here: side by side skipped"
fi
