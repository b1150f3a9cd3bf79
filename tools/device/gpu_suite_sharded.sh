#!/usr/bin/env bash
# The whole GPU suite on one GPU in about a third of its serial time: SHARDS processes of
# reprise_gpu_tests run side by side (gtest sharding), then the tests that read the device's
# global memory use (cudaMemGetInfo, which the other processes would disturb) run alone. Cooperative
# kernels share the GPU with the other shards: a test whose bits change under that contention
# shows a race that a serial run may hide.
#   bash tools/device/gpu_suite_sharded.sh [SHARDS] [LIMIT_S]     (from a checkout with .stage)
# Each shard's output lands in $OUT/gpu_suite_shard_<i>.txt (or /tmp), every test's lines kept;
# failures, the tallies and, for a shard stopped at LIMIT_S, the test it was in and how many had
# started are printed at the end.
set -uo pipefail
shards=${1:-3}; limit=${2:-480}
out=${OUT:-/tmp}
[[ -f .stage/env.sh ]] && source .stage/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/alone_tests.sh"  # $alone
start=$SECONDS
for ((i = 0; i < shards; ++i)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$limit" reprise_gpu_tests \
    --gtest_filter="-$alone" > "$out/gpu_suite_shard_$i.txt" 2>&1 &
done
wait
timeout 120 reprise_gpu_tests --gtest_brief=1 --gtest_filter="$alone" > "$out/gpu_suite_alone.txt" 2>&1
for f in "$out"/gpu_suite_shard_*.txt "$out/gpu_suite_alone.txt"; do
  echo "== $(basename "$f"): $(grep -E '^GPU tests:|tests? from .* ran' "$f" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$f" | sort -u | head -20
  if ! tail -n 1 "$f" | grep -qE 'GPU tests:'; then
    # Where a shard stopped (each test's [ RUN ] line is kept for this): the test it was in.
    echo "   (no summary line: stopped at the ${limit} s limit or crashed) inside" \
      "$(grep -E '^\[ RUN      \]' "$f" | tail -n 1 | sed 's/^\[ RUN      \] //'):" \
      "$(grep -cE '^\[ RUN      \]' "$f") of $(grep -oE 'Running [0-9]+ tests' "$f" | grep -oE '[0-9]+')" \
      "tests started"
  fi
done
# The whole suite's tally, summed over the shards' summary lines ("GPU tests: R ran, S skipped[, F FAILED]").
cat "$out"/gpu_suite_shard_*.txt "$out/gpu_suite_alone.txt" | grep -hE '^GPU tests:' |
  awk '{ran += $3; skipped += $5; for (i = 6; i <= NF; ++i) if ($i ~ /^FAILED/) failed += $(i - 1)}
       END {printf "suite: %d ran, %d skipped, %d failed\n", ran, skipped, failed}'
echo "suite wall time: $((SECONDS - start)) s"
