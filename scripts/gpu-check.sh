#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in a few minutes: builds dtl-train against this machine's torch
# (scripts/build-cuda.sh, NCCL), checks that it trains under dtlaunch with NCCL at world size 1 (one
# GPU allows no more: NCCL refuses two ranks on one device), then measures bf16 tokens/s and model
# FLOPs utilisation of the GPT-2-small preset. Prints the figures for BENCHMARKS.md.
#
#   scripts/gpu-check.sh
#
# PYTHON       the Python with the CUDA torch to build against (default python3)
# BATCH        sequences of 1024 tokens per step for the GPT-2-small run (default 16)
# STEPS        steps of that run; the first 10 are not timed (default 50)
# PEAK_TFLOPS  the GPU's dense bf16 peak (default: 989 for H100/H200, 312 for A100, else required)
#
# On a machine without dtlaunch's libraries (a GPU machine with torch, CUDA, CMake and a compiler,
# nothing to install from), first run scripts/gpu-prepare.sh where they are, and carry gpu-kit/:
# its dtlaunch is used and only dtl-train is built here.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null || { echo "gpu-check.sh: nvidia-smi not found: no NVIDIA GPU here" >&2; exit 2; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in
  *H100* | *H200* | *GH200*) default_peak=989 ;;
  *A100*) default_peak=312 ;;
  *) default_peak= ;;
esac
peak=${PEAK_TFLOPS:-$default_peak}
[ -n "$peak" ] || { echo "gpu-check.sh: unknown bf16 peak for '$gpu'; set PEAK_TFLOPS" >&2; exit 2; }
batch=${BATCH:-16}
steps=${STEPS:-50}
echo "gpu-check: $gpu (bf16 peak $peak TFLOP/s), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"

start=$(date +%s)
if [ -x gpu-kit/bin/dtlaunch ]; then
  dtlaunch=gpu-kit/bin/dtlaunch
  export TRAINER_ONLY=1
else
  dtlaunch=build-cuda/apps/dtlaunch/dtlaunch
fi
BUILD_DIR=build-cuda scripts/build-cuda.sh >/tmp/gpu-check-build.log 2>&1 || { tail -40 /tmp/gpu-check-build.log; exit 1; }
echo "gpu-check: built in $(( $(date +%s) - start )) s ($(grep -m1 'build-cuda.sh: torch' /tmp/gpu-check-build.log)); dtlaunch: $dtlaunch"
trainer=build-cuda/apps/dtl-train/dtl-train
out=$(mktemp -d /tmp/gpu-check.XXXXXX)

# 1. NCCL at world size 1: the group forms, a collective runs every step, the loss falls.
timeout 300 "$dtlaunch" --standalone --nproc_per_node=1 --no_python "$trainer" --preset tiny --backend nccl \
  --steps 60 --log_every 20 --lr 1e-2 --metrics "$out/tiny.jsonl" >"$out/tiny.log" 2>&1 ||
  { cat "$out/tiny.log"; echo "gpu-check: FAIL: the NCCL run failed" >&2; exit 1; }
grep -q "nccl on cuda" "$out/tiny.log" || { cat "$out/tiny.log"; echo "gpu-check: FAIL: not on NCCL+CUDA" >&2; exit 1; }
python3 - "$out/tiny.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first, last = rows[0]["loss"], rows[-1]["loss"]
ok = last < first - 1.0
print(f"gpu-check: NCCL world size 1: loss {first:.3f} -> {last:.3f}  [{'PASS' if ok else 'FAIL'}]")
sys.exit(0 if ok else 1)
PY

# 2. GPT-2 small in bf16: tokens/s and MFU over the timed steps.
timeout 420 "$dtlaunch" --standalone --nproc_per_node=1 --no_python "$trainer" --preset gpt2-small --backend nccl \
  --mixed_precision bf16 --batch_size "$batch" --steps "$steps" --log_every 10 --peak_tflops "$peak" \
  --metrics "$out/gpt2.jsonl" >"$out/gpt2.log" 2>&1 || { cat "$out/gpt2.log"; echo "gpu-check: FAIL: GPT-2 run" >&2; exit 1; }
grep -m1 "dtl-train: 1 rank" "$out/gpt2.log" | sed 's/^\[default0\]:/gpu-check: /'
python3 - "$out/gpt2.jsonl" "$batch" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # the first 10 steps warm up
time = sum(r["step_time_s"] for r in rows)
tokens_per_s = sum(r["tokens_per_s"] * r["step_time_s"] for r in rows) / time
mfu = sum(r["mfu"] * r["step_time_s"] for r in rows) / time
print(f"gpu-check: GPT-2 small, bf16, batch {sys.argv[2]} x 1024: {tokens_per_s:,.0f} tokens/s, "
      f"step {time / len(rows) * 1e3:.1f} ms, MFU {mfu * 100:.1f}%  "
      f"[{'PASS' if mfu >= 0.4 else 'MISS'} goal >= 40%], final loss {rows[-1]['loss']:.3f}")
PY
echo "gpu-check: done in $(( $(date +%s) - start )) s; logs in $out"
