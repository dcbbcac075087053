#!/usr/bin/env bash
# README quick start, command 1: install what is missing, build, run the
# main job end to end:
#  1. the distributed job: 4 MPI ranks hold FSDP1- and FSDP2-sharded model
#     and AdamW state, save each layout into a flattened and a parallel
#     file, verify them, resume each on 3 ranks into state dicts that lack
#     the optimizer state, and check every value bitwise;
#  2. the single-process job: a ~500 MB bf16 transformer with fp32 AdamW
#     state, data-loader and RNG state, saved, `ckfmt verify`-ed and
#     `ckfmt inspect`-ed, loaded into a dict holding only the model (the load
#     report shows what was reconstructed), checked bitwise.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ranks=${CKFMT_MAIN_JOB_RANKS:-4}
mpirun --allow-run-as-root --oversubscribe -np "$ranks" build/tools/ckfmt-dist-main-job
build/tools/ckfmt-main-job "$@"
