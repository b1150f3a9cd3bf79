#!/usr/bin/env bash
# llm.c's GPT-2 trainer (karpathy/llm.c, train_gpt2cu, bf16, cuDNN flash attention) as a peer of
# reprise's GPT-2: built on the GPU host from a source tree staged here (none of its code is
# committed), trained from scratch (-e d12: GPT-2 124M, random init) on staged token shards, its
# per-step times parsed into the JSON report.py reads.
#
#   bash tools/bench/llmc_gpt2.sh stage            # here (no GPU): fills .stage/llmc (~10 MiB)
#   bash tools/bench/llmc_gpt2.sh build            # on the GPU host (or here, ahead of time)
#   bash tools/bench/llmc_gpt2.sh run B T STEPS    # on the GPU host: one shape
#   bash tools/bench/llmc_gpt2.sh all              # build, then B=16 T=1024 and B=4 T=256
#
# stage: llm.c's source from the `fetch` tool's mirror (LLMC_MIRROR, default
#   /work/.mirror/karpathy+llm.c/repo; fetch github:karpathy/llm.c first) via git archive into
#   .stage/llmc/src; the cudnn-frontend headers of the pip package nvidia-cudnn-frontend into
#   .stage/llmc/src/cudnn-frontend/include (where llm.c's Makefile looks for them); train and
#   validation shards in llm.c's format into .stage/llmc/data (tools/data/build_shards.py's
#   Shakespeare with GPT-2's BPE, or random tokens with LLMC_RANDOM_SHARDS=1 or when the data
#   packages are missing).
# build: llm.c's own Makefile, `make train_gpt2cu USE_CUDNN=1` (PRECISION=BF16, its default),
#   for sm_90, without NCCL and MPI; what the Makefile cannot find by itself on the GPU host is
#   passed in: nvcc (PATH, /usr/local/cuda, the Python environment), cuDNN's and cuBLAS's headers
#   and libraries (the toolkit's or the Python environment's nvidia/ packages) and libnvidia-ml
#   and NVRTC (which cudnn-frontend's headers now call), linked through symbolic links with the
#   unversioned names -l needs, in .stage/llmc/linklib; llm.c's one call that CUDA 13 changed
#   (cudaMemAdvise's location) is patched in the staged copy. Run here (nvcc 13 and cuDNN 9.19
#   beside the toolkit), it builds the same binary ahead of time (about 3 CPU-minutes; the GPU
#   host then skips the build when the staged binary finds its libraries there; LLMC_REBUILD=1
#   builds anyway). LLMC_BUILT records where it was built.
# run: train_gpt2cu -e d12 -b B -t T -x STEPS with AdamW lr 6e-4 (10 warm-up steps, cosine to
#   0.1x), weight decay 0.1, llm.c's defaults otherwise (bf16, TF32, recompute of GELU, cuDNN);
#   no sampling, one validation batch (before step 1 and after the last; not timed). llm.c times
#   each step with CUDA events (its loop synchronises once per step, and copies the batch and the
#   loss between host and device inside the timed region); the first LLMC_SKIP (5) steps are
#   dropped and the median of the rest is reported, with tokens/s = B·T / median and MFU by
#   tools/bench/gpt2_flops.py (llm.c's 6·N + 6·L·C·T, N = 124,439,808: GPT-2's real vocabulary;
#   llm.c itself pads it to 50,304 rows).
# Output: $OUT (or /tmp) /llmc_b{B}_t{T}.log and .json, build log llmc_build.log. Exit status 0,
# or 1 with a line saying what is missing or what failed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=${LLMC_DIR:-$root/.stage/llmc}
out=${OUT:-/tmp}
die() { echo "llmc_gpt2: error: $*" >&2; exit 1; }

