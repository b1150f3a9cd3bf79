#!/usr/bin/env bash
# The GPU suite's sanitizer round, from a staged checkout, in two device calls (a call runs at most
# 10 minutes; the three parts take about 13):
#   PARTS="main lanes" bash tools/device/sanitizer_round.sh      # about 5 minutes on an H100
#   PARTS=heavy bash tools/device/sanitizer_round.sh [LIMIT_S]   # LIMIT_S + about 30 s
# PARTS (default: all three, for a host without that limit) picks, in this order:
# 1. memcheck (--leak-check full) over the suite but the ResNet, GPT-2 and mirroring tests, 12
#    shards (about 3 minutes on an H100), then the tests that read the device's memory in use alone
#    (gpu_suite_sanitized.sh's default, less EXCLUDE);
# 2. memcheck over the ResNet, GPT-2 and mirroring tests, 12 shards, stopped at LIMIT_S (330; the
#    ResNet-18 verify, which never finished there at 200 steps, takes 8 under a sanitizer);
# 3. racecheck over the lane tests, 4 shards.
# Each part's tally is printed (gpu_suite_sanitized.sh); every shard's output travels back as one
# archive, $OUT/sanitizer_round.tgz (a device call brings back only a few files), and the CUDA API
# errors the sanitizer counts are listed by call and test in $OUT/sanitizer_api_errors.txt.
set -uo pipefail
limit=${1:-330}
parts=${PARTS:-main heavy lanes}
for part in $parts; do
  case $part in main|heavy|lanes) ;; *) echo "unknown part $part (main, heavy, lanes)" >&2; exit 2 ;; esac
done
has_part() { [[ " $parts " == *" $1 "* ]]; }
out=${OUT:-/tmp}
work=$(mktemp -d)
source "$(dirname "${BASH_SOURCE[0]}")/alone_tests.sh"  # $alone
heavy='*ResNet*:*Gpt2*:*Mirror*'
run_part() {  # NAME TOOL SHARDS LIMIT [FILTER] (none: the suite and its tests alone, less EXCLUDE)
  mkdir -p "$work/$1"
  echo "== $1: $2, $3 shards, $4 s, filter ${5:-the suite, less ${EXCLUDE:-nothing}}"
  OUT=$work/$1 bash tools/device/gpu_suite_sanitized.sh "$2" "$3" "$4" ${5:+"$5"} 2>&1 | tail -n 40
}
has_part main && EXCLUDE=$heavy run_part main memcheck 12 300
has_part heavy && run_part heavy memcheck 12 "$limit" "$heavy-$alone"
has_part lanes && run_part lanes racecheck 4 150 'LanesGpuTest.*:*/LanesGpuTest.*'
# Which API calls returned the errors the summaries count, and in which test.
for f in "$work"/*/sanitized_*.txt; do
  awk -v part="${f#"$work"/}" '/^\[ RUN/ {test = $NF} /Program hit/ {
    call = $0; sub(/.*CUDA API call to /, "", call)
    print part ": " test ": " $4 " from " call }' "$f"
done | sort | uniq -c > "$out/sanitizer_api_errors.txt"
echo "== CUDA API errors by call and test ($out/sanitizer_api_errors.txt):"
cat "$out/sanitizer_api_errors.txt"
tar czf "$out/sanitizer_round.tgz" -C "$work" .
