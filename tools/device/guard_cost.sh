#!/usr/bin/env bash
# The non-finite guard's cost (TrainOptions::non_finite): the same step with the guard (skip) and
# without it (ignore), alternating, on one GPU in one call:
#   bash tools/device/guard_cost.sh BENCH [ROUNDS]
# Prints each run's graph row, then a summary line per workload: the medians over the rounds.
# GUARD_ONLY keeps the workloads whose names contain it (e.g. "whole" for the whole-step kernels).
# Rows: ResNet-50 b32 bf16 and TF32, the MLP 8x256 b32 per-layer step and its default whole step,
# and the issue-9 ensembles of 4 (layer phases) and 32 MLPs (the group schedule), all guarded by
# default (the whole-step kernels inside themselves, double-buffering the parameters and their
# velocities, with no grid barrier added: docs/engine.md, "The non-finite guard").
# GUARD_ENSEMBLES="8 16 24 32 48" adds the issue-9 ensemble at each of those sizes
# ("ensemble<K>_sweep_tf32_whole"; GUARD_ONLY=sweep keeps only them): the plan's schedule changes
# with the size (4 models take the layer phases, 8 to 31 the clusters, 32 on the groups), and so
# does what the guard costs (docs/benchmarks_guard.md).
set -uo pipefail
bench=${1:?reprise-bench}; rounds=${2:-2}
# The issue-9 ensemble's flags, all but its size (--ensemble K).
ensemble="--depth 2 --width 256 --input_features 64 --classes 10 --batch 64 --mode graph --fusion on --iters 1000 --warmup 100 --inputs device --tf32"
workloads=(
  "r50_b32_bf16|--model resnet --depth 50 --batch 32 --classes 1000 --tf32 --bf16 --layout nhwc --mode graph --fusion on --iters 40 --warmup 10 --inputs device --lanes 2"
  "r50_b32_tf32|--model resnet --depth 50 --batch 32 --classes 1000 --tf32 --layout nhwc --mode graph --fusion on --iters 40 --warmup 10 --inputs device --lanes 2"
  "mlp8x256_b32_tf32_per_layer|--model mlp --depth 8 --width 256 --batch 32 --mode graph --fusion per-layer --iters 1000 --warmup 100 --inputs device --tf32"
  "mlp8x256_b32_tf32_whole|--model mlp --depth 8 --width 256 --batch 32 --mode graph --fusion on --iters 1000 --warmup 100 --inputs device --tf32"
  "ensemble4_issue9_tf32_whole|--model ensemble --ensemble 4 $ensemble"
  "ensemble32_issue9_tf32_whole|--model ensemble --ensemble 32 $ensemble"
)
for k in ${GUARD_ENSEMBLES:-}; do
  workloads+=("ensemble${k}_sweep_tf32_whole|--model ensemble --ensemble $k $ensemble")
done
rows=$(mktemp)
for ((r = 1; r <= rounds; ++r)); do
  for w in "${workloads[@]}"; do
    name=${w%%|*}; flags=${w#*|}
    [[ $name == *"${GUARD_ONLY:-}"* ]] || continue
    for guard in ignore skip; do
      row=$($bench $flags --non_finite=$guard 2>&1 | grep -E '^ *graph' | tail -n 1)
      echo "round $r $guard $name: $row" | tee -a "$rows"
    done
  done
done
# Per workload over the rounds: the median of each form's medians and of the per-round
# differences (skip - ignore). One process's step time sits on one of a few levels, so a single
# round can show the guard at almost any cost; the rounds' medians are what to quote.
awk '$6 ~ /^[0-9.]+$/ { name = $4; sub(/:$/, "", name); ms[name, $3, $2] = $6; names[name] = 1
                       last = $2 > last ? $2 : last }
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] > a[j]; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (name in names) {
      n = 0; delete ig; delete sk; delete d
      for (r = 1; r <= last; ++r) {
        if (((name, "ignore", r) in ms) && ((name, "skip", r) in ms)) {
          ++n; ig[n] = ms[name, "ignore", r]; sk[n] = ms[name, "skip", r]; d[n] = sk[n] - ig[n]
        }
      }
      if (n == 0) continue
      i = median(ig, n); s = median(sk, n); dd = median(d, n)
      printf "summary %s over %d rounds: ignore %.4f ms, skip %.4f ms (%+.1f%%); per round %+.4f ms (%+.1f%%)\n",
             name, n, i, s, 100 * (s / i - 1), dd, 100 * dd / i
    }
  }' "$rows"
rm -f "$rows"
