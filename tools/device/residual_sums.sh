#!/usr/bin/env bash
# KernelTuning::residual_sums_in_batch_norm (--residual_sums_in_bn, off by default; docs/models.md)
# and residual_sums_min_elements (--residual_sums_min_elements) in one call from a staged checkout:
#   bash tools/device/residual_sums.sh [ROUNDS]
# Its GPU tests, compute-sanitizer's memcheck over them and racecheck over the op's cases, then
# ResNet-50 (tools/device/resnet50_variants.sh) with the sums in place (the default), in the
# batch-norm gradients, and there only from a size on (ResNet-50 at batch 32: block inputs of
# 25.7M, 12.8M, 6.4M and 3.2M elements; at 256, eight times those).
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
sums='--residual_sums_in_bn=true --residual_sums_min_elements'
bash "$(dirname "$0")/resnet50_variants.sh" "$rounds" "in_place|--residual_sums_in_bn=false" \
  "in_batch_norm|$sums 0" "from_4M|$sums 4000000" "from_8M|$sums 8000000" \
  "from_16M|$sums 16000000"
