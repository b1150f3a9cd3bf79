#!/usr/bin/env bash
# Times two builds of reprise-bench on the same GPU in the same call, alternating, on the headline
# workloads of docs/benchmarks.md (MLP whole step, ResNet-50 bf16 and TF32 at batch 32 and bf16 at
# 256, the ensembles of 4 and 32 MLPs, GPT-2 124M in bf16 at B=16, T=1024 and B=4, T=256):
#   bash tools/device/compare_engines.sh OLD_BENCH NEW_BENCH [ROUNDS] > table.txt
# COMPARE_EXTRA adds flags to every run of both engines (e.g. "--non_finite=ignore" to time the
# steps without the non-finite guard, whose cost tools/device/guard_cost.sh measures apart);
# COMPARE_ONLY keeps the workloads whose names contain it (e.g. "mlp", "gpt2").
# Prints one line per (round, engine, workload): the bench's graph row (median ms, p90, ...).
set -uo pipefail
old=${1:?old reprise-bench}; new=${2:?new reprise-bench}; rounds=${3:-2}
workloads=(
  "mlp8x256_b32_tf32|--model mlp --depth 8 --width 256 --batch 32 --mode graph --fusion on --iters 1000 --warmup 100 --inputs device --tf32"
  "mlp4x1024_b256_tf32|--model mlp --depth 4 --width 1024 --batch 256 --mode graph --fusion on --iters 1000 --warmup 100 --inputs device --tf32"
  "r50_b32_bf16|--model resnet --depth 50 --batch 32 --classes 1000 --tf32 --bf16 --layout nhwc --mode graph --fusion on --iters 40 --warmup 10 --inputs device --lanes 2"
  "r50_b32_tf32|--model resnet --depth 50 --batch 32 --classes 1000 --tf32 --layout nhwc --mode graph --fusion on --iters 40 --warmup 10 --inputs device --lanes 2"
  "r50_b256_bf16|--model resnet --depth 50 --batch 256 --classes 1000 --tf32 --bf16 --layout nhwc --mode graph --fusion on --iters 15 --warmup 5 --inputs device --lanes 2"
  "ensemble4_tf32|--model ensemble --ensemble 4 --depth 2 --width 256 --input_features 64 --batch 64 --classes 10 --fusion on --inputs device --tf32 --mode graph --iters 1000 --warmup 100"
  "ensemble32_tf32|--model ensemble --ensemble 32 --depth 2 --width 256 --input_features 64 --batch 64 --classes 10 --fusion on --inputs device --tf32 --mode graph --iters 300 --warmup 30"
  "gpt2_b16_t1024_bf16|--model gpt2 --batch 16 --seq 1024 --bf16 --mode graph --fusion on --iters 30 --warmup 10 --inputs device"
  "gpt2_b4_t256_bf16|--model gpt2 --batch 4 --seq 256 --bf16 --mode graph --fusion on --iters 120 --warmup 10 --inputs device"
)
for ((r = 1; r <= rounds; ++r)); do
  for w in "${workloads[@]}"; do
    name=${w%%|*}; flags="${w#*|} ${COMPARE_EXTRA:-}"
    [[ $name == *"${COMPARE_ONLY:-}"* ]] || continue
    for engine in old new; do
      bin=$old; [[ $engine == new ]] && bin=$new
      row=$($bin $flags 2>&1 | grep -E '^ *graph' | tail -n 1)
      echo "round $r $engine $name: $row"
    done
  done
done
