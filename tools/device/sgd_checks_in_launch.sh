#!/usr/bin/env bash
# The non-finite guard's check in the SGD launch (KernelTuning::sgd_checks_in_launch,
# src/passes/fuse_checked_sgd.h) and the column sums of 32-row blocks on the GPU host: their GPU
# tests, plain and under compute-sanitizer memcheck and synccheck, then every workload with the
# check in two launches ("old", --sgd_checks_in_launch=false) and in the SGD launch (the default,
# "new"), alternating in the same call (tools/device/compare_engines.sh's rows).
#   bash tools/device/sgd_checks_in_launch.sh [ROUNDS] [ONLY]   (from a checkout with .stage;
#   ONLY as compare_engines.sh's COMPARE_ONLY, e.g. "mlp4x1024" or "r50")
# Output lands in $OUT/sgd_checks_*.txt (or /tmp) and is summarised on stdout.
set -uo pipefail
rounds=${1:-2}
out=${OUT:-/tmp}
[[ -f .stage/env.sh ]] && source .stage/env.sh
# The column sums' cases are parameterized (TypesAndShapes/ColumnSumGpuTest...): hence the stars.
tests='SgdChecksInLaunchGpuTest.*:NonFiniteGuardGpuTest.*:SgdMultiGpuTest.*:*ColumnSumGpuTest.*:*FusedChain*'
reprise_gpu_tests --gtest_filter="$tests" > "$out/sgd_checks_tests.txt" 2>&1
echo "tests: exit $?"; grep -E '^\[  (PASSED|FAILED|  SKIPPED) ' "$out/sgd_checks_tests.txt"
for tool in memcheck synccheck; do
  leak=(); [[ $tool == memcheck ]] && leak=(--leak-check full)
  compute-sanitizer --tool "$tool" "${leak[@]}" --error-exitcode 9 reprise_gpu_tests \
    --gtest_filter='SgdChecksInLaunchGpuTest.*' > "$out/sgd_checks_$tool.txt" 2>&1
  echo "$tool: exit $?"; grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/sgd_checks_$tool.txt"
done
apart=$(mktemp -d)/reprise-bench-check-apart
printf '#!/usr/bin/env bash\nexec reprise-bench --sgd_checks_in_launch=false "$@"\n' > "$apart"
chmod +x "$apart"
COMPARE_ONLY=${2:-} bash tools/device/compare_engines.sh "$apart" "$(command -v reprise-bench)" \
  "$rounds" | tee "$out/sgd_checks_bench.txt"
