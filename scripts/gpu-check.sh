#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in at most 8 minutes: builds dtl-train against this machine's
# torch (scripts/build-cuda.sh, NCCL) and, meanwhile, hangs an NCCL job on purpose; then measures
# NCCL's all_reduce, trains dtl-train under dtlaunch with NCCL on one rank and two, and measures
# GPT-2 small's tokens/s (beside llm.c's 468,000 per GPU), model FLOPs utilisation and peak device
# memory: bf16 with dtl-train's fast paths (its classifier, torch's SDPA: the start line names the
# kernel torch chose) and with torch's ops, fp16 with the loss scaler, each ZeRO stage, the
# optimizer's offload to host memory, and the other of cuDNN's and flash attention. Prints the
# figures for BENCHMARKS.md.
#
#   scripts/gpu-check.sh
#
# With one GPU, the two-rank checks (the hang, the two-rank bandwidth, two-rank dtl-train) share
# it: each rank tells NCCL it is on a host of its own (tests/gpu/shared_gpu.py), so NCCL runs its
# real collectives over its socket transport. Their bandwidth is then not a link's.
#
# PYTHON       the Python with the CUDA torch (default python3)
# BATCH        sequences of 1024 tokens per step for the GPT-2-small run (default 16)
# STEPS        steps of that run; the first 10 are not timed (default 50)
# PEAK_TFLOPS  the GPU's dense bf16 peak (default: 989 for H100/H200, 312 for A100, else required)
# GPU_CHECK_OUT  folder for summary.txt and logs.tar.gz (default: a new folder under /tmp)
# NCCL_BANDWIDTH 0: skip the all_reduce bandwidth
# ZERO_STEPS   steps of each GPT-2 run after the first (default 30; 0 skips them)
# GPU_CHECK_BUDGET_S  seconds from the start after which no GPT-2 run starts, and which none outlasts
#              (default 480); the runs it leaves out are named, and the check then fails
#
# On a machine without dtlaunch's libraries (a GPU machine with torch, CUDA, CMake and a compiler,
# nothing to install from), first run scripts/gpu-prepare.sh where they are, and carry gpu-kit/:
# its dtlaunch and py-spy are used and only dtl-train is built here.
set -uo pipefail
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
python=${PYTHON:-python3}
out=${GPU_CHECK_OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
logs=$(mktemp -d /tmp/gpu-check-logs.XXXXXX)
mkdir -p "$out"
failed=()
skipped=()
budget=${GPU_CHECK_BUDGET_S:-480}
LLMC_TOKENS_PER_S=468000  # llm.c's GPT-2 small (124M), bf16, per H100 GPU
GOAL_TOKENS_PER_S=470000
say() { echo "gpu-check: $*" | tee -a "$out/summary.txt"; }
fail() { failed+=("$1"); say "FAIL: $*"; }
# Each line of a job's output with the time it was read (seconds since the epoch).
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
first_time() { grep -m1 -E "$2" "$1" | cut -d' ' -f1; }  # when a stamped log first matched
since() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}' || echo "?"; }
finish() {
  tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null
  say "done in $((SECONDS)) s; summary and logs in $out"
  [ ${#skipped[@]} -eq 0 ] || say "not run, out of time: ${skipped[*]}"
  [ ${#failed[@]} -eq 0 ] || say "failed: ${failed[*]}"
  if [ ${#failed[@]} -gt 0 ] || [ ${#skipped[@]} -gt 0 ]; then exit 1; fi
}
trap finish EXIT

say "$gpu (bf16 peak $peak TFLOP/s), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), $(nvidia-smi -L | wc -l) GPU(s)"
say "$("$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -1)"
if [ -x gpu-kit/bin/dtlaunch ]; then
  dtlaunch=$PWD/gpu-kit/bin/dtlaunch
  export PATH=$PWD/gpu-kit/bin:$PATH  # py-spy
  export TRAINER_ONLY=1
else
  dtlaunch=$PWD/build-cuda/apps/dtlaunch/dtlaunch
fi
export PYTHON_EXEC=$python
trainer=build-cuda/apps/dtl-train/dtl-train
say "py-spy: $(command -v py-spy || echo none)"

# 0. The build, in the background: only the hang below runs meanwhile.
build_start=$SECONDS
(PYTHON=$python BUILD_DIR=build-cuda nice -n 10 scripts/build-cuda.sh >"$logs/build.log" 2>&1; echo $? >"$logs/build.rc") &
build_pid=$!
if [ ! -x "$dtlaunch" ]; then
  wait "$build_pid"
fi

# 1. An NCCL hang: rank 1 stops, rank 0 waits behind its all_reduce, spinning in the CUDA
# synchronisation of .item(). dtlaunch watches with a 10 s timeout and only reports; NCCL's own
# watchdog (25 s) then says so in the store, and ends the job. Meanwhile: `dtlaunch stacks`, and each
# thread's state and CPU time.
hang=$logs/hang
mkdir -p "$hang"
hang_start=$EPOCHREALTIME
({ NCCL_TIMEOUT_S=25 TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=2000 timeout 150 "$dtlaunch" --standalone --nproc_per_node=2 \
  --hang_timeout=10 --on_hang=report --log_dir "$hang/logs" tests/gpu/nccl_hang.py sleep 2>&1; echo "exit $?"; } |
  stamp >"$hang/job.log") &
job=$!
for _ in $(seq 120); do grep -q "rank 1 stops" "$hang/job.log" && break; sleep 0.5; done
stopped=$(first_time "$hang/job.log" "rank 1 stops")
pid0=$(sed -n 's/.*rank 0 pid \([0-9]*\) ready.*/\1/p' "$hang/job.log" | head -1)
pid1=$(sed -n 's/.*rank 1 pid \([0-9]*\) ready.*/\1/p' "$hang/job.log" | head -1)
threads() {  # each thread of a process: name, state, CPU ticks
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(cat "$t/comm" 2>/dev/null | tr ' ' _)" "$(cut -d')' -f2 "$t/stat" 2>/dev/null | awk '{print $1, $12 + $13}')"
  done
}
if [ -n "$stopped" ] && [ -n "$pid0" ]; then
  say "NCCL hang: both ranks ready $(since "$hang_start" "$stopped") s after start (pids $pid0, $pid1)"
  sleep 13
  for _ in 1 2 3; do
    t=$EPOCHREALTIME; timeout 30 "$dtlaunch" stacks >"$hang/stacks.txt" 2>&1; echo "exit $?" >>"$hang/stacks.txt"
    grep -q "ask again" "$hang/stacks.txt" || break
    sleep 2
  done
  say "NCCL hang: \`dtlaunch stacks\` answered in $(since "$t" "$EPOCHREALTIME") s: $(grep -E '^  [01] ' "$hang/stacks.txt" | awk '{printf "rank %s %s %s%% %s %s %s %s; ", $1, $4, $5, $7, $8, $9, $10}')"
  { echo "== threads of rank 0 ($pid0), then 2 s later"; threads "$pid0"; sleep 2; echo "--"; threads "$pid0"
    echo "== threads of rank 1 ($pid1)"; threads "$pid1"
    echo "== GPU: $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"; } >"$hang/threads.txt" 2>&1
else
  fail "nccl-hang: the ranks did not reach the hang (see hang/job.log)"
fi
wait "$job"
reported=$(first_time "$hang/job.log" "dtlaunch: hang: no rank printed")
signalled=$(first_time "$hang/job.log" "dtlaunch: hang: .*NCCL watchdog")
dumped=$(first_time "$hang/job.log" "exception_dump=")
ended=$(first_time "$hang/job.log" "^[0-9.]+ exit ")
say "NCCL hang: dtlaunch's report $(since "$stopped" "$reported") s after rank 1 stopped (hang_timeout 10 s); $(grep -m1 -o 'suspect rank .*' "$hang/job.log" || echo 'no suspect named')"
say "NCCL hang: exception_dump in the store after $(since "$stopped" "$dumped") s, dtlaunch's report of it after $(since "$stopped" "$signalled") s; the job ended after $(since "$stopped" "$ended") s with $(grep -m1 -o '^[0-9.]* exit [0-9]*' "$hang/job.log" | cut -d' ' -f2-)"
grep -E "doing|  [01]  |Watchdog caught|Root Cause|exitcode|traceback" "$hang/job.log" | head -14 | cut -c1-240 >>"$out/summary.txt"
grep -q "suspect rank 1 on" "$hang/job.log" || fail "nccl-hang: the suspect is not rank 1"
[ -n "$signalled" ] || fail "nccl-hang: NCCL's exception_dump was not reported"

# 1b. Rank 1 spins in Python while rank 0 waits: every rank is busy on a CPU, so the silence rule
# stays quiet; the flight recorder's progress, read through NCCL's pipe, shows rank 0's all_reduce
# not completed for the 10 s timeout, before NCCL's watchdog (20 s) says so in the store; --on_hang=fail.
{ NCCL_TIMEOUT_S=20 TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=2000 timeout 120 "$dtlaunch" --standalone --nproc_per_node=2 \
  --hang_timeout=10 --on_hang=fail --log_dir "$hang/logs-spin" tests/gpu/nccl_hang.py spin 2>&1; echo "exit $?"; } |
  stamp >"$hang/spin.log"
stopped=$(first_time "$hang/spin.log" "rank 1 stops")
say "NCCL hang, rank 1 spinning, --on_hang=fail: exception_dump after $(since "$stopped" "$(first_time "$hang/spin.log" "exception_dump=")") s, dtlaunch's report after $(since "$stopped" "$(first_time "$hang/spin.log" "dtlaunch: hang:")") s, $(grep -m1 -o '^[0-9.]* exit [0-9]*' "$hang/spin.log" | cut -d' ' -f2-) after $(since "$stopped" "$(first_time "$hang/spin.log" "^[0-9.]+ exit ")") s; $(grep -m1 -o 'suspect rank .*' "$hang/spin.log" || echo 'no suspect named')"
grep -E "dtlaunch: hang|  [01]  " "$hang/spin.log" | head -4 | cut -c1-240 >>"$out/summary.txt"
grep -q "suspect rank 1 on" "$hang/spin.log" || fail "nccl-hang-spin: the suspect is not rank 1"
grep -Eq "dtlaunch: hang: rank 0's all_reduce #[0-9]+ of process group [^ ]+ has not completed in" "$hang/spin.log" ||
  fail "nccl-hang-spin: the report did not come from the flight recorder's progress"

# 2. The same hang on the first attempt only, with --on_hang=fail: dtlaunch stops the group, restarts
# it, and the second attempt's NCCL group finishes.
t=$EPOCHREALTIME
{ NCCL_TIMEOUT_S=120 timeout 150 "$dtlaunch" --standalone --nproc_per_node=2 --hang_timeout=10 --on_hang=fail \
  --max_restarts=1 --log_dir "$hang/logs-restart" tests/gpu/nccl_hang.py first-attempt 2>&1; echo "exit $?"; } |
  stamp >"$hang/restart.log"
rc=$(grep -o '^[0-9.]* exit [0-9]*' "$hang/restart.log" | awk '{print $3}')
say "NCCL hang, --on_hang=fail --max_restarts=1: exit $rc after $(since "$t" "$EPOCHREALTIME") s; report after $(since "$(first_time "$hang/restart.log" "rank 1 stops")" "$(first_time "$hang/restart.log" "dtlaunch: hang:")") s; the second attempt done $(since "$(first_time "$hang/restart.log" "dtlaunch: hang:")" "$(first_time "$hang/restart.log" "rank 0 done")") s after it; $(grep -m1 -o 'suspect rank .*' "$hang/restart.log" || echo 'no suspect named')"
[ "$rc" = 0 ] || fail "nccl-hang-restart: exit $rc"

# 3. NCCL all_reduce: one rank, then two (NCCL_BANDWIDTH=0 skips it).
for n in $([ "${NCCL_BANDWIDTH:-1}" = 0 ] || echo 1 2); do
  timeout 120 "$dtlaunch" --standalone --nproc_per_node=$n tests/gpu/nccl_bandwidth.py >"$logs/bandwidth$n.log" 2>&1 ||
    fail "bandwidth-$n: see bandwidth$n.log"
  grep -o '{.*}' "$logs/bandwidth$n.log" | sed 's/^/NCCL all_reduce: /' | while read -r l; do say "$l"; done
done

# The build.
wait "$build_pid"
if [ "$(cat "$logs/build.rc")" != 0 ]; then
  tail -40 "$logs/build.log" >>"$out/summary.txt"
  fail "build: scripts/build-cuda.sh failed (tail above)"
  exit 1
fi
say "dtl-train built in $((SECONDS - build_start)) s, in the background ($(grep -m1 'build-cuda.sh: torch' "$logs/build.log"))"

# 4. dtl-train with NCCL: the group forms, a collective runs every step, the loss falls; one rank,
# then two (sharing the GPU when there is one).
for n in 1 2; do
  timeout 300 "$dtlaunch" --standalone --nproc_per_node=$n --no_python sh -c \
    'if [ "$LOCAL_WORLD_SIZE" -gt "$(nvidia-smi -L | wc -l)" ]; then export NCCL_HOSTID=$(hostname)-rank$RANK NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1; fi; exec "$@"' \
    sh "$trainer" --preset tiny --backend nccl --steps 60 --log_every 20 --lr 1e-2 --metrics "$logs/tiny$n.jsonl" \
    >"$logs/tiny$n.log" 2>&1 || { fail "train-$n: dtl-train failed under NCCL (tiny$n.log)"; continue; }
  grep -q "nccl on cuda" "$logs/tiny$n.log" || { fail "train-$n: not on NCCL+CUDA"; continue; }
  "$python" - "$logs/tiny$n.jsonl" "$n" <<'PY' | while read -r l; do say "$l"; done
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first, last = rows[0]["loss"], rows[-1]["loss"]
print(f"dtl-train, NCCL, {sys.argv[2]} rank(s): loss {first:.3f} -> {last:.3f}  [{'PASS' if last < first - 1.0 else 'FAIL'}], "
      f"{rows[-1]['tokens_per_s']:,.0f} tokens/s")
PY
done

# GPT-2 small on one rank: `gpt2 NAME STEPS TIMEOUT [dtl-train flags]` trains it (bf16 unless the
# flags name another precision) and prints, over the timed steps (the first 10 warm up), tokens/s
# beside llm.c's per-GPU figure, MFU (the start line's FLOPs per token: 6N + 12 L C T), the peak
# device memory (torch.cuda.max_memory_allocated), where AdamW's state is, and the kernels the start
# line names (the attention's as torch chose it). A run that the time budget cannot hold is skipped.
gpt2() {
  local name=$1 n=$2 limit=$3 left
  shift 3
  [[ " $* " == *" --mixed_precision "* ]] || set -- --mixed_precision bf16 "$@"
  left=$((budget - SECONDS - 10))
  if [ "$left" -lt 45 ]; then
    skipped+=("$name")
    say "$name: not run, $((budget - SECONDS)) s of the ${budget} s budget left (dtl-train $*)"
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  if ! timeout "$limit" "$dtlaunch" --standalone --nproc_per_node=1 --no_python "$trainer" --preset gpt2-small \
    --backend nccl --batch_size "$batch" --steps "$n" --log_every 10 --peak_tflops "$peak" \
    --metrics "$logs/$name.jsonl" "$@" >"$logs/$name.log" 2>&1; then
    tail -20 "$logs/$name.log" >>"$out/summary.txt"
    fail "$name: the GPT-2 run ($*) failed or ran past ${limit} s (tail above)"
    return 1
  fi
  "$python" - "$logs/$name.jsonl" "$logs/$name.log" "$name" "$batch" "$LLMC_TOKENS_PER_S" "$GOAL_TOKENS_PER_S" <<'PY' | while read -r l; do say "$l"; done
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # the first 10 steps warm up
log = open(sys.argv[2]).read()
name, batch, llmc, goal = sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
time = sum(r["step_time_s"] for r in rows)
tokens_per_s = sum(r["tokens_per_s"] * r["step_time_s"] for r in rows) / time
mfu = sum(r["mfu"] * r["step_time_s"] for r in rows) / time
start = re.search(r"mixed precision (\w+), (.*?), data ", log)
peak = re.search(r"peak device memory: (\d+) bytes", log)
held = re.search(r"optimizer state (\d+) bytes( in host memory)?", log)
skipped = len(re.findall(r"gradients not finite at loss scale", log))
verdict = f" [{'PASS' if tokens_per_s >= goal else 'MISS'} goal >= {goal:,.0f}]" if name == "zero0" else ""
print(f"GPT-2 small, {start.group(1)}, {name}, batch {batch} x 1024: {tokens_per_s:,.0f} tokens/s = "
      f"{tokens_per_s / llmc:.2f}x llm.c's {llmc:,.0f} per GPU{verdict}, MFU {mfu * 100:.1f}%, "
      f"step {time / len(rows) * 1e3:.1f} ms, peak device memory {int(peak.group(1)) / 2**30:.2f} GiB, "
      f"AdamW state {int(held.group(1)) / 2**30:.2f} GiB{' in host memory' if held.group(2) else ' on the GPU'}, "
      f"final loss {rows[-1]['loss']:.3f}{f', {skipped} step(s) skipped by the loss scaler' if skipped else ''}; "
      f"kernels: {start.group(2)}")
PY
}

# 5. GPT-2 small in bf16, data parallel (--zero 0), with dtl-train's fast paths (the default
# --kernels fused). Every GPT-2 run ends within GPU_CHECK_BUDGET_S seconds of the start.
gpt2 zero0 "$steps" 300 && say "$(grep -m1 "dtl-train: 1 rank" "$logs/zero0.log" | sed 's/^\[default0\]://')"
zero_steps=${ZERO_STEPS:-30}
if [ "$zero_steps" -gt 10 ]; then
  # 6. ZeRO stages 1-3, and stage 2 with AdamW's state and step in host memory. One rank: every
  # stage's code runs on the GPU, and the offload moves the 8 bytes per parameter of AdamW's
  # moments off it.
  for stage in 1 2 3; do gpt2 "zero$stage" "$zero_steps" 200 --zero "$stage"; done
  gpt2 zero2-offload "$zero_steps" 200 --zero 2 --offload_optimizer cpu
  # Offload needs a sharded optimizer: at stage 0 it is refused in one line.
  if "$trainer" --preset tiny --steps 1 --offload_optimizer cpu >"$logs/offload0.log" 2>&1 ||
    ! grep -q "it needs --zero 1, 2 or 3" "$logs/offload0.log"; then
    fail "offload at stage 0: not refused as expected (offload0.log)"
  fi
  # 7. fp16 with the dynamic loss scaler, stage 0.
  gpt2 zero0-fp16 "$zero_steps" 200 --mixed_precision fp16
  # 8. If time is left (these two are not required): torch's ops instead of the fast paths, for the
  # difference they make; and the other of cuDNN's and flash attention than torch chose for step 5.
  other=
  if grep -q "SDPA (cuDNN" "$logs/zero0.log"; then other=flash; elif grep -q "SDPA (flash" "$logs/zero0.log"; then other=cudnn; fi
  for extra in torch-ops ${other:+$other}; do
    if [ $((budget - SECONDS)) -lt 90 ]; then
      say "zero0-$extra: not run (not required), $((budget - SECONDS)) s of the ${budget} s budget left"
    elif [ "$extra" = torch-ops ]; then
      gpt2 zero0-torch-ops "$zero_steps" 200 --kernels torch
    else
      gpt2 "zero0-$extra" "$zero_steps" 200 --attention "$extra"
    fi
  done
fi