stage() {
  local mirror=${LLMC_MIRROR:-/work/.mirror/karpathy+llm.c/repo}
  git -C "$mirror" rev-parse HEAD >/dev/null 2>&1 ||
    die "no llm.c mirror at $mirror: fetch github:karpathy/llm.c with the fetch tool, or set LLMC_MIRROR to its git directory"
  git -C "$root" check-ignore -q "$dir" ||
    die "$dir is not ignored by git: staged third-party code must not be committed (add it to .git/info/exclude)"
  rm -rf "$dir/src" && mkdir -p "$dir/src" "$dir/data" || die "cannot write $dir"
  git -C "$mirror" archive HEAD | tar -x -C "$dir/src" || die "git archive of $mirror failed"
  rm -rf "$dir/src/dev/cuda" "$dir/src/doc"  # kernels' development versions: not built, not carried
  git -C "$mirror" log -1 --format='%H %cs %s' > "$dir/src/LLMC_COMMIT"
  local fe
  fe=$(python3 -c "import importlib.metadata as m; print(m.distribution('nvidia-cudnn-frontend').locate_file('include'))" 2>/dev/null)
  [[ -f $fe/cudnn_frontend.h ]] ||
    die "cudnn-frontend headers not found (pip install nvidia-cudnn-frontend; looked in '${fe:-nothing}')"
  mkdir -p "$dir/src/cudnn-frontend/include"
  cp -r "$fe"/cudnn_frontend* "$fe"/cudnn_backend_base.h "$dir/src/cudnn-frontend/include/" 2>/dev/null ||
    cp -r "$fe"/. "$dir/src/cudnn-frontend/include/" || die "cannot copy the cudnn-frontend headers from $fe"
  rm -f "$dir"/data/*.bin
  if [[ ${LLMC_RANDOM_SHARDS:-0} == 1 ]] ||
     ! python3 "$root/tools/data/build_shards.py" --out "$dir/data" > "$dir/data/build_shards.log" 2>&1; then
    [[ ${LLMC_RANDOM_SHARDS:-0} == 1 ]] || echo "llmc_gpt2: build_shards.py failed ($(tail -n 1 "$dir/data/build_shards.log")); writing random-token shards"
    python3 - "$dir/data" "$root" <<'EOF' || die "cannot write random-token shards"
import os, random, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tools", "data"))
import build_shards  # llm.c's format: 256 int32 header (magic, version, count), uint16 tokens
rng = random.Random(0)
for split, n in (("train", 1_000_000), ("val", 100_000)):
    build_shards.write_shard(os.path.join(sys.argv[1], f"random_{split}_000000.bin"),
                             [rng.randrange(50257) for _ in range(n)])
EOF
  fi
  echo "llmc_gpt2: staged llm.c $(cut -c1-12 "$dir/src/LLMC_COMMIT") and $(ls "$dir"/data/*.bin | wc -l) shards; $(du -sh "$dir" | cut -f1) in $dir"
  echo "llmc_gpt2: the device run needs $dir (carry .stage, or this folder, if it is git-ignored)"
}

# The first existing file among the arguments (globs allowed), or nothing.
first() { local f; for f in "$@"; do [[ -e $f ]] && { echo "$f"; return; }; done; }

# The headers and nvcc a build needs (find_libs first).
find_build_tools() {
  [[ -x $nvcc ]] || die "nvcc not found (PATH, /usr/local/cuda/bin, $nv/cu13/bin); set NVCC"
  local h
  h=$(first "$nv"/cudnn/include/cudnn.h "$cuda"/include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h)
  [[ -n $h ]] || die "cudnn.h not found (the Python environment's nvidia/cudnn/include, $cuda/include, /usr/include)"
  cudnn_inc=$(dirname "$h")
  h=$(first "$cuda"/include/cublas_v2.h "$nv"/cu13/include/cublas_v2.h "$nv"/cublas/include/cublas_v2.h)
  [[ -n $h ]] || die "cublas_v2.h not found ($cuda/include, $nv/cu13/include, $nv/cublas/include)"
  cublas_inc=$(dirname "$h")
}

# The libraries train_gpt2cu links and loads: link names in $dir/linklib, LD_LIBRARY_PATH.
find_libs() {
  nv=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null)
  nvcc=${NVCC:-$(command -v nvcc || first /usr/local/cuda/bin/nvcc "$nv"/cu13/bin/nvcc "$nv"/cuda_nvcc/bin/nvcc)}
  cuda=/usr/local/cuda
  [[ -x $nvcc ]] && cuda=$(cd "$(dirname "$nvcc")/.." && pwd)
  local cudnn_so cublas_so cublaslt_so nvrtc_so nvml_so
  cudnn_so=$(first "$nv"/cudnn/lib/libcudnn.so.9 "$cuda"/lib64/libcudnn.so.9 /usr/lib/x86_64-linux-gnu/libcudnn.so.9)
  cublas_so=$(first "$cuda"/lib64/libcublas.so.13 "$nv"/cu13/lib/libcublas.so.13 "$nv"/cublas/lib/libcublas.so.13)
  cublaslt_so=$(first "$cuda"/lib64/libcublasLt.so.13 "$nv"/cu13/lib/libcublasLt.so.13 "$nv"/cublas/lib/libcublasLt.so.13)
  # cudnn-frontend (1.2x and later) compiles one experimental engine with NVRTC, linked directly.
  nvrtc_so=$(first "$cuda"/lib64/libnvrtc.so.13 "$nv"/cu13/lib/libnvrtc.so.13 "$nv"/cuda_nvrtc/lib/libnvrtc.so.13)
  nvml_so=$(first "$cuda"/lib64/stubs/libnvidia-ml.so "$cuda"/targets/x86_64-linux/lib/stubs/libnvidia-ml.so \
    "$nv"/cu13/lib/stubs/libnvidia-ml.so /usr/local/nvidia/lib64/libnvidia-ml.so.1 \
    /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1)
  [[ -n $nvml_so ]] || nvml_so=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml.so.1 /{print $NF; exit}')
  [[ -n $cudnn_so ]] || die "libcudnn.so.9 not found ($nv/cudnn/lib, $cuda/lib64)"
  [[ -n $cublas_so && -n $cublaslt_so ]] || die "libcublas.so.13 / libcublasLt.so.13 not found ($cuda/lib64, $nv/cu13/lib)"
  [[ -n $nvrtc_so ]] || die "libnvrtc.so.13 not found ($cuda/lib64, $nv/cu13/lib): cudnn-frontend's headers need it"
  # llm.c uses NVML only where nvml.h is found (__has_include), and then must link it.
  nvml_flag=-lnvidia-ml
  if [[ -z $nvml_so ]]; then
    nvml_flag=""
    [[ -f $cuda/include/nvml.h ]] && echo "llmc_gpt2: warning: $cuda/include/nvml.h is there but no libnvidia-ml to link (toolkit stubs, /usr/local/nvidia/lib64, ldconfig)" >&2
  fi
  # -lcudnn and friends need the unversioned names, which the pip packages do not ship.
  linklib=$dir/linklib
  rm -rf "$linklib" && mkdir -p "$linklib"
  ln -s "$cudnn_so" "$linklib/libcudnn.so"
  ln -s "$cublas_so" "$linklib/libcublas.so"
  ln -s "$cublaslt_so" "$linklib/libcublasLt.so"
  ln -s "$nvrtc_so" "$linklib/libnvrtc.so"
  [[ -n $nvml_so ]] && ln -s "$nvml_so" "$linklib/libnvidia-ml.so"
  local d libpath=""
  for d in "$(dirname "$cudnn_so")" "$(dirname "$cublas_so")" "$(dirname "$nvrtc_so")" "$cuda/lib64" /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -d $d ]] && libpath+="$d:"
  done
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:-}"
}

build() {
  [[ -f $dir/src/Makefile && -f $dir/src/train_gpt2.cu ]] ||
    die "no llm.c source in $dir/src: run 'bash tools/bench/llmc_gpt2.sh stage' on the development machine and carry .stage"
  [[ -f $dir/src/cudnn-frontend/include/cudnn_frontend.h ]] || die "no cudnn-frontend headers in $dir/src/cudnn-frontend/include: stage again"
  find_libs
  local exe=$dir/src/train_gpt2cu
  if [[ -x $exe && ${LLMC_REBUILD:-0} != 1 ]]; then
    if ldd "$exe" | grep -q "not found"; then
      echo "llmc_gpt2: the staged train_gpt2cu misses libraries here ($(ldd "$exe" | awk '/not found/{printf "%s ", $1}')); building it again"
    else
      echo "llmc_gpt2: using the staged train_gpt2cu ($(cat "$dir/src/LLMC_BUILT" 2>/dev/null)); LLMC_REBUILD=1 builds it here"
      return 0
    fi
  fi
  find_build_tools
  echo "llmc_gpt2: nvcc $nvcc ($("$nvcc" --version | tail -n 2 | head -n 1)); cuDNN headers $cudnn_inc; cuBLAS headers $cublas_inc"
  local log=$out/llmc_build.log t0=$SECONDS
  # CUDA 13 changed cudaMemAdvise's last argument from a device number to a cudaMemLocation:
  # llm.c's one call (advising host memory for its out-of-memory fallback to managed memory)
  # gets the host as a location. Applied to the staged copy only, where this toolkit needs it.
  if grep -q "cudaMemAdvise(const void \*devPtr, size_t count, enum cudaMemoryAdvise advice, struct cudaMemLocation location)" \
       "$cuda"/include/cuda_runtime_api.h "$cuda"/targets/x86_64-linux/include/cuda_runtime_api.h 2>/dev/null &&
     grep -q "cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)" "$dir/src/llmc/cuda_utils.cuh"; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      "$dir/src/llmc/cuda_utils.cuh" || die "cannot patch $dir/src/llmc/cuda_utils.cuh for CUDA 13"
    echo "llmc_gpt2: patched llmc/cuda_utils.cuh for CUDA 13's cudaMemAdvise (a cudaMemLocation, not a device number)"
  fi
  # llm.c's Makefile, with what it cannot detect here given on the command line (a command-line
  # NVCC_INCLUDES / NVCC_LDFLAGS replaces the Makefile's own, so theirs are repeated). Without
  # make, the two nvcc commands its rules run for these settings.
  local sm=${LLMC_SM:-90}
  local includes="-Icudnn-frontend/include -I$cudnn_inc -I$cublas_inc"
  local ldflags="-L$linklib -L$cuda/lib64 -lcublas -lcublasLt $nvml_flag -lcudnn -lnvrtc"
  (cd "$dir/src" && rm -f train_gpt2cu build/cudnn_att.o &&
    if command -v make > /dev/null; then
      make train_gpt2cu USE_CUDNN=1 PRECISION=BF16 GPU_COMPUTE_CAPABILITY="$sm" \
        NO_MULTI_GPU=1 NO_USE_MPI=1 NVCC="$nvcc" NVCC_INCLUDES="$includes" NVCC_LDFLAGS="$ldflags"
    else
      echo "no make here: running the nvcc commands of llm.c's Makefile for USE_CUDNN=1"
      local flags="--threads=0 -t=0 --use_fast_math -std=c++17 -O3 --generate-code arch=compute_$sm,code=[compute_$sm,sm_$sm]"
      mkdir -p build && set -x &&
        "$nvcc" -c $flags -DENABLE_CUDNN -DENABLE_BF16 llmc/cudnn_att.cpp $includes -o build/cudnn_att.o &&
        "$nvcc" $flags -DENABLE_CUDNN -DENABLE_BF16 train_gpt2.cu build/cudnn_att.o $ldflags $includes -o train_gpt2cu
    fi) > "$log" 2>&1
  local rc=$?
  if ((rc != 0)) || [[ ! -x $dir/src/train_gpt2cu ]]; then
    grep -E "error|Error" "$log" | head -n 20 >&2
    die "make train_gpt2cu failed (exit $rc) after $((SECONDS - t0)) s; the whole log is $log"
  fi
  echo "on $(hostname) by $("$nvcc" --version | tail -n 2 | head -n 1), cuDNN headers $cudnn_inc, $(date -u +%Y-%m-%d)" > "$dir/src/LLMC_BUILT"
  echo "llmc_gpt2: built train_gpt2cu with cuDNN in $((SECONDS - t0)) s"
}

run() {
  local b=${1:?B} t=${2:?T} steps=${3:-40}
  local exe=$dir/src/train_gpt2cu tag=llmc_b${b}_t${t}
  [[ -x $exe ]] || die "$exe is not built: run 'bash tools/bench/llmc_gpt2.sh build' first"
  local train val
  train=$(ls "$dir"/data/*_train_*.bin 2>/dev/null | head -n 1)
  val=$(ls "$dir"/data/*_val_*.bin 2>/dev/null | head -n 1)
  [[ -n $train && -n $val ]] || die "no token shards in $dir/data: stage again"
  find_libs
  local pattern=${train%_train_*}
  # Run from src/ (llm.c reads dev/data/hellaswag and gpt2_tokenizer.bin relative to it: absent,
  # so no HellaSwag and token ids instead of text, neither of which runs here).
  (cd "$dir/src" && ./train_gpt2cu -e d12 -b "$b" -t "$t" -x "$steps" \
      -i "${pattern}_train_*.bin" -j "${pattern}_val_*.bin" \
      -l 0.0006 -u 10 -q 0.1 -c 0.1 -v 1000000 -m 1 -s 0 -h 0 ${LLMC_ARGS:-}) > "$out/$tag.log" 2>&1
  local rc=$?
  python3 - "$out/$tag.log" "$out/$tag.json" "$b" "$t" "$steps" "$rc" "${LLMC_SKIP:-5}" "$root" "$dir" <<'EOF'
import datetime, json, re, statistics, subprocess, sys
log, path, b, t, steps, rc, skip, root, stage = sys.argv[1:]
b, t, steps, rc, skip = int(b), int(t), int(steps), int(rc), int(skip)
sys.path.insert(0, root + "/tools/bench")
import gpt2_flops
text = open(log, errors="replace").read()
ms = [float(m.group(2)) for m in re.finditer(
    r"^step\s+(\d+)/\d+ \| loss [^|]*\|[^|]*\|[^|]*\| ([0-9.]+) ms \|", text, re.M)]
losses = [float(m.group(1)) for m in re.finditer(r"^step\s+\d+/\d+ \| loss (\S+)", text, re.M)]
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()[0]
except Exception:
    gpu = "GPU not recorded"
config = {"model": "gpt2", "batch": b, "seq": t, "layers": 12, "heads": 12, "width": 768,
          "vocab": 50257, "positions": 1024, "params": gpt2_flops.num_parameters(12, 768, 50257, 1024),
          "precision": "bf16", "steps": steps, "skipped_steps": skip,
          "flags": "-e d12 -l 0.0006 -u 10 -q 0.1 -c 0.1 (cuDNN, recompute 1, TF32 on)"}
timed = ms[skip:]
if rc != 0 or len(timed) < 2:
    why = f"train_gpt2cu exit {rc}, {len(ms)} steps parsed"
    tail = [l for l in text.splitlines() if l.strip()][-3:]
    result = {"error": why + ": " + " / ".join(tail)}
    print(f"llm.c cudnn batch={b} seq={t} error={result['error']!r}")
else:
    med = statistics.median(timed)
    tps, mfu = gpt2_flops.from_config(config, med, gpu)
    result = {"median_ms": med, "p90_ms": statistics.quantiles(timed, n=10, method="inclusive")[8],
              "mean_ms": statistics.fmean(timed), "tokens_per_s": tps, "mfu": mfu,
              "steps_timed": len(timed), "first_loss": losses[0] if losses else None,
              "last_loss": losses[-1] if losses else None}
    m = re.search(r"total average iteration time: ([0-9.]+) ms", text)
    if m:
        result["llmc_average_ms"] = float(m.group(1))
    print(f"llm.c cudnn batch={b} seq={t} layers=12 heads=12 width=768 vocab=50257 precision=bf16 "
          f"median_ms={med:.4f} p90_ms={result['p90_ms']:.4f} tokens_per_s={tps:.0f} "
          f"mfu={'?' if mfu is None else f'{100 * mfu:.1f}%'} loss={result['first_loss']}->{result['last_loss']}")
def first_line(name):
    try:
        return open(stage + "/src/" + name).read().strip()
    except OSError:
        return None
commit = (first_line("LLMC_COMMIT") or "").split(" ")[0] or None
json.dump({"framework": "llm.c", "tool": "llmc_gpt2.sh", "gpu": gpu, "llmc_commit": commit,
           "built": first_line("LLMC_BUILT"),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "mfu_formula": gpt2_flops.FORMULA, "config": config, "results": {"cudnn": result}},
          open(path, "w"), indent=2)
sys.exit(0 if "error" not in result else 1)
EOF
}

case ${1:-} in
  stage) stage ;;
  build) build ;;
  run) shift; run "$@" ;;
  all) build || exit 1
       run 16 1024 "${LLMC_STEPS_LARGE:-40}"; rc=$?
       run 4 256 "${LLMC_STEPS_SMALL:-80}" || rc=1
       exit $rc ;;
  *) echo "usage: bash tools/bench/llmc_gpt2.sh stage | build | run B T [STEPS] | all" >&2; exit 2 ;;
esac
