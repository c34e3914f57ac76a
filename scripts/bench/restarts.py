#!/usr/bin/env python3
"""The cost of a restart as restarts pile up: dtlaunch's peak RSS and time per restart after N
restarts of 8 workers that fail at once, for each build given, and torch's torchrun for the first
few (its restart takes seconds, so 1000 are out of reach).

  scripts/bench/restarts.py [DTLAUNCH ...]      default: build/apps/dtlaunch/dtlaunch
  TORCHRUN=/path/to/torchrun scripts/bench/restarts.py ...   adds torchrun at N=1 and N=10
"""
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def run(argv):
    """(seconds, peak RSS in MiB) of one launch, from wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def main():
    builds = sys.argv[1:] or [os.path.join(ROOT, "build/apps/dtlaunch/dtlaunch")]
    print(f"{'launcher':<48} {'restarts':>8} {'ms/restart':>10} {'peak RSS MiB':>12}")
    for build in builds:
        for n in (1, 10, 1000, 3000):
            secs, rss = run([build, "--standalone", f"--max_restarts={n}", "--nproc_per_node=8", "--no_python",
                             "/bin/false"])
            print(f"{build[-48:]:<48} {n:>8} {secs * 1000 / (n + 1):>10.1f} {rss:>12.1f}", flush=True)
    torchrun = os.environ.get("TORCHRUN")
    if torchrun:
        for n in (1, 10):
            secs, rss = run([torchrun, "--standalone", f"--max-restarts={n}", "--nproc-per-node=8", "--no-python",
                             "/bin/false"])
            print(f"{'torchrun':<48} {n:>8} {secs * 1000 / (n + 1):>10.1f} {rss:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
