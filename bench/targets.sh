#!/usr/bin/env bash
# Prints the speed targets (issue "Speed") against one bench/run_all.sh run:
# each row's figure, what is required, and whether it holds. Reads the
# outputs run_all.sh leaves in $BUILD_DIR/bench: e2e.txt (the CKFMT_E2E
# line), micro.txt (codec ratios) and compare.txt (side by side); a part
# that did not run shows as n/a. Figures come with three decimals and are
# judged as printed: with two, a 0.946 printed as 0.95 passed ">= 0.95".
#
#   bench/targets.sh [DIR]        # DIR: default build/bench
set -euo pipefail
dir=${1:-${BUILD_DIR:-build}/bench}

e2e=$(grep -h '^CKFMT_E2E ' "$dir/e2e.txt" 2>/dev/null | tail -n 1 || true)
val() {  # val KEY: a CKFMT_E2E field
  tr ' ' '\n' <<<"$e2e" | sed -n "s/^$1=//p" || true
}
speedup() {  # speedup SECTION OTHER OP: a ratio from compare.txt's speed-up blocks
  awk -v sec="$1" -v other="$2" -v op="$3" '
    /speed-up/ { in_sec = index($0, sec) == 1 }
    in_sec && $1 == "vs" && $2 == other {
      for (i = 3; i < NF; i++) if ($i == op) { v = $(i + 1); sub(/x$/, "", v); print v; exit }
    }' "$dir/compare.txt" 2>/dev/null || true
}
micro_ratio() {  # micro_ratio DATA: the byte-plane ratio of micro benchmark data kind DATA
  grep -h "^BM_EncodeChunk/codec:2/data:$1 " "$dir/micro.txt" 2>/dev/null |
    sed -n 's/.*ratio=\([0-9.]*\).*/\1/p' | head -n 1 | awk '{ printf "%.3f\n", $1 }' || true
}
checksum_cost=$(sed -n 's/.*checksum cost on load: \([0-9.]*\)x.*/\1/p' "$dir/compare.txt" 2>/dev/null || true)
fp32_ratio=$( { micro_ratio 1; micro_ratio 2; } | sort -n | head -n 1)

row() {  # row TARGET VALUE OP BOUND
  local met=n/a
  if [ -n "$2" ]; then
    met=$(awk -v v="$2" -v op="$3" -v b="$4" 'BEGIN {
      ok = (op == ">=" && v >= b) || (op == ">" && v > b) || (op == "<=" && v <= b)
      print ok ? "met" : "MISSED" }')
  fi
  printf '%-62s %8s   %-7s %s\n' "$1" "${2:-n/a}" "$3 $4" "$met"
}

printf '%-62s %8s   %-7s %s\n' "target (paired = median over runs of figure / its baseline)" "figure" "needs" ""
row "1 uncompressed save / raw write, paired" "$(val save_none_paired)" ">=" 0.95
row "1 uncompressed load / raw read of the file, paired" "$(val load_none_paired)" ">=" 0.95
row "1 page-cache-warm load / memcpy" "$(val warm_load_vs_memcpy)" ">=" 0.9
row "2 save: torch.save time / ckfmt time" "$(speedup ckfmt\ speed 'torch.save' save)" ">=" 3
row "2 save: DCP time / ckfmt time" "$(speedup ckfmt\ speed dcp save)" ">=" 3
row "2 save: DCP time / ckfmt byte-plane time" "$(speedup 'ckfmt byte-plane' dcp save)" ">=" 3
row "2 load: torch.load time / ckfmt time" "$(speedup ckfmt\ speed 'torch.save' load)" ">=" 2
row "2 load: DCP time / ckfmt time" "$(speedup ckfmt\ speed dcp load)" ">=" 2
row "2 load: safetensors time / ckfmt time" "$(speedup ckfmt\ speed safetensors load)" ">" 1
row "3 async save: caller blocked / one memcpy of the state" "$(val async_blocked_vs_memcpy)" "<=" 1.2
row "4 byte-plane size reduction, bf16 weights" "$(micro_ratio 0)" ">=" 1.35
row "4 byte-plane size reduction, fp32 moments (lower of two)" "$fp32_ratio" ">=" 1.15
row "4 byte-plane save, logical bytes / raw write, paired" "$(val save_byteplane_zstd_paired)" ">" 1
row "4 byte-plane load, logical bytes / raw read, paired" "$(val load_byteplane_zstd_paired)" ">" 1
row "5 load with checksums / load without (time)" "$checksum_cost" "<=" 1.05
row "5 ckfmt verify / raw read, uncompressed file, paired" "$(val verify_none_paired)" ">=" 0.95
row "5 ckfmt verify / raw read, byte-plane file, paired" "$(val verify_byteplane_zstd_paired)" ">=" 0.95
row "5 ckfmt verify / raw read, zstd file, paired" "$(val verify_zstd_paired)" ">=" 0.95
echo "  (--checksums-only, which decodes nothing, / raw read, paired: zstd file" \
     "$(val verify_sums_zstd_paired), byte-plane file $(val verify_sums_byteplane_zstd_paired))"
echo "  (raw read with every core busy / idle raw read, paired: $(val raw_read_busy_paired)," \
     "the host taking $(val raw_read_busy_steal) cores meanwhile;" \
     "loads and verifies that decode on every core get no more from this disk)"
echo "  (verify of the zstd file: $(val verify_zstd_cores) cores busy, $(val verify_zstd_steal)" \
     "taken by the host; where the two add up to the core count, the verify had every core it got)"
echo "  (raw read while one core copies memory of its own / idle raw read, paired:" \
     "$(val raw_read_copying_paired); what any pass over memory takes from this disk)"
echo "  (raw read hashing every block on every core / idle raw read, paired:" \
     "$(val raw_read_hashed_paired); what verifies and loads that check every byte can expect)"
echo "  (in-place load / raw read of the file into the load's own tensors, paired:" \
     "$(val load_none_vs_raw_into_tensors_paired); that read gets $(val raw_read_into_tensors) GiB/s" \
     "against the raw read's $(val raw_read_none) into huge pages)"
echo "6 bounded memory: extra RSS save $(val save_extra_rss_mib) MiB, load $(val load_extra_rss_mib) MiB" \
     "here; for 1 vs 8 GiB states run ckfmt-bench-e2e --one-copy --size-gib 1 and 8 (README)"
