#!/usr/bin/env bash
# What cuDNN's fused batch-norm statistics buy ResNet-50 (issue 42), on one GPU in one call, from a
# staged checkout:
#   bash tools/device/conv_bn_fusion.sh [ROUNDS] [SHAPES] [TIMELINE]
# For each shape (b32 and b256; SHAPES keeps those whose names contain it), NHWC, whole step
# captured, two lanes, alternating in each round: bfloat16 (the default path), float16 with the
# graph API, and float16 with the graph API and the statistics in the convolutions' epilogues
# (--conv_bn_stats). Each row prints the step's median ms. TIMELINE (a count) adds, in round 1,
# each form's launch spans by kind and its longest launches.
set -uo pipefail
rounds=${1:-1}
only=${2:-}
timeline=${3:-0}
shapes=(
  "r50_b32|--batch 32 --iters 40"
  "r50_b256|--batch 256 --iters 15"
)
forms=(
  "bf16 legacy|--bf16 --conv_api legacy"
  "bf16 graph|--bf16 --conv_api graph"
  "fp16 graph|--fp16 --conv_api graph"
  "fp16 graph stats|--fp16 --conv_api graph --conv_bn_stats"
)
bench() {  # tag, flags...
  local tag=$1
  shift
  timeout 300 reprise-bench --model resnet --depth 50 --classes 1000 --tf32 --layout nhwc \
    --mode graph --fusion on --warmup 5 --inputs device --lanes 2 "$@" 2>&1 | sed -e "s/^/$tag: /"
}
for ((r = 1; r <= rounds; ++r)); do
  for s in "${shapes[@]}"; do
    name=${s%%|*}
    flags=${s#*|}
    [[ $name == *"$only"* ]] || continue
    for f in "${forms[@]}"; do
      form=${f%%|*}
      form_flags=${f#*|}
      if ((r == 1 && timeline > 0)); then
        bench "round $r $name $form" $flags $form_flags --timeline "$timeline" |
          grep -vE '^[^:]*: (mode|reprise-bench resnet)'
      else
        bench "round $r $name $form" $flags $form_flags | grep -E ': *graph'
      fi
    done
  done
done
