#!/usr/bin/env bash
# KernelTuning::residual_sums_in_batch_norm (--residual_sums_in_bn, off by default; docs/models.md)
# in one call from a staged checkout:
#   bash tools/device/residual_sums.sh [ROUNDS]
# Its GPU tests, compute-sanitizer's memcheck over them and racecheck over the op's cases, then
# ResNet-50 NHWC, whole step captured, two lanes, at b32 bfloat16, b32 TF32 and b256 bfloat16 with
# the sums in place (the default) and in the batch-norm gradients, alternating within each round:
# each row the step's median ms.
set -uo pipefail
rounds=${1:-2}
[[ -f .stage/env.sh ]] && source .stage/env.sh
tests='ResNetSumsInBatchNormGpuTest.*:BatchNormGraphGpuTest.*:ResNetConvSumsApartGpuTest.*'
timeout 240 reprise_gpu_tests --gtest_brief=1 --gtest_filter="$tests" 2>&1 | tail -n 6
echo "== compute-sanitizer --tool memcheck"
timeout 200 compute-sanitizer --tool memcheck --leak-check full reprise_gpu_tests --gtest_brief=1 \
  --gtest_filter='BatchNormGraphGpuTest.*:ResNetSumsInBatchNormGpuTest.*Bf16*' 2>&1 | tail -n 3
echo "== compute-sanitizer --tool racecheck"
timeout 150 compute-sanitizer --tool racecheck reprise_gpu_tests --gtest_brief=1 \
  --gtest_filter='BatchNormGraphGpuTest.*' 2>&1 | tail -n 3
shapes=(
  "r50 b32 bf16|--bf16 --batch 32 --iters 300 --warmup 20"
  "r50 b32 tf32|--batch 32 --iters 200 --warmup 20"
  "r50 b256 bf16|--bf16 --batch 256 --iters 20 --warmup 5"
)
for ((r = 1; r <= rounds; ++r)); do
  for s in "${shapes[@]}"; do
    for v in "in_place|--residual_sums_in_bn=false" "in_batch_norm|--residual_sums_in_bn=true"; do
      line=$(timeout 200 reprise-bench --model resnet --depth 50 --classes 1000 --tf32 --layout nhwc \
        --mode graph --fusion on --inputs device --lanes 2 ${s#*|} ${v#*|} 2>/dev/null |
        grep -E '^ *graph')
      echo "round $r ${s%%|*} ${v%%|*}: $line"
    done
  done
done
