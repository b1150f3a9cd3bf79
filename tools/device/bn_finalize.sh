#!/usr/bin/env bash
# The batch norms' finalize in their statistics kernels (KernelTuning::batch_norm_finalize_in_stats,
# docs/engine.md) on one GPU in one call, from a staged checkout:
#   bash tools/device/bn_finalize.sh [ROUNDS] [TIMELINE]
# First its GPU tests (the launchers' bits against the finalize kernels' and float64, the ops
# against the CPU reference, ResNet's steps), then memcheck and racecheck over the launcher test
# (the last block's flag lives in shared memory), then ResNet-50 NHWC, whole step captured,
# two lanes, b32 bfloat16, b32 TF32 and b256 bfloat16, with the finalize launched apart and in the
# statistics kernels alternating in each round: each row the step's median ms. TIMELINE (a count)
# adds, after the rounds, both forms' b32 bfloat16 launch spans by kind and their longest launches.
set -uo pipefail
rounds=${1:-2}
timeline=${2:-0}
[[ -f .stage/env.sh ]] && source .stage/env.sh
tests='*BatchNormFinalizeInStats*:*BatchNormLauncher*:*BatchNormGpu*:*BatchNormGraph*'
tests+=':*BatchNormKeepBits*:ResNetGpu*'
timeout 200 reprise_gpu_tests --gtest_brief=1 --gtest_filter="$tests" 2>&1 | tail -n 4
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool"
  timeout 150 compute-sanitizer --tool "$tool" reprise_gpu_tests --gtest_brief=1 \
    --gtest_filter='*BatchNormFinalizeInStats*' 2>&1 | tail -n 3
done
shapes=(
  "r50 b32 bf16|--bf16 --batch 32 --iters 300 --warmup 20"
  "r50 b32 tf32|--batch 32 --iters 200 --warmup 20"
  "r50 b256 bf16|--bf16 --batch 256 --iters 20 --warmup 5"
)
for ((r = 1; r <= rounds; ++r)); do
  for s in "${shapes[@]}"; do
    for in_stats in false true; do
      line=$(timeout 200 reprise-bench --model resnet --depth 50 --classes 1000 --tf32 --layout nhwc \
        --mode graph --fusion on --inputs device --lanes 2 ${s#*|} \
        --bn_finalize_in_stats="$in_stats" 2>/dev/null | grep -E '^ *graph')
      echo "round $r ${s%%|*} finalize_in_stats=$in_stats: $line"
    done
  done
done
if ((timeline > 0)); then
  for in_stats in false true; do
    echo "== timeline, r50 b32 bf16, finalize_in_stats=$in_stats"
    timeout 200 reprise-bench --model resnet --depth 50 --classes 1000 --tf32 --layout nhwc \
      --mode graph --fusion on --inputs device --lanes 2 --bf16 --batch 32 --iters 40 --warmup 5 \
      --bn_finalize_in_stats="$in_stats" --timeline "$timeline" 2>&1 | grep -vE '^(mode|reprise-bench)'
  done
fi
