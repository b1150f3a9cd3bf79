#!/usr/bin/env bash
# How ResNet-50's cuDNN convolution plans are chosen, and what it costs or gains (issue 42), on one
# GPU in one call, from a staged checkout:
#   bash tools/device/conv_plans.sh [ROUNDS] [SHAPES]
# For each shape (b32 bf16, b32 TF32, b256 bf16; SHAPES keeps those whose names contain it), NHWC,
# whole step captured, two lanes: the legacy API (heuristics), the graph API by heuristics, and the
# graph API with measured plans (--measure_conv), first on an empty cache folder (cold: every plan
# timed) then again (warm: the plans rebuilt from their records on disk). Each row prints the step's
# median ms and, on stderr's line, Create's time with how the plans were chosen.
set -uo pipefail
rounds=${1:-1}
only=${2:-}
cache=$(mktemp -d)
shapes=(
  "r50_b32_bf16|--batch 32 --bf16 --iters 40"
  "r50_b32_tf32|--batch 32 --iters 40"
  "r50_b256_bf16|--batch 256 --bf16 --iters 15"
)
bench() {  # tag, flags...
  local tag=$1
  shift
  REPRISE_CACHE_DIR=$cache timeout 300 reprise-bench --model resnet --depth 50 --classes 1000 \
    --tf32 --layout nhwc --mode graph --fusion on --warmup 5 --inputs device --lanes 2 "$@" 2>&1 |
    grep -E '^graph|kernels acquired' | sed -e "s/^/$tag: /" -e 's/reprise-bench: graph kernels acquired in/acquire/'
}
for ((r = 1; r <= rounds; ++r)); do
  for s in "${shapes[@]}"; do
    name=${s%%|*}
    flags=${s#*|}
    [[ $name == *"$only"* ]] || continue
    bench "round $r $name legacy" $flags --conv_api legacy
    bench "round $r $name graph" $flags --conv_api graph
    if ((r == 1)); then
      bench "round $r $name graph measured cold" $flags --conv_api graph --measure_conv
    fi
    bench "round $r $name graph measured warm" $flags --conv_api graph --measure_conv
  done
done
rm -rf "$cache"
