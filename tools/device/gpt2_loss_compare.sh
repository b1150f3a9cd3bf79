#!/usr/bin/env bash
# Issue 40's loss bar on the GPU host: train_gpt2 trains GPT-2 on the Shakespeare shards and
# records its run (initial weights, every batch's tokens, every loss), PyTorch repeats the run from
# those weights on the same batches (tools/bench/torch_gpt2_train.py), and
# tools/bench/gpt2_loss_compare.py prints both curves and the verdict (exit 0 PASS, 1 FAIL, 2 the
# runs could not be compared). From the repository root of a checkout with .stage (train_gpt2
# built from this tree, on PATH after `source .stage/env.sh`; the shards in
# .stage/data/shakespeare, or $GPT2_DATA):
#   bash tools/device/gpt2_loss_compare.sh [STEPS [BATCH [SEQ]]] [-- train_gpt2 flags...]
# Defaults: GPT-2 124M, 300 steps of B=16, T=1024 (3.5 epochs of the 1.4M training tokens),
# lr 6e-4 with 20 warm-up steps then cosine to 0.1x, bf16; validation every 50 steps on the
# validation shard's 6 batches. About 20 s for reprise and 30-60 s for PyTorch eager on an H200.
# `--small` after `--` trains the 4-layer, 256-wide model instead. Logs land in /tmp/gpt2-loss
# and travel back in $OUT.
set -uo pipefail
steps=${1:-300}
batch=${2:-16}
seq=${3:-1024}
while (($#)) && [[ $1 != -- ]]; do shift; done
(($#)) && shift
work=/tmp/gpt2-loss
rm -rf "$work" && mkdir -p "$work"
out=${OUT:-$work}
export PYTHONUNBUFFERED=1
[[ -f .stage/env.sh ]] && source .stage/env.sh
data=${GPT2_DATA:-}
for d in .stage/data/shakespeare data/shakespeare; do
  [[ -z $data && -d $d ]] && data=$d
done
[[ -n $data ]] || { echo "gpt2_loss_compare: no shards (.stage/data/shakespeare or \$GPT2_DATA)"; exit 2; }
command -v train_gpt2 > /dev/null || { echo "gpt2_loss_compare: no train_gpt2 on PATH"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$work/gpu.txt"
finish() { cp "$work"/*.log "$work"/*.txt "$out"/ 2> /dev/null; exit "$1"; }

t0=$SECONDS
timeout --kill-after=10 400 train_gpt2 --data_dir "$data" --batch "$batch" --seq "$seq" \
  --steps "$steps" --eval_every 50 --eval_batches 8 --print_every 50 --checkpoint "" \
  --samples 0 --save_initial "$work/init.safetensors" --loss_log "$work/reprise.log" \
  --batch_log "$work/batches.bin" "$@" > "$work/reprise_out.txt" 2>&1
rc=$?
tail -n 12 "$work/reprise_out.txt"
echo "gpt2_loss_compare: reprise exit $rc in $((SECONDS - t0)) s"
((rc == 0)) || finish 2

t0=$SECONDS
timeout --kill-after=10 500 python3 tools/bench/torch_gpt2_train.py --reprise-log "$work/reprise.log" \
  --init "$work/init.safetensors" --batch-log "$work/batches.bin" --data-dir "$data" \
  --out "$work/torch.log" > "$work/torch_out.txt" 2>&1
rc=$?
tail -n 8 "$work/torch_out.txt"
echo "gpt2_loss_compare: torch exit $rc in $((SECONDS - t0)) s"
((rc == 0)) || finish 2

python3 tools/bench/gpt2_loss_compare.py "$work/reprise.log" "$work/torch.log" --every 25 \
  | tee "$work/compare.txt"
finish "${PIPESTATUS[0]}"
