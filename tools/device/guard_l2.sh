#!/usr/bin/env bash
# Whether the non-finite guard's cost on the larger ensembles is memory traffic: the issue-9
# ensemble's whole-step kernel profiled guarded (skip) and not (ignore) at each size, the caches
# left as the previous replay left them (the double buffer reads one copy of the parameters and
# velocities and writes the other, twice the bytes a step touches):
#   bash tools/device/guard_l2.sh BENCH ["24 32 48"]
# Per size and form: the kernel's duration, DRAM bytes read and written, and L2's sector hit rate
# (one launch after 200 replays; ncu with --cache-control none, so the L2 holds what the step
# before left, and application replay, so that each metric pass starts from that state).
set -uo pipefail
bench=${1:?usage: guard_l2.sh BENCH [SIZES]}
sizes=${2:-24 32 48}
flags="--depth 2 --width 256 --input_features 64 --classes 10 --batch 64 --mode graph --fusion on --iters 300 --warmup 30 --inputs device --tf32"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
for k in $sizes; do
  for guard in ignore skip; do
    out=$(ncu --kernel-name regex:reprise_batched_mlp_step --launch-skip 200 --launch-count 1 \
      --cache-control none --replay-mode application --metrics "$metrics" --csv \
      "$bench" --model ensemble --ensemble "$k" $flags --non_finite=$guard 2>&1)
    # CSV rows: ..., "Metric Name", "Metric Unit", "Metric Value" (the last three fields).
    row=$(echo "$out" | awk -F'","' 'NF > 3 && $(NF - 2) != "Metric Name" { gsub(/"/, "", $NF); printf "%s=%s%s ", $(NF - 2), $NF, $(NF - 1) }')
    if [[ -z $row ]]; then
      echo "ensemble $k $guard: no metrics; ncu said:"
      echo "$out" | tail -n 5
    else
      echo "ensemble $k $guard: $row"
    fi
  done
done
