#!/usr/bin/env python3
"""From a hang to its report, for 8 ranks, on each way dtlaunch reads stacks, side by side in one run:
  py-spy           Python ranks, py-spy's Python frames (rank 1 sleeps, the others wait in all_reduce);
  py-spy --native  every rank asleep, so every rank's Python frames place it nowhere and py-spy reads
                   its native frames too;
  eu-stack         8 native ranks (`sleep`), read by eu-stack;
  faulthandler     the Python job again, without py-spy (DTLAUNCH_PY_SPY=''): the workers' hook.
Each figure is seconds from the job's last output to the report's verdict line, less --hang_timeout:
what reading and judging the stacks took. Median of RUNS (default 3).

  PYTHON=venv/bin/python PY_SPY=venv/bin/py-spy scripts/bench/hang_paths.py [DTLAUNCH]
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
VENV = os.path.expanduser("~/.cache/dtlaunch/venv-accelerate")
PYTHON = os.environ.get("PYTHON", os.path.join(VENV, "bin", "python"))
PY_SPY = os.environ.get("PY_SPY", os.path.join(VENV, "bin", "py-spy"))
RUNS = int(os.environ.get("RUNS", "3"))
TIMEOUT = 5
RANKS = 8

SCRIPT = '''import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
print("ready", flush=True)
if dist.get_rank() == 1 or sys.argv[1] == "all":
    time.sleep(3600)
dist.all_reduce(torch.ones(1))
'''


def once(dtlaunch, args, env, cwd):
    """Seconds from the last output line before the report to the verdict, less the timeout."""
    proc = subprocess.Popen([dtlaunch, f"--nproc_per_node={RANKS}", "--master_port=0", f"--hang_timeout={TIMEOUT}",
                             "--on_hang=fail", "--shutdown_timeout=2", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last, verdict, start = None, None, time.monotonic()
    for line in proc.stdout:
        now = time.monotonic()
        if re.match(r"dtlaunch: (suspect rank|no suspect)", line):
            verdict = now
        elif verdict is None and not line.startswith(("dtlaunch: ", "  ")):
            last = now
    proc.wait()
    if verdict is None:
        return float("nan")
    return verdict - (last if last is not None else start) - TIMEOUT


def main():
    dtlaunch = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/apps/dtlaunch/dtlaunch")
    tmp = tempfile.mkdtemp(prefix="hang-paths-")
    with open(os.path.join(tmp, "hang.py"), "w") as f:
        f.write(SCRIPT)
    base = dict(os.environ, PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1")
    paths = [
        ("py-spy", ["hang.py", "one"], dict(base, DTLAUNCH_PY_SPY=PY_SPY)),
        ("py-spy --native", ["hang.py", "all"], dict(base, DTLAUNCH_PY_SPY=PY_SPY)),
        ("eu-stack", ["--no_python", "sleep", "3600"], base),
        ("faulthandler", ["hang.py", "one"], dict(base, DTLAUNCH_PY_SPY="")),
    ]
    print(f"{RANKS} ranks, --hang_timeout={TIMEOUT}, {RUNS} runs each; seconds from the hang to the verdict, "
          f"less the timeout")
    for name, args, env in paths:
        times = [once(dtlaunch, args, env, tmp) for _ in range(RUNS)]
        print(f"  {name:<16} median {statistics.median(times):5.2f} s   runs: " +
              ", ".join(f"{t:.2f}" for t in times))


if __name__ == "__main__":
    main()
