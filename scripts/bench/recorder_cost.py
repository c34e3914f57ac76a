#!/usr/bin/env python3
"""What the flight recorder's watch costs the ranks, side by side in one run: the same job of 3 Gloo
ranks (torch 2.x on CPU), each doing one 1-element all_reduce every 10 ms for SECONDS, run
  with the watch:    dtlaunch's defaults: the ranks record, and every 10 s the slow-rank watch asks
                     each rank's hook for its arrival times (a dump of its record);
  without it:        TORCH_FR_BUFFER_SIZE=0: torch records nothing and no rank is asked.
Each rank reports its own CPU time (user + system, every thread: the hook's too) and how many
collectives it ran; the table gives the mean per rank and the difference. With the watch each rank
is asked 6 times a minute.

  PYTHON=venv/bin/python scripts/bench/recorder_cost.py [DTLAUNCH]     (DURATION=60 seconds, RUNS=3)
"""
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
VENV = os.path.expanduser("~/.cache/dtlaunch/venv-accelerate")
PYTHON = os.environ.get("PYTHON", os.path.join(VENV, "bin", "python"))
SECONDS = float(os.environ.get("DURATION", "60"))
RUNS = int(os.environ.get("RUNS", "3"))
RANKS = 3

SCRIPT = '''import os, resource, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.barrier()
start = time.monotonic()
before = resource.getrusage(resource.RUSAGE_SELF)
n = 0
while time.monotonic() - start < float(sys.argv[1]):
    dist.all_reduce(t)
    n += 1
    time.sleep(0.01)
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(f"rank {dist.get_rank()} cpu {cpu:.4f} collectives {n}", flush=True)
dist.barrier()
'''


def run(dtlaunch, script, folder, watch):
    env = dict(os.environ, PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1")
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    if not watch:
        env["TORCH_FR_BUFFER_SIZE"] = "0"
    logs = tempfile.mkdtemp(dir=folder)
    r = subprocess.run([dtlaunch, f"--nproc_per_node={RANKS}", "--master_port=0", "--log_dir", logs, script,
                        str(SECONDS)], env=env, capture_output=True, text=True, timeout=SECONDS + 120)
    if r.returncode != 0:
        sys.exit(f"the job failed ({r.returncode}):\n{r.stderr[-2000:]}")
    found = re.findall(r"rank (\d+) cpu ([\d.]+) collectives (\d+)", r.stdout)
    if len(found) != RANKS:
        sys.exit(f"expected {RANKS} ranks' figures, got:\n{r.stdout[-2000:]}")
    # each rank asked by the watch has its last answer in its log folder
    asked = len(glob.glob(os.path.join(logs, "**", "flight_recorder_times.json"), recursive=True))
    if asked != (RANKS if watch else 0):
        sys.exit(f"{asked} of {RANKS} ranks were asked for their arrival times {'with' if watch else 'without'} the watch")
    return statistics.mean(float(c) for _, c, _ in found), statistics.mean(int(n) for _, _, n in found)


def main():
    dtlaunch = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/apps/dtlaunch/dtlaunch")
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "collectives.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        rows = {True: [], False: []}
        for _ in range(RUNS):
            for watch in (True, False):
                rows[watch].append(run(dtlaunch, script, folder, watch))
    print(f"{RANKS} ranks, one all_reduce every 10 ms for {SECONDS:.0f} s, {RUNS} runs each (median of the runs)")
    print(f"{'':28} {'CPU per rank':>14} {'collectives':>12}")
    med = {}
    for watch, label in ((True, "with the watch"), (False, "TORCH_FR_BUFFER_SIZE=0")):
        cpu = statistics.median(r[0] for r in rows[watch])
        ops = statistics.median(r[1] for r in rows[watch])
        med[watch] = cpu
        print(f"{label:28} {cpu:12.3f} s {ops:12.0f}")
    extra = med[True] - med[False]
    print(f"the watch: {extra * 1000:+.0f} ms of CPU per rank over {SECONDS:.0f} s "
          f"({extra / SECONDS * 100:+.2f} % of a core), ratio {med[True] / med[False]:.3f}")


if __name__ == "__main__":
    main()
