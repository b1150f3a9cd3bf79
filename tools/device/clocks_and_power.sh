#!/usr/bin/env bash
# Whether a workload runs against the GPU's power cap: samples the SM clock, the power drawn and the
# active throttle reasons every 50 ms while COMMAND runs, then counts the samples above MIN_WATTS
# (default 200, which leaves out Create and teardown) by clock, power (rounded down to 25 W) and
# reasons. Reason 0x4 is the software power cap: there, work beside the main chain costs it clock,
# and only less energy per step (fewer bytes, fewer passes) shortens the step.
#   bash tools/device/clocks_and_power.sh COMMAND...     (on the GPU host, GPU 0)
# e.g. bash tools/device/clocks_and_power.sh reprise-bench --model gpt2 --batch 16 --seq 1024 \
#        --dtype bf16 --mode graph --fusion on --inputs device --iters 100
set -uo pipefail
(($#)) || { echo "usage: clocks_and_power.sh COMMAND..." >&2; exit 2; }
command -v nvidia-smi > /dev/null || { echo "clocks_and_power.sh: no nvidia-smi here" >&2; exit 1; }
samples=$(mktemp)
nvidia-smi --query-gpu=name,clocks.max.sm,enforced.power.limit --format=csv,noheader -i 0
nvidia-smi -i 0 --query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active \
  --format=csv,noheader,nounits -lms 50 > "$samples" &
sampler=$!
trap 'kill "$sampler" 2> /dev/null; rm -f "$samples"' EXIT
"$@"
status=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
min=${MIN_WATTS:-200}
echo "$(wc -l < "$samples") samples; above $min W as (count, SM MHz, W rounded down to 25, throttle reasons):"
awk -F', ' -v min="$min" '$2 + 0 > min {print $1, int($2 / 25) * 25, $3}' "$samples" |
  sort | uniq -c | sort -rn | head -10
exit "$status"
