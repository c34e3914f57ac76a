#!/usr/bin/env bash
# dtl-train vs PyTorch's Python DDP, side by side in one run: the same model shape, batch,
# optimizer and schedule (scripts/bench/train_ddp.py mirrors dtl-train), Gloo, 2 ranks on CPU,
# dtl-train under dtlaunch and the Python script under torchrun. Prints tokens/s of both (best
# round: the machine may be busy), the ratio, tokens per CPU-second of a rank (steadier on a busy
# machine), and the share of dtl-train's allreduce time that was hidden behind backward.
#
#   scripts/bench/train_vs_ddp.sh [tiny|small|default|all]     (default: all)
#
# tiny:    2 layers, width 64, context 32, batch 4: framework overhead dominates
# small:   2 layers, width 128, context 64, batch 8
# default: dtl-train's default preset (10.8M parameters), batch 8 x 128: matrix products dominate
#
# BUILD_DIR   build folder with dtlaunch and dtl-train (default: build/)
# ROUNDS      runs of each side, alternating; the best of each is compared, and the median of the
#             rounds' ratios is printed too (default 3)
# STEPS       optimizer steps per run; the first interval of 5 is not timed (default 20)
# BUCKET_MB   gradient bucket size for both sides (default 4: on a CPU the backward of one block takes
#             far longer than the allreduce of its gradients, so small buckets hide nearly all of it)
# BLAS_DIR    a folder with another libblas.so.3 (e.g. OpenBLAS) for both sides; Debian's libtorch
#             uses the reference BLAS unless libopenblas0 is installed, which is ~20x slower
#             (scripts/setup.sh installs libopenblas0-pthread, so BLAS_DIR is not needed after it)
# OPENBLAS_CORETYPE  passed to both sides, as any variable; the kernel set in use is printed at the
#             top. Haswell (AVX2) runs at half the speed of OpenBLAS's own choice on an AVX-512
#             machine: `env -u OPENBLAS_CORETYPE scripts/bench/...` measures that
# KERNELS     dtl-train's --kernels (default fused; torch: torch's ops, as the Python side; CPU_KERNELS
#             is its older name)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$repo/build}
dtlaunch=$build/apps/dtlaunch/dtlaunch
trainer=$build/apps/dtl-train/dtl-train
python=${TORCHRUN_PYTHON:-/usr/bin/python3}
rounds=${ROUNDS:-3}
kernels=${KERNELS:-${CPU_KERNELS:-fused}}
steps=${STEPS:-20}
bucket_mb=${BUCKET_MB:-4}
which=${1:-all}
for f in "$dtlaunch" "$trainer"; do
  [ -x "$f" ] || { echo "train_vs_ddp.sh: $f not found; build with scripts/build.sh (or set BUILD_DIR)" >&2; exit 2; }
