#!/usr/bin/env bash
# One full session on the GPU host, from the repository root of a staged checkout:
#   bash tools/device/gpu_session.sh [tests|bench|all] ["D W B" ...]
# bench takes MLP configurations (depth width batch); by default 8x256 b32 (fp32) and 4x1024
# b256 (fp32 and TF32). A configuration with a fourth word "tf32" runs with TF32 only.
# Runs the GPU tests (plain and under compute-sanitizer), the main job, and the benchmarks of
# reprise beside PyTorch and JAX, writing logs and JSON under $OUT.
set -uo pipefail
what=${1:-all}
out=/tmp/reprise-session  # Everything lands here, then travels back as one archive in $OUT.
mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/session.tgz" -C "$out" .; }  # After each phase: a timeout keeps what ran.
source .stage/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [[ $what == tests || $what == all ]]; then
  reprise_gpu_tests 2>&1 | tee "$out/gpu_tests.log" | tail -n 40
  compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 3 reprise_gpu_tests \
    --gtest_brief=1 > "$out/memcheck.log" 2>&1
  echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/memcheck.log" | tail -n 3 | tr '\n' ' ')"
  train_mlp 2>&1 | tee "$out/train_mlp.log" | tail -n 12
  save
fi
if [[ $what == bench || $what == all ]]; then
  # Kernel acquisition: cold (empty cache folder), warm (a new process over the filled folder);
  # hot is the second mode of one process (the process-wide store), e.g. bulked after sync.
  kc=$(mktemp -d)
  for phase in cold warm; do
    REPRISE_CACHE_DIR=$kc reprise-bench --depth 8 --width 256 --batch 32 --iters 10 --warmup 5 \
      --mode all --fusion on --json "$out/kernels_$phase.json" 2>&1 | grep -E 'acquired' | sed "s/^/$phase: /"
  done
  shift
  configs=("$@")
  ((${#configs[@]})) || configs=("8 256 32" "4 1024 256" "4 1024 256 tf32")
  for cfg in "${configs[@]}"; do
    set -- $cfg
    tf32=${4:+--tf32}
    tag="d$1_w$2_b$3${tf32:+_tf32}"
    reprise-bench --depth "$1" --width "$2" --batch "$3" --iters 1000 --warmup 100 $tf32 \
      --json "$out/reprise_$tag.json" 2>/dev/null | tail -n 10
    reprise-bench --depth "$1" --width "$2" --batch "$3" --iters 1000 --warmup 100 $tf32 \
      --mode graph --fusion per-layer --lanes 1 --json "$out/reprise_lanes1_$tag.json" 2>/dev/null |
      tail -n 1 | sed 's/^/lanes=1 /'
    python3 tools/bench/torch_mlp.py --depth "$1" --width "$2" --batch "$3" --iters 1000 $tf32 \
      --json "$out/torch_$tag.json" 2>&1 | grep -E '^torch|rror' | tail -n 5
    save
    python3 tools/bench/jax_mlp.py --depth "$1" --width "$2" --batch "$3" --iters 1000 $tf32 --modes jit,jit_queued \
      --json "$out/jax_$tag.json" 2>&1 | grep -E '^jax|rror' | tail -n 3
    save
  done
fi
