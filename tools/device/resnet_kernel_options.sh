#!/usr/bin/env bash
# ResNet-50's two kernel options awaiting a GPU, in one call from a staged checkout:
# KernelTuning::batch_norm_finalize_in_stats (--bn_finalize_in_stats) and
# KernelTuning::sgd_one_launch (--sgd_one_launch), both off by default (docs/engine.md).
#   bash tools/device/resnet_kernel_options.sh [ROUNDS]
# First their GPU tests, then memcheck over both and racecheck over the batch norms' (blocks
# count arrivals on shared tickets), then ResNet-50 (tools/device/resnet50_variants.sh) with
# neither, each and both; then cuDNN's batch-norm fusions timed per convolution at b32.
set -uo pipefail
rounds=${1:-1}
[[ -f .stage/env.sh ]] && source .stage/env.sh
tests='*BatchNormFinalizeInStats*:*BatchNormLauncher*:*BatchNormGpu*:*BatchNormGraph*'
tests+=':*BatchNormKeepBits*:ResNetGpu*:SgdMulti*:*SixteenBit*:*ParameterCopies*'
timeout 240 reprise_gpu_tests --gtest_brief=1 --gtest_filter="$tests" 2>&1 | tail -n 4
echo "== compute-sanitizer --tool memcheck"
timeout 200 compute-sanitizer --tool memcheck --leak-check full reprise_gpu_tests --gtest_brief=1 \
  --gtest_filter='*BatchNormFinalizeInStats*:SgdMulti*' 2>&1 | tail -n 3
echo "== compute-sanitizer --tool racecheck"
timeout 150 compute-sanitizer --tool racecheck reprise_gpu_tests --gtest_brief=1 \
  --gtest_filter='*BatchNormFinalizeInStats*' 2>&1 | tail -n 3
bash "$(dirname "$0")/resnet50_variants.sh" "$rounds" \
  "neither|--bn_finalize_in_stats=false --sgd_one_launch=false" \
  "bn_finalize|--bn_finalize_in_stats=true --sgd_one_launch=false" \
  "sgd_one_launch|--bn_finalize_in_stats=false --sgd_one_launch=true" \
  "both|--bn_finalize_in_stats=true --sgd_one_launch=true"
# What cuDNN's batch-norm fusions (statistics epilogue, scale-bias-ReLU prologue) would cost or save
# per convolution at batch 32 (docs/benchmarks_resnet.md has batch 256).
echo "== ConvBnFusionTimingGpuTest at batch 32"
timeout 120 reprise_gpu_tests --gtest_also_run_disabled_tests \
  --gtest_filter='*ConvBnFusionTiming*B32*' 2>&1 | grep -vE '^\[ RUN|^\[       OK'
