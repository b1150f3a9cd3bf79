#!/usr/bin/env bash
# ResNet-50 NHWC, whole step captured, two lanes, at b32 bfloat16, b32 TF32 and b256 bfloat16, in
# each of the given kernel variants, alternating within each round: each row the step's median ms
# (reprise-bench's graph line). From a staged checkout (or with reprise-bench on the PATH):
#   bash tools/device/resnet50_variants.sh ROUNDS "NAME|FLAGS" ["NAME|FLAGS" ...]
# e.g. bash tools/device/resnet50_variants.sh 2 "in_place|" "in_batch_norm|--residual_sums_in_bn"
set -uo pipefail
rounds=$1
shift
[[ -f .stage/env.sh ]] && source .stage/env.sh
shapes=(
  "r50 b32 bf16|--bf16 --batch 32 --iters 300 --warmup 20"
  "r50 b32 tf32|--batch 32 --iters 200 --warmup 20"
  "r50 b256 bf16|--bf16 --batch 256 --iters 20 --warmup 5"
)
for ((r = 1; r <= rounds; ++r)); do
  for s in "${shapes[@]}"; do
    for v in "$@"; do
      line=$(timeout 200 reprise-bench --model resnet --depth 50 --classes 1000 --tf32 --layout nhwc \
        --mode graph --fusion on --inputs device --lanes 2 ${s#*|} ${v#*|} 2>/dev/null |
        grep -E '^ *graph')
      echo "round $r ${s%%|*} ${v%%|*}: $line"
    done
  done
done
