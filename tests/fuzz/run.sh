#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, in build-fuzz/, apart from the main
# build) and runs each on its committed seed corpus for a fixed budget. A crash, a leak, a
# timeout or a sanitizer finding fails the script; the input that found it is left in
# build-fuzz/findings/<fuzzer>/ (turn it into a CPU regression test, then fix it).
#
#   tests/fuzz/run.sh                 # every fuzzer, 60 s each
#   FUZZ_SECONDS=300 tests/fuzz/run.sh json safetensors
#
# Fuzzers: safetensors (safetensors + checkpoint readers), json (the JSON parser), cache_entry
# (the kernel cache's entry decoder), plan_record (the measured-choice records' decoders),
# token_data (token shards, the shuffled loader and the sequential reader against what they
# document), graph_builder (the Graph, nn and models API with random
# shapes, ops and configs, the CPU reference and the step compiler; it compiles the layers up to
# passes, about 10 minutes on 2 cores the first time).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${FUZZ_JOBS:-$(nproc)}"
fuzzers=("$@")
((${#fuzzers[@]})) || fuzzers=(safetensors json cache_entry plan_record token_data graph_builder)
if ! command -v nvcc >/dev/null; then export PATH="/usr/local/cuda/bin:$PATH"; fi
cxx="${FUZZ_CXX:-$(command -v clang++ || true)}"
[[ -n "$cxx" ]] || { echo "run.sh: clang++ is needed (apt-get install clang)" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 and line tables only: what libFuzzer's documentation suggests, and a faster build than -O2 -g.
# One CUDA architecture: the fuzzers link the library's kernels but never launch them.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CUDA_ARCHITECTURES=90-real -DREPRISE_FUZZ=ON \
  -DREPRISE_SANITIZE="address;undefined" -DREPRISE_WITH_MPI=OFF -DREPRISE_PYTHON=OFF \
  "${launcher[@]}" >/dev/null
targets=()
for f in "${fuzzers[@]}"; do targets+=("reprise_${f}_fuzzer"); done
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
status=0
for f in "${fuzzers[@]}"; do
  corpus="$build/corpus/$f" findings="$build/findings/$f"
  mkdir -p "$corpus" "$findings"
  echo "== $f: ${seconds} s"
  # The working corpus grows in build-fuzz; the committed seeds stay as they are.
  if ! ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1" \
    "$build/fuzz/reprise_${f}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" \
      tests/fuzz/corpus/"$f" 2>"$build/$f.log"; then
    tail -n 40 "$build/$f.log"
    echo "== $f: FAILED; the input is in $findings/" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/$f.log" || true
  fi
done
exit $status
