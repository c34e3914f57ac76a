#!/usr/bin/python3
"""dtl-train's ZeRO stages 0-3 against its stage 0 and against Python's own, side by side in one run.

    python3 scripts/bench/train_zero.py [--rounds 3] [--steps 20]

CPU, Gloo, 2 ranks, dtl-train's default preset (10.8M parameters), batch 8 x 128, 4 MB buckets,
OMP_NUM_THREADS=1 on both sides. Each round runs, in turn: dtl-train --zero 0, 1, 2 and 3 under
dtlaunch, then scripts/bench/train_ddp.py (the same model and optimizer in Python) with plain
AdamW and with torch's ZeroRedundancyOptimizer (ZeRO stage 1) under Debian's torch 1.13 torchrun.
torch 1.13's FSDP needs CUDA, so there is no Python stage 2 or 3 on a CPU. Prints the best
tokens/s of each over the rounds (the first interval of 5 steps untimed), each stage's ratio to
stage 0 and dtl-train stage 1's ratio to ZeroRedundancyOptimizer; then what a rank holds at each
stage on 2 and 4 ranks (rank 0's line after the first step, counted from the live tensors)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("BUILD_DIR", os.path.join(REPO, "build"))
DTLAUNCH = os.path.join(BUILD, "apps", "dtlaunch", "dtlaunch")
TRAINER = os.path.join(BUILD, "apps", "dtl-train", "dtl-train")
PYTHON = os.environ.get("TORCHRUN_PYTHON", "/usr/bin/python3")
SHAPE = ["--layers", "6", "--width", "384", "--heads", "6", "--context", "128", "--vocab", "256", "--batch_size", "8"]
HOLDS = re.compile(r"holds parameters (\d+) bytes, gradients (\d+) bytes, optimizer state (\d+) bytes")


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1", TORCHRUN_COMPAT_FREE_PORT="1")
    return e


def dtl_train(stage, steps, tmp, nproc=2):
    metrics = os.path.join(tmp, f"z{stage}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    r = subprocess.run([DTLAUNCH, "--standalone", f"--nproc_per_node={nproc}", "--no_python", TRAINER, *SHAPE,
                        "--steps", str(steps), "--log_every", "5", "--bucket_mb", "4", "--zero", str(stage),
                        "--metrics", metrics], env=env(), capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        sys.exit(f"dtl-train --zero {stage} failed:\n{r.stdout}{r.stderr}")
    rows = [json.loads(line) for line in open(metrics)][1:]  # the first interval warms up
    time = sum(x["step_time_s"] for x in rows)
    tokens = sum(x["tokens_per_s"] * x["step_time_s"] for x in rows)
    return tokens / time, [int(x) for x in HOLDS.search(r.stdout).groups()]


def python_ddp(zero1, steps):
    args = [PYTHON, os.path.join(HERE, "torchrun_compat.py"), "--standalone", "--nproc_per_node=2",
            os.path.join(HERE, "train_ddp.py"), *SHAPE, "--steps", str(steps), "--skip", "5", "--bucket_mb", "4"]
    if zero1:
        args.append("--zero1")
    for _ in range(2):  # torchrun 1.13's agent sometimes loses its own store while its workers exit
        r = subprocess.run(args, env=env(), capture_output=True, text=True, timeout=1200)
        if r.returncode == 0:
            line = [line for line in r.stdout.splitlines() if '{"tokens_per_s"' in line][-1]
            d = json.loads(line[line.index("{"):])
            return d["tokens_per_s"], d["state_bytes"]
    sys.exit(f"train_ddp.py{' --zero1' if zero1 else ''} failed:\n{r.stdout}{r.stderr}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    for f in (DTLAUNCH, TRAINER):
        if not os.access(f, os.X_OK):
            sys.exit(f"train_zero.py: {f} not found; build first (or set BUILD_DIR)")
    print(f"machine: {os.cpu_count()} CPUs; 2 ranks, Gloo, OMP_NUM_THREADS=1, default preset, batch 8 x 128, "
          f"4 MB buckets, {a.steps} steps, {a.rounds} rounds")
    runs = {k: [] for k in ("dtl-train --zero 0", "dtl-train --zero 1", "dtl-train --zero 2", "dtl-train --zero 3",
                            "Python DDP + AdamW", "Python DDP + ZeroRedundancyOptimizer")}
    python_state = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for stage in (0, 1, 2, 3):
                runs[f"dtl-train --zero {stage}"].append(dtl_train(stage, a.steps, tmp)[0])
            for zero1, name in ((False, "Python DDP + AdamW"), (True, "Python DDP + ZeroRedundancyOptimizer")):
                tps, state = python_ddp(zero1, a.steps)
                runs[name].append(tps)
                python_state[name] = state
        best = {k: max(v) for k, v in runs.items()}
        for k, v in runs.items():
            print(f"{k:38} tokens/s {best[k]:7.0f} (rounds: {', '.join(f'{x:.0f}' for x in v)})")
        z0 = best["dtl-train --zero 0"]
        for stage, goal in ((1, 0.95), (2, 0.95), (3, 0.75)):
            ratio = best[f"dtl-train --zero {stage}"] / z0
            print(f"stage {stage} / stage 0: {ratio:.3f} [{'PASS' if ratio >= goal else 'MISS'} goal >= {goal}]")
        ratio = best["dtl-train --zero 1"] / best["Python DDP + ZeroRedundancyOptimizer"]
        print(f"dtl-train stage 1 / ZeroRedundancyOptimizer: {ratio:.2f}x [{'PASS' if ratio >= 1 else 'MISS'} goal >= 1]")
        print("\nwhat rank 0 holds after a step, bytes (parameters, gradients, AdamW state):")
        for nproc in (2, 4):
            for stage in (0, 1, 2, 3):
                _, (params, grads, state) = dtl_train(stage, 1 + 5, tmp, nproc)
                print(f"  {nproc} ranks, --zero {stage}: {params:>10} {grads:>10} {state:>10}")
        for name, state in python_state.items():
            print(f"  2 ranks, {name}: AdamW state {state}")


if __name__ == "__main__":
    main()
