#!/usr/bin/env bash
# A change kept as a patch, tried against the build it changes in one device call, from a checkout
# staged by tools/device/stage_trial.sh (.stage/bin: the change's tools; .stage/old: HEAD's):
#   TESTS=GTEST_FILTER [PAIRS="Mlp Ensemble4"] [COST=whole] [ROUNDS=2] [SUITE=1] \
#     bash tools/device/patch_trial.sh
# In order, each part skipped where its variable is empty: the change's TESTS, then the same under
# compute-sanitizer's memcheck (--leak-check full); the guard's in-process pairs for each workload
# in PAIRS (guard_pairs.sh, ROUNDS processes of each build alternating); guard_cost.sh's workloads
# whose names contain COST, each build in turn for ROUNDS rounds; the change's whole GPU suite
# (SUITE=1: gpu_suite_sharded.sh, 6 shards). Prints each part's tally or summary lines; every
# output travels back in one archive, $OUT/trial.tgz (a call brings back only a few files).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
new=.stage/bin old=.stage/old
for f in "$new/reprise_gpu_tests" "$old/reprise_gpu_tests" "$new/reprise-bench" "$old/reprise-bench"; do
  [[ -x $f ]] || { echo "no $f: run tools/device/stage_trial.sh PATCH first" >&2; exit 2; }
done
source .stage/env.sh
out=${OUT:-/tmp}
logs=$(mktemp -d)
rounds=${ROUNDS:-2}
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader |
  tee "$logs/gpu.txt"
if [[ -n ${TESTS:-} ]]; then
  echo "== the change's tests: $TESTS"
  "$new/reprise_gpu_tests" --gtest_brief=1 --gtest_filter="$TESTS" > "$logs/tests.txt" 2>&1
  grep -E '^\[  FAILED  \]|^GPU tests:' "$logs/tests.txt" | sort -u
  echo "== under memcheck"
  compute-sanitizer --tool memcheck --leak-check full "$new/reprise_gpu_tests" --gtest_brief=1 \
    --gtest_filter="$TESTS" > "$logs/memcheck.txt" 2>&1
  echo "exit $?"
  grep -E '^\[  FAILED  \]|^GPU tests:|ERROR SUMMARY|LEAK SUMMARY' "$logs/memcheck.txt" | sort -u
fi
for workload in ${PAIRS:-}; do
  echo "== the guard's pairs: $workload"
  GUARD_PAIRS=$workload bash "$here/guard_pairs.sh" "$rounds" "$old/reprise_gpu_tests" \
    "$new/reprise_gpu_tests" > "$logs/pairs_$workload.txt" 2>&1
  grep -E '^summary|FAILED' "$logs/pairs_$workload.txt"
done
if [[ -n ${COST:-} ]]; then
  for ((r = 1; r <= rounds; ++r)); do
    for build in old bin; do
      echo "== guard_cost round $r: .stage/$build"
      GUARD_ONLY=$COST bash "$here/guard_cost.sh" ".stage/$build/reprise-bench" 1 \
        > "$logs/cost_${r}_$build.txt" 2>&1
      grep '^summary' "$logs/cost_${r}_$build.txt"
    done
  done
fi
if [[ ${SUITE:-0} == 1 ]]; then
  echo "== the change's GPU suite"
  OUT=$logs bash "$here/gpu_suite_sharded.sh" 6 240 > "$logs/suite.txt" 2>&1
  grep -E '^suite|^\[  FAILED  \]' "$logs/suite.txt" | sort -u
fi
tar czf "$out/trial.tgz" -C "$logs" .
rm -rf "$logs"
echo "every output: $out/trial.tgz"
