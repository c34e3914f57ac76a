#!/usr/bin/env python3
"""A hung job side by side: torch's torchrun against dtlaunch --hang_timeout=10 on the same script
(8 ranks, gloo on CPU, rank 1 sleeps before all_reduce; the script's own gloo timeout is 120 s, so
that torchrun ends at all). Measures, from the moment rank 1 starts sleeping (its last line):
  - the report (dtlaunch's `suspect` line; torchrun has none);
  - the job's end (dtlaunch --on_hang=fail; torchrun when gloo gives up);
  - a restarted group running again (--max_restarts=1, the hang in the first attempt only);
and what the watch costs dtlaunch in CPU while an idle 8-rank job runs 10 s, with and without it.

  TORCHRUN=venv/bin/torchrun PYTHON=venv/bin/python scripts/bench/hang.py [DTLAUNCH]
"""
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
VENV = os.path.expanduser("~/.cache/dtlaunch/venv-accelerate")
PYTHON = os.environ.get("PYTHON", os.path.join(VENV, "bin", "python"))
TORCHRUN = os.environ.get("TORCHRUN", os.path.join(VENV, "bin", "torchrun"))

SCRIPT = '''
import datetime, os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()
first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
if rank == 1 and (first or sys.argv[1] == "always"):
    print(f"sleeping rank {rank}", flush=True)
    time.sleep(3600)
dist.all_reduce(torch.ones(1))
print(f"done rank {rank} attempt {os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
dist.destroy_process_group()
'''


def timed(argv, marks, cwd, timeout=400):
    """Seconds from the line matching marks[0] to the first line matching each other mark, and to the end."""
    env = dict(os.environ, PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env)
    seen, t0 = {}, None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        now = time.monotonic()
        if t0 is None and re.search(marks[0], line):
            t0 = now
        for m in marks[1:]:
            if t0 is not None and m not in seen and re.search(m, line):
                seen[m] = now - t0
        if now > deadline:
            proc.kill()
    proc.wait()
    end = time.monotonic() - t0 if t0 is not None else float("nan")
    return [seen.get(m, float("nan")) for m in marks[1:]] + [end, proc.returncode]


def cpu_ms(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return (usage.ru_utime + usage.ru_stime) * 1000  # dtlaunch only: its children are not waited by us


def main():
    dtlaunch = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/apps/dtlaunch/dtlaunch")
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "hang.py"), "w") as f:
        f.write(SCRIPT)
    n = ["--nproc_per_node=8"]
    print(f"{'case':<58} {'report s':>8} {'again s':>8} {'end s':>7} {'exit':>5}")
    rows = [
        ("torchrun, hang", [TORCHRUN, "--nproc-per-node=8", "--standalone", "hang.py", "always"], None),
        ("dtlaunch --hang_timeout=10 --on_hang=fail", [dtlaunch, *n, "--standalone", "--hang_timeout=10", "--on_hang=fail", "hang.py", "always"], None),
        ("torchrun --max-restarts=1, hang in attempt 0", [TORCHRUN, "--nproc-per-node=8", "--standalone", "--max-restarts=1", "hang.py", "once"], r"done rank 0 attempt 1"),
        ("dtlaunch --hang_timeout=10 --on_hang=fail --max_restarts=1", [dtlaunch, *n, "--standalone", "--hang_timeout=10", "--on_hang=fail", "--max_restarts=1", "hang.py", "once"], r"done rank 0 attempt 1"),
    ]
    for name, argv, again in rows:
        marks = [r"sleeping rank 1", r"suspect rank 1"] + ([again] if again else [])
        got = timed(argv, marks, tmp)
        report, rest = got[0], got[1:]
        again_s = rest[0] if again else float("nan")
        end, code = rest[-2], rest[-1]
        print(f"{name:<58} {report:>8.1f} {again_s:>8.1f} {end:>7.1f} {code:>5}", flush=True)
    for watch in ("600", "0"):
        ms = cpu_ms([dtlaunch, *n, "--standalone", f"--hang_timeout={watch}", "--no_python", "sleep", "10"])
        print(f"dtlaunch's own CPU, 8 idle ranks for 10 s, --hang_timeout={watch}: {ms:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
