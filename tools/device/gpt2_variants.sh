#!/usr/bin/env bash
# GPT-2 124M in bfloat16, whole step captured, at B=16, T=1024 and B=4, T=256, in each of the given
# kernel variants, alternating within each round, with llm.c's step (train_gpt2cu + cuDNN, built by
# `bash tools/bench/llmc_gpt2.sh stage` into .stage/llmc) once per round and shape when
# GPT2_VARIANTS_LLMC=1; then each variant's median over the rounds and its ratio to llm.c's median.
# From a staged checkout (or with reprise-bench on the PATH):
#   bash tools/device/gpt2_variants.sh ROUNDS "NAME|FLAGS" ["NAME|FLAGS" ...]
# e.g. GPT2_VARIANTS_LLMC=1 bash tools/device/gpt2_variants.sh 4 "apart|--head_loss_chunks 0" \
#        "slices2|--head_loss_chunks 2"
# Every run's output is kept in $OUT/gpt2_variants/ (or /tmp/gpt2_variants).
set -uo pipefail
rounds=$1
shift
[[ -f .stage/env.sh ]] && source .stage/env.sh
dir=${OUT:-/tmp}/gpt2_variants
mkdir -p "$dir"
shapes=(
  "b16_t1024|--batch 16 --seq 1024 --iters 40|16 1024 30"
  "b4_t256|--batch 4 --seq 256 --iters 150|4 256 80"
)
common="--model gpt2 --dtype bf16 --mode graph --fusion on --inputs device --warmup 10 --measure_matmul"
results=$dir/results.txt
: > "$results"
for ((r = 1; r <= rounds; ++r)); do
  for s in "${shapes[@]}"; do
    IFS='|' read -r shape flags llmc_args <<< "$s"
    for v in "$@"; do
      name=${v%%|*}
      log=$dir/${shape}_${name}_$r.txt
      timeout 200 reprise-bench $common $flags ${v#*|} > "$log" 2>&1
      ms=$(grep -E '^graph\+devlaunch' "$log" | head -1 | awk '{print $2}')
      echo "round $r $shape $name: ${ms:-failed}"
      echo "$shape $name ${ms:-nan}" >> "$results"
    done
    if [[ ${GPT2_VARIANTS_LLMC:-0} == 1 ]]; then
      log=$dir/${shape}_llmc_$r.txt
      OUT=$dir timeout 120 bash tools/bench/llmc_gpt2.sh run $llmc_args > "$log" 2>&1
      ms=$(grep -oE 'median_ms=[0-9.]+' "$log" | head -1 | cut -d= -f2)
      echo "round $r $shape llm.c: ${ms:-failed}"
      echo "$shape llm.c ${ms:-nan}" >> "$results"
    fi
  done
done
# Medians per shape and variant, and each variant's step time as a fraction of llm.c's.
python3 - "$results" <<'EOF'
import collections, math, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    shape, name, ms = line.split()
    if not math.isnan(float(ms)):
        runs[(shape, name)].append(float(ms))
for shape in dict.fromkeys(s for s, _ in runs):
    peer = runs.get((shape, "llm.c"))
    peer_ms = statistics.median(peer) if peer else None
    for (s, name), values in runs.items():
        if s != shape:
            continue
        med = statistics.median(values)
        ratio = f", {med / peer_ms:.3f}x llm.c's step ({peer_ms / med:.3f}x its tokens/s)" \
            if peer_ms and name != "llm.c" else ""
        print(f"{shape} {name}: median {med:.3f} ms over {len(values)} "
              f"(min {min(values):.3f}, max {max(values):.3f}){ratio}")
EOF