done
if [ -n "${BLAS_DIR:-}" ]; then export LD_LIBRARY_PATH=$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
# torchrun of Debian's torch 1.13 breaks on Python 3.11 (Std.from_str); the compat wrapper fixes it.
# Its --standalone also always takes port 29400 and joins whatever store listens there: the wrapper
# picks a free port instead when asked.
torchrun=("$python" -m torch.distributed.run)
[ -f "$here/torchrun_compat.py" ] && torchrun=("$python" "$here/torchrun_compat.py")
export TORCHRUN_COMPAT_FREE_PORT=1
tmp=$(mktemp -d /tmp/train-vs-ddp.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

blas=$(ldd "$trainer" | awk '/libblas.so/ {print $3}')
# One import of torch for its version and, with OPENBLAS_VERBOSE=2, the kernel set OpenBLAS picked.
torch_info=$(OPENBLAS_VERBOSE=2 "$python" -c 'import torch; print("torch", torch.__version__)' 2>&1)
core=$(sed -n 's/^Core: //p' <<<"$torch_info" | head -1)
echo "machine: $(nproc) CPUs, $(uname -m), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1); $(grep -m1 '^torch ' <<<"$torch_info")"
echo "BLAS: $(readlink -f "$blas")${core:+, OpenBLAS kernels: $core}${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}"
echo "both sides: 2 ranks, Gloo, OMP_NUM_THREADS=1, AdamW, warmup+cosine, clip 1.0, $bucket_mb MB buckets, $steps steps; dtl-train --kernels $kernels"

run_pair() {  # name, then the shape flags shared by both programs
  local name=$1; shift
  local shape=("$@")
  echo
  echo "== $name: ${shape[*]}"
  local r
  for r in $(seq 1 "$rounds"); do
    "$dtlaunch" --standalone --nproc_per_node=2 --no_python "$trainer" "${shape[@]}" --steps "$steps" \
      --log_every 5 --bucket_mb "$bucket_mb" --kernels "$kernels" --metrics "$tmp/$name.dtl.$r.jsonl" >"$tmp/$name.dtl.$r.log" 2>&1 ||
      { cat "$tmp/$name.dtl.$r.log"; exit 1; }
    # torchrun 1.13's agent sometimes loses its own store while its workers exit: one retry.
    local try
    for try in 1 2; do
      OMP_NUM_THREADS=1 "${torchrun[@]}" --standalone --nproc_per_node=2 "$here/train_ddp.py" "${shape[@]}" \
        --steps "$steps" --skip 5 --bucket_mb "$bucket_mb" >"$tmp/$name.ddp.$r.log" 2>&1 && break
      [ "$try" = 2 ] && { cat "$tmp/$name.ddp.$r.log"; exit 1; }
    done
  done
  "$python" - "$tmp" "$name" "$rounds" <<'PY'
import json, statistics, sys
tmp, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
dtl, ddp = [], []
for r in range(1, rounds + 1):
    rows = [json.loads(l) for l in open(f"{tmp}/{name}.dtl.{r}.jsonl")][1:]  # the first interval warms up
    time = sum(x["step_time_s"] for x in rows)
    tokens = sum(x["tokens_per_s"] * x["step_time_s"] for x in rows)  # global tokens, one step per interval
    per_rank_step = tokens / len(rows) / rows[0]["world_size"]
    cpu = sum(x["cpu_time_s"] for x in rows) / len(rows)
    hidden = sum(x["comm_hidden_share"] * x["step_time_s"] for x in rows) / time
    wait = sum(x["comm_wait_share"] * x["step_time_s"] for x in rows) / time
    dtl.append({"tps": tokens / time, "cpu": per_rank_step / cpu, "hidden": hidden, "wait": wait})
    line = [l for l in open(f"{tmp}/{name}.ddp.{r}.log") if '{"tokens_per_s"' in l][-1]
    d = json.loads(line[line.index("{"):])
    ddp.append({"tps": d["tokens_per_s"], "cpu": d["tokens_per_s"] * d["step_time_s"] / d["world_size"] / d["cpu_time_s"]})
def row(label, runs):
    best = max(runs, key=lambda x: x["tps"])
    each = ", ".join(f"{x['tps']:.0f}" for x in runs)
    print(f"{label:11} tokens/s {best['tps']:8.0f} (rounds: {each});"
          f"  tokens per CPU-second of a rank {max(x['cpu'] for x in runs):7.0f}")
    return best
a, b = row("dtl-train", dtl), row("Python DDP", ddp)
ratio = a["tps"] / b["tps"]
cpu_ratio = max(x["cpu"] for x in dtl) / max(x["cpu"] for x in ddp)
# Each round runs dtl-train, then Python DDP: the ratio within a round sees the same machine load.
per_round = sorted(x["tps"] / y["tps"] for x, y in zip(dtl, ddp))
median = statistics.median(per_round)
print(f"ratio dtl-train / DDP: {ratio:.2f}x tokens/s [{'PASS' if ratio >= 1.2 else 'MISS'} goal >= 1.2x], "
      f"{cpu_ratio:.2f}x tokens per CPU-second; per round {', '.join(f'{r:.2f}' for r in per_round)} "
      f"(median {median:.2f}x)")
print(f"dtl-train allreduce hidden behind backward: {a['hidden'] * 100:.1f}% "
      f"[{'PASS' if a['hidden'] >= 0.8 else 'MISS'} goal >= 80%]; step time waiting for gradients: {a['wait'] * 100:.1f}%")
PY
}

if [ "$which" = tiny ] || [ "$which" = all ]; then
  run_pair tiny --layers 2 --width 64 --heads 4 --context 32 --vocab 256 --batch_size 4
fi
if [ "$which" = small ] || [ "$which" = all ]; then
  run_pair small --layers 2 --width 128 --heads 4 --context 64 --vocab 256 --batch_size 8
fi
if [ "$which" = default ] || [ "$which" = all ]; then
  run_pair default --layers 6 --width 384 --heads 6 --context 128 --vocab 256 --batch_size 8
fi
