#!/usr/bin/env bash
# GPT-2 124M on the GPU host, reprise beside its peers, in one call (from the repository root of a
# checkout with .stage: reprise's staged tools, .stage/llmc from `bash tools/bench/llmc_gpt2.sh
# stage`, and the Python module in .stage/python or $REPRISE_PYTHON_PATH):
#   bash tools/device/gpt2_peers.sh [check] [reprise] [torch] [llmc]      (default: all four)
# Shapes: B=16 T=1024 and B=4 T=256, bf16, AdamW + clipping + warm-up/cosine, random tokens
# (llm.c: staged shards). Each program runs under `timeout`; logs and JSON land in
# /tmp/gpt2-peers and travel back as $OUT/gpt2_peers.tgz after every phase (a timeout keeps
# what ran), and the summary (report.py's tables of ms, tokens/s, MFU and the check's PASS/FAIL)
# as $OUT/gpt2_summary.md. llm.c is built in the background while the check and reprise run
# (2-3 minutes of nvcc on one core), unless .stage/llmc holds a train_gpt2cu built ahead of time
# that finds its libraries here. Expected wall time about 5-7 minutes, much of it torch.compile
# (roughly a minute per shape, less for the graph mode's second compile from the cache).
# GPT2_STEPS_SCALE=0.5 halves every timed step count; GPT2_REPRISE_FLAGS adds flags to reprise's
# runs (e.g. "--measure_matmul").
set -uo pipefail
work=/tmp/gpt2-peers
rm -rf "$work" && mkdir -p "$work"
out=${OUT:-$work}
phases=("$@")
((${#phases[@]})) || phases=(check reprise torch llmc)
want() { local p; for p in "${phases[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }
save() { tar czf "$out/gpt2_peers.tgz" -C "$work" . 2>/dev/null; }
note() { echo "gpt2_peers: $*" | tee -a "$work/phases.txt"; }
steps() { python3 -c "print(max(2, round($1 * ${GPT2_STEPS_SCALE:-1})))"; }
export PYTHONUNBUFFERED=1
[[ -f .stage/env.sh ]] && source .stage/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$work/gpu.txt"
start=$SECONDS

# A timed phase: note NAME LIMIT_S COMMAND... (output in $work/NAME.log, its tail printed).
phase() {
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  timeout --kill-after=10 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "(stopped at its ${limit} s limit)" >> "$work/$name.log"
  grep -E '^(torch|llm.c|gpt2_torch_check|graph |mode |precision|fp32|bf16|reprise-bench: error)|error|Error' \
    "$work/$name.log" | grep -v '^reprise-bench: measuring' | tail -n 14
  note "$name: exit $rc in $((SECONDS - t0)) s (limit $limit s)"
  save
}

if want llmc; then
  (OUT=$work nice -n 5 bash tools/bench/llmc_gpt2.sh build > "$work/llmc_build_stdout.log" 2>&1;
   echo $? > "$work/llmc_build.rc") &
  llmc_build=$!
  note "llm.c: building in the background (pid $llmc_build)"
fi

if want check; then
  [[ -z ${REPRISE_PYTHON_PATH:-} && -d .stage/python/reprise ]] && export REPRISE_PYTHON_PATH=$PWD/.stage/python
  phase check 240 python3 tools/bench/gpt2_torch_check.py --json "$work/check.json"
fi

if want reprise; then
  if ! command -v reprise-bench > /dev/null; then
    note "reprise: no reprise-bench on PATH (stage build/tools into .stage)"
  else
    help=$(reprise-bench --helpfull 2>&1)
    grep -q -- '--seq' <<< "$help" || note "reprise: warning: reprise-bench has no --seq flag; its GPT-2 model may not be there"
    if grep -q -- '--dtype' <<< "$help"; then precision=(--dtype bf16); else precision=(--bf16); fi
    for shape in "16 1024 $(steps 50)" "4 256 $(steps 200)"; do
      set -- $shape
      # --model gpt2 trains with nanoGPT's AdamW, clipping and warm-up + cosine unless told
      # otherwise: the peers' optimizer.
      phase "reprise_b$1_t$2" 180 reprise-bench --model gpt2 --batch "$1" --seq "$2" "${precision[@]}" \
        --mode graph --fusion on --inputs device --iters "$3" --warmup 10 ${GPT2_REPRISE_FLAGS:-} \
        --json "$work/reprise_b$1_t$2.json"
      # Where reprise-bench records no GPT-2 fields (its "depth" and "width" are then the MLP
      # flags' defaults, unused), name the model it ran, GPT-2 124M at this shape, so that
      # report.py puts its row beside the peers'; say so in the file.
      python3 - "$work/reprise_b$1_t$2.json" "$1" "$2" <<'EOF' 2>/dev/null
import json, sys
path, b, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = json.load(open(path))
c = d.setdefault("config", {})
if "layers" not in c:
    c.update(model="gpt2", batch=b, seq=t, layers=12, heads=12, width=768, vocab=50257,
             positions=1024, bf16=True)
    d["config_filled_by"] = "gpt2_peers.sh: reprise-bench recorded no GPT-2 fields"
c.setdefault("seq", t)
json.dump(d, open(path, "w"), indent=2)
EOF
    done
  fi
fi

if want torch; then
  phase torch_b16_t1024 330 python3 tools/bench/torch_gpt2.py --batch 16 --seq 1024 \
    --steps "$(steps 30)" --warmup 10 --json "$work/torch_b16_t1024.json"
fi

if want llmc; then
  wait "$llmc_build"
  cat "$work/llmc_build_stdout.log"
  if [[ $(cat "$work/llmc_build.rc" 2>/dev/null) == 0 ]]; then
    note "llm.c: built"
    phase llmc_b16_t1024 120 env OUT="$work" bash tools/bench/llmc_gpt2.sh run 16 1024 "$(steps 40)"
    phase llmc_b4_t256 120 env OUT="$work" bash tools/bench/llmc_gpt2.sh run 4 256 "$(steps 100)"
  else
    note "llm.c: build failed (llmc_build.log)"
    save
  fi
fi

if want torch; then
  phase torch_b4_t256 270 python3 tools/bench/torch_gpt2.py --batch 4 --seq 256 \
    --steps "$(steps 100)" --warmup 20 --json "$work/torch_b4_t256.json"
fi

{
  echo "# GPT-2 peers, $(cat "$work/gpu.txt"), $(date -u +%Y-%m-%dT%H:%MZ), $((SECONDS - start)) s"
  echo
  sed 's/^/    /' "$work/phases.txt"
  echo
  shopt -s nullglob
  python3 tools/bench/report.py "$work"/*.json 2>&1
} > "$work/gpt2_summary.md"
cp "$work/gpt2_summary.md" "$out/gpt2_summary.md" 2>/dev/null
save
cat "$work/gpt2_summary.md"
