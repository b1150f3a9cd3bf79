#!/usr/bin/env bash
# ResNet-50's two kernel options awaiting a GPU, in one call from a staged checkout:
# KernelTuning::batch_norm_finalize_in_stats (--bn_finalize_in_stats) and
# KernelTuning::sgd_one_launch (--sgd_one_launch), both off by default (docs/engine.md).
#   bash tools/device/resnet_kernel_options.sh [ROUNDS]
# First their GPU tests, then memcheck over both and racecheck over the batch norms' (blocks
# count arrivals on shared tickets), then ResNet-50 NHWC, whole step captured, two lanes, at b32
# bfloat16, b32 TF32 and b256 bfloat16 with neither, each and both, alternating within each round:
# each row the step's median ms; then cuDNN's batch-norm fusions timed per convolution at b32.
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
shapes=(
  "r50 b32 bf16|--bf16 --batch 32 --iters 300 --warmup 20"
  "r50 b32 tf32|--batch 32 --iters 200 --warmup 20"
  "r50 b256 bf16|--bf16 --batch 256 --iters 20 --warmup 5"
)
variants=(
  "neither|--bn_finalize_in_stats=false --sgd_one_launch=false"
  "bn_finalize|--bn_finalize_in_stats=true --sgd_one_launch=false"
  "sgd_one_launch|--bn_finalize_in_stats=false --sgd_one_launch=true"
  "both|--bn_finalize_in_stats=true --sgd_one_launch=true"
)
for ((r = 1; r <= rounds; ++r)); do
  for s in "${shapes[@]}"; do
    for v in "${variants[@]}"; do
      line=$(timeout 200 reprise-bench --model resnet --depth 50 --classes 1000 --tf32 --layout nhwc \
        --mode graph --fusion on --inputs device --lanes 2 ${s#*|} ${v#*|} 2>/dev/null |
        grep -E '^ *graph')
      echo "round $r ${s%%|*} ${v%%|*}: $line"
    done
  done
done
# What cuDNN's batch-norm fusions (statistics epilogue, scale-bias-ReLU prologue) would cost or save
# per convolution at batch 32 (docs/benchmarks_resnet.md has batch 256).
echo "== ConvBnFusionTimingGpuTest at batch 32"
timeout 120 reprise_gpu_tests --gtest_also_run_disabled_tests \
  --gtest_filter='*ConvBnFusionTiming*B32*' 2>&1 | grep -vE '^\[ RUN|^\[       OK'
