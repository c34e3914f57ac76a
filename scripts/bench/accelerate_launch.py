#!/usr/bin/env python3
"""`accelerate launch` against `dtlaunch launch`, side by side in one run:
  1. launch 4 workers of `true` (--multi_gpu --num_processes 4 --no_python true): wall time, median;
  2. worker failure -> launcher exit: local rank 1 stamps the time and exits 1, the others sleep 30.
accelerate comes from $ACCELERATE (default /work/venv-accel/bin/accelerate: scripts/parity/make_venv.sh
makes that venv). Usage: scripts/bench/accelerate_launch.py [RUNS_OF_ACCELERATE]"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DTLAUNCH = os.environ.get("DTLAUNCH") or os.path.join(HERE, "../../build/apps/dtlaunch/dtlaunch")
ACCELERATE = os.environ.get("ACCELERATE", "/work/venv-accel/bin/accelerate")
COMMON = ["launch", "--multi_gpu", "--num_processes", "4", "--main_process_port", "0", "--no_python"]
FAIL = ['/bin/sh', '-c', 'if [ "$LOCAL_RANK" = 1 ]; then date +%s.%N > "$STAMP"; exit 1; fi; exec sleep 30']


def run(argv, env=None):
    """Wall seconds of one launch, and the time it exited."""
    start = time.monotonic()
    out = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=120)
    end_wall = time.time()
    return time.monotonic() - start, end_wall, out.returncode


def launch_times(prog, runs):
    return [run([prog] + COMMON + ["true"])[0] for _ in range(runs)]


def failure_times(prog, runs):
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            env = dict(os.environ, STAMP=os.path.join(tmp, f"stamp{i}"))
            _, exited, code = run([prog] + COMMON + FAIL, env)
            assert code != 0, f"{prog}: a failed worker should fail the launch"
            with open(env["STAMP"]) as f:
                times.append(exited - float(f.read()))
    return times


def show(ms):
    return f"{ms * 1000:.1f} ms" if ms < 1 else f"{ms:.2f} s"


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for prog in (DTLAUNCH, ACCELERATE):
        if not os.access(prog, os.X_OK):
            sys.exit(f"accelerate_launch.py: {prog} is missing (build dtlaunch; scripts/parity/make_venv.sh for accelerate)")
    py = os.path.join(os.path.dirname(ACCELERATE), "python")  # the venv's: accelerate has no --version
    out = subprocess.run([py, "-c", "import accelerate, torch; print(accelerate.__version__, torch.__version__)"],
                         capture_output=True, text=True)
    version = "accelerate %s, torch %s" % tuple(out.stdout.split()) if out.returncode == 0 else "version unknown"
    print(f"dtlaunch: {DTLAUNCH}\naccelerate: {ACCELERATE} ({version})")
    rows = []
    for name, measure in (("launch 4x `true` (wall, median)", launch_times),
                          ("worker failure -> launcher exit (median)", failure_times)):
        d = measure(DTLAUNCH, 10)
        a = measure(ACCELERATE, runs)
        dm, am = statistics.median(d), statistics.median(a)
        rows.append((name, dm, am))
        print(f"{name}: dtlaunch launch {show(dm)} (min {show(min(d))}), accelerate launch {show(am)} "
              f"(min {show(min(a))}): {am / dm:.0f}x")
    print("\n| benchmark | dtlaunch launch | accelerate launch | ratio |\n|---|---|---|---|")
    for name, dm, am in rows:
        print(f"| {name} | {show(dm)} | {show(am)} | {am / dm:.0f}x |")


if __name__ == "__main__":
    main()
