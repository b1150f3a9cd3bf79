#!/usr/bin/env bash
# ResNet work on the GPU host, from the repository root of a staged checkout:
#   bash tools/device/resnet_session.sh [tests] [memcheck] [racecheck] [dump] [fast] [mirror] [bf16]
#                                        [train] [check] [bench] [torch] [compile]
# Each word runs one phase; logs and JSON land in /tmp/reprise-resnet and travel back as
# $OUT/resnet.tgz after every phase, so a timeout keeps what ran.
set -uo pipefail
out=/tmp/reprise-resnet
mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/resnet.tgz" -C "$out" .; }
source .stage/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
for phase in "$@"; do
  case $phase in
    tests)
      timeout 300 reprise_gpu_tests --gtest_brief=1 2>&1 | tee "$out/gpu_tests.log" | tail -n 60 ;;
    memcheck)
      timeout 500 compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 3 \
        reprise_gpu_tests --gtest_brief=1 > "$out/memcheck.log" 2>&1
      echo "memcheck exit $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/memcheck.log" | tail -n 3 | tr '\n' ' ')" ;;
    racecheck)
      timeout 300 compute-sanitizer --tool racecheck --error-exitcode 3 reprise_gpu_tests --gtest_brief=1 \
        --gtest_filter='*Lane*:*BatchNorm*:*Mirror*' > "$out/racecheck.log" 2>&1
      echo "racecheck exit $?: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' "$out/racecheck.log" | tail -n 3 | tr '\n' ' ')" ;;
    fast)
      # The channels-last paths: NHWC with the generated BN kernels, and NCHW converted by the pass.
      for args in "--layout nhwc" "--layout nchw"; do
        tag=$(echo $args | tr -d ' -' )
        timeout 200 reprise-bench --model resnet --depth 50 --batch 32 --classes 1000 --tf32 $args \
          --mode all --iters 50 --warmup 10 --profile 25 --json "$out/reprise_r50_b32_tf32_$tag.json" 2>&1 \
          | grep -v '^reprise-bench: measuring' | tee "$out/fast_$tag.log" | head -n 60
      done ;;
    mirror)
      for mirror in off auto; do
        timeout 200 reprise-bench --model resnet --depth 50 --batch 64 --classes 1000 --tf32 --layout nhwc \
          --mirror $mirror --mode graph --iters 30 --warmup 10 --json "$out/reprise_r50_b64_mirror_$mirror.json" 2>&1 \
          | grep -v '^reprise-bench: measuring'
      done ;;
    dump)
      timeout 120 reprise-dump --model resnet --depth 50 --batch 32 --layout nhwc --stage cuda-graph --format json \
        -o "$out/dump_r50_cuda_graph.json" 2>&1 | tail -n 3
      timeout 120 reprise-dump --model resnet --depth 50 --batch 32 --layout nhwc --stage cuda-graph --format text \
        -o "$out/dump_r50_cuda_graph.txt" 2>&1 | tail -n 3
      head -c 600 "$out/dump_r50_cuda_graph.txt"; echo ;;
    bf16)
      timeout 200 reprise-bench --model resnet --depth 50 --batch 32 --classes 1000 --bf16 --tf32 --layout nhwc \
        --mode graph --iters 50 --warmup 10 --profile 15 --json "$out/reprise_r50_b32_bf16_nhwc.json" 2>&1 \
        | grep -v '^reprise-bench: measuring' | tee "$out/bf16_nhwc.log" | head -n 40
      timeout 200 python3 tools/bench/torch_resnet.py --depth 50 --batch 32 --precision bf16 --layout nhwc \
        --modes eager,graph --iters 50 --warmup 10 --json "$out/torch_r50_b32_bf16_nhwc.json" 2>&1 | grep -E '^torch|rror' ;;
    train)
      timeout 200 train_resnet --depth 18 --image_size 64 --steps 100 2>&1 | tee "$out/train_resnet.log" | tail -n 14 ;;
    check)
      for cfg in "18 64 8 nchw" "18 64 8 nhwc" "50 224 32 nchw"; do
        set -- $cfg
        dir=$(mktemp -d)
        timeout 120 train_resnet --check_dir "$dir" --depth $1 --image_size $2 --batch $3 --layout $4 --classes 10 2>&1 | tail -n 2
        extra=""; [[ $1 == 50 ]] && extra="--reference f64"
        timeout 200 python3 tools/bench/torch_resnet_check.py "$dir" $extra 2>&1 | tee "$out/check_$1_$2_$4.log" | tail -n 9
      done ;;
    bench)
      for layout in nchw nhwc; do
        timeout 200 reprise-bench --model resnet --depth 50 --batch 32 --classes 1000 --tf32 --layout $layout \
          --mode all --fusion on --iters 50 --warmup 10 --json "$out/reprise_r50_b32_tf32_$layout.json" 2>&1 | grep -v '^reprise-bench: measuring'
      done ;;
    torch)
      for layout in nchw nhwc; do
        timeout 200 python3 tools/bench/torch_resnet.py --depth 50 --batch 32 --precision tf32 --layout $layout \
          --modes eager,graph --iters 50 --warmup 10 --json "$out/torch_r50_b32_tf32_$layout.json" 2>&1 | grep -E '^torch|rror'
      done ;;
    compile)
      timeout 400 python3 tools/bench/torch_resnet.py --depth 50 --batch 32 --precision tf32 --layout nchw \
        --modes compile_graph --iters 50 --warmup 10 --json "$out/torch_r50_b32_tf32_compile.json" 2>&1 | grep -E '^torch|rror' ;;
  esac
  save
done
