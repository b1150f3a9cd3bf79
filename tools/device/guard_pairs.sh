#!/usr/bin/env bash
# The non-finite guard's cost on the MLP 8x256 b32 TF32 whole step, measured in one process per
# run with the placement's level averaged out (StepLevelsGpuTest.DISABLED_MlpWholeStepGuardInOneProcess:
# six pairs of a guarded and an unguarded trainer, alternating rounds), for one or more builds of
# reprise_gpu_tests, their processes alternating on the same GPU in the same call:
#   bash tools/device/guard_pairs.sh ROUNDS GPU_TESTS [GPU_TESTS...]
# GUARD_PAIRS=Ensemble4 times the 4-model ensemble instead (DISABLED_Ensemble4WholeStepGuardInOneProcess).
# Prints every pair's line as it comes, then per build the median over its processes of the
# pairs' median difference (guarded - unguarded), in us and in % of the unguarded step.
set -uo pipefail
rounds=${1:?usage: guard_pairs.sh ROUNDS GPU_TESTS [GPU_TESTS...]}; shift
(($# > 0)) || { echo "usage: guard_pairs.sh ROUNDS GPU_TESTS [GPU_TESTS...]" >&2; exit 2; }
filter="StepLevelsGpuTest.DISABLED_${GUARD_PAIRS:-Mlp}WholeStepGuardInOneProcess"
lines=$(mktemp)
for ((r = 1; r <= rounds; ++r)); do
  for bin in "$@"; do
    echo "== round $r: $bin"
    "$bin" --gtest_also_run_disabled_tests --gtest_filter="$filter" 2>&1 |
      grep -E '^(pair|over|\[  FAILED)' | sed "s|^|$bin |" | tee -a "$lines"
  done
done
# "BIN over 6 pairs: ignore X ms, skip Y ms (+P%); median pair difference +D us (+Q%)"
awk '$2 == "over" {
       d = $(NF - 2); q = $NF; gsub(/[()%+]/, "", q); n[$1]++; us[$1, n[$1]] = d + 0; pc[$1, n[$1]] = q + 0
     }
  function median(a, bin, k,   i, j, t, v) {
    for (i = 1; i <= k; ++i) v[i] = a[bin, i]
    for (i = 2; i <= k; ++i) for (j = i; j > 1 && v[j - 1] > v[j]; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
  }
  END {
    for (bin in n) printf "summary %s over %d processes: guard %+.2f us (%+.2f%%), median of the processes\n",
                          bin, n[bin], median(us, bin, n[bin]), median(pc, bin, n[bin])
  }' "$lines"
rm -f "$lines"
