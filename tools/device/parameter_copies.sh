#!/usr/bin/env bash
# The parameters' 16-bit copies kept between steps and written by AdamW
# (KernelTuning::update_writes_parameter_copies, src/passes/parameter_copies.h) on the GPU host:
# their GPU tests, plain and under compute-sanitizer memcheck, then GPT-2 124M's step at both
# headline shapes with the copies cast at every step ("old", --update_copies=false) and kept (the
# default, "new"), alternating in the same call (tools/device/compare_engines.sh's rows).
#   bash tools/device/parameter_copies.sh [ROUNDS]      (from a checkout with .stage)
# Output lands in $OUT/parameter_copies_*.txt (or /tmp) and is summarised on stdout.
set -uo pipefail
rounds=${1:-2}
out=${OUT:-/tmp}
[[ -f .stage/env.sh ]] && source .stage/env.sh
tests='ParameterCopiesGpuTest.*'
reprise_gpu_tests --gtest_filter="$tests" > "$out/parameter_copies_tests.txt" 2>&1
echo "tests: exit $?"; grep -E '^\[  (PASSED|FAILED|  SKIPPED) ' "$out/parameter_copies_tests.txt"
compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 reprise_gpu_tests \
  --gtest_filter="$tests" > "$out/parameter_copies_memcheck.txt" 2>&1
echo "memcheck: exit $?"; grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/parameter_copies_memcheck.txt"
cast=$(mktemp -d)/reprise-bench-cast-copies
printf '#!/usr/bin/env bash\nexec reprise-bench --update_copies=false "$@"\n' > "$cast"
chmod +x "$cast"
COMPARE_ONLY=gpt2 bash tools/device/compare_engines.sh "$cast" "$(command -v reprise-bench)" \
  "$rounds" | tee "$out/parameter_copies_bench.txt"
