#!/usr/bin/env bash
# The GPU suite under compute-sanitizer, sharded like gpu_suite_sharded.sh: TOOL is memcheck (with
# --leak-check full) or racecheck; FILTER picks the tests (default: all, the memory-use tests alone
# after the shards; EXCLUDE, a gtest pattern list, leaves more out of that default). Each shard
# stops at LIMIT_S; its output says which test it had reached, so a partial run still says what
# it covered.
#   [EXCLUDE=...] bash tools/device/gpu_suite_sanitized.sh TOOL [SHARDS] [LIMIT_S] [FILTER]
# Output per shard in $OUT/sanitized_<tool>_<i>.txt; the sanitizer's summaries and the tallies
# are printed at the end.
set -uo pipefail
tool=${1:?memcheck or racecheck}; shards=${2:-8}; limit=${3:-480}
# The tests that read the device's memory in use (which the other shards disturb) run alone after
# the shards, as in gpu_suite_sharded.sh.
source "$(dirname "${BASH_SOURCE[0]}")/alone_tests.sh"  # $alone
filter=${4:-*-$alone${EXCLUDE:+:$EXCLUDE}}
out=${OUT:-/tmp}
[[ -f .stage/env.sh ]] && source .stage/env.sh
case $tool in
  memcheck) flags=(--tool memcheck --leak-check full) ;;
  racecheck) flags=(--tool racecheck --racecheck-report all) ;;
  *) echo "unknown tool $tool" >&2; exit 2 ;;
esac
# Tests whose timing checks mean nothing there skip them; under racecheck, which does not support
# device-side launches, so do the device-launched cases (tests/gpu/gpu_test_util.h).
export REPRISE_UNDER_COMPUTE_SANITIZER=$tool
start=$SECONDS
for ((i = 0; i < shards; ++i)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$limit" compute-sanitizer "${flags[@]}" \
    --print-limit 20 --error-exitcode 99 reprise_gpu_tests --gtest_filter="$filter" \
    > "$out/sanitized_${tool}_$i.txt" 2>&1 &
done
wait
parts=$shards
if [[ -z ${4:-} ]]; then
  timeout "$limit" compute-sanitizer "${flags[@]}" --print-limit 20 --error-exitcode 99 \
    reprise_gpu_tests --gtest_filter="$alone" > "$out/sanitized_${tool}_$shards.txt" 2>&1
  parts=$((shards + 1))
fi
ran=0; done_all=1
for ((i = 0; i < parts; ++i)); do
  f="$out/sanitized_${tool}_$i.txt"
  started=$(grep -c '^\[ RUN      \]' "$f"); finished=$(grep -cE '^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$f")
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$f" | tr '\n' ' ')
  echo "== part $i: $started started, $finished finished; $(grep -E '^GPU tests:' "$f" | tr '\n' ' ') ${summary:-(no sanitizer summary: stopped at the ${limit} s limit)}"
  grep -E '^\[  FAILED  \]|Invalid|Race reported|Leaked [0-9]+ bytes' "$f" | sort | uniq -c | head -10
  [[ -z $summary ]] && { done_all=0; echo "   reached: $(grep '^\[ RUN      \]' "$f" | tail -n 1)"; }
  ran=$((ran + finished))
done
echo "tests finished under $tool: $ran; every shard complete: $done_all; wall time $((SECONDS - start)) s"
