#!/usr/bin/env python3
"""What the live view costs, side by side in one run: the launcher's CPU over 10 s and its memory
(VmRSS, VmHWM) with workers that sleep, with nothing watching, with --metrics_port open and idle,
scraped every second, and with `dtlaunch top` refreshing in a terminal (a pty of 80x24), whose own
CPU is measured too.

    scripts/bench/live_view.py [--ranks 4,64] [--window 10]

Each row starts its own dtlaunch; the window starts 1 s after every worker runs. CPU is the sum of
/proc/PID/task/*/schedstat (every thread), so the console's writer threads count too."""
import argparse
import fcntl
import glob
import os
import pty
import random
import select
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time
import urllib.request

from bench import cpu_ns  # every thread's CPU, as bench.py row 5 counts it

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DTLAUNCH = os.environ.get("DTLAUNCH", os.path.join(REPO, "build/apps/dtlaunch/dtlaunch"))


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def children(pid):
    out = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        with open(path) as f:
            out += [int(p) for p in f.read().split()]
    return out


def free_port():
    for _ in range(100):
        port = random.randint(20000, 30000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


def run_row(name, ranks, window, runtime, metrics=False, scrape=False, top=False):
    port = free_port()
    argv = [DTLAUNCH, f"--nproc_per_node={ranks}", "--master_port=0"]
    if metrics:
        argv.append(f"--metrics_port={port}")
    argv += ["--no_python", "sleep", str(window + 15)]
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
    job = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(children(job.pid)) < ranks + 1 and time.monotonic() < deadline:  # the workers and the guard
        time.sleep(0.05)
    top_pid = None
    if top:
        top_pid, fd = pty.fork()
        if top_pid == 0:
            os.execve(DTLAUNCH, [DTLAUNCH, "top", str(job.pid)], dict(env, TERM="xterm"))
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    time.sleep(1.0)
    scraped = 0
    a, ta = cpu_ns(job.pid), cpu_ns(top_pid) if top_pid else 0
    end = time.monotonic() + window
    while time.monotonic() < end:
        if top_pid:
            drain(fd)  # the terminal's side: what top draws is read
        if scrape:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()
            scraped += 1
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    b, tb = cpu_ns(job.pid), cpu_ns(top_pid) if top_pid else 0
    rss, hwm = status_kib(job.pid, "VmRSS"), status_kib(job.pid, "VmHWM")
    if top_pid:
        os.write(fd, b"q")
        os.waitpid(top_pid, 0)
        os.close(fd)
    job.terminate()
    job.wait(timeout=60)
    launcher_ms = (b - a) / 1e6
    top_ms = (tb - ta) / 1e6
    return {"row": name, "ranks": ranks, "launcher_ms": launcher_ms, "top_ms": top_ms if top else None,
            "rss_mib": rss / 1024, "hwm_mib": hwm / 1024, "scrapes": scraped}


def drain(fd):
    while select.select([fd], [], [], 0)[0]:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="4,64")
    ap.add_argument("--window", type=float, default=10.0)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as runtime:
        os.chmod(runtime, 0o700)
        for ranks in map(int, args.ranks.split(",")):
            rows.append(run_row("nothing watching", ranks, args.window, runtime))
            rows.append(run_row("--metrics_port, idle", ranks, args.window, runtime, metrics=True))
            rows.append(run_row("--metrics_port, scraped every 1 s", ranks, args.window, runtime, metrics=True,
                                scrape=True))
            rows.append(run_row("dtlaunch top refreshing", ranks, args.window, runtime, top=True))
    w = args.window
    print(f"{'ranks':>5}  {'row':<36} {'launcher CPU':>16} {'top CPU':>16} {'VmRSS':>8} {'VmHWM':>8}")
    for r in rows:
        top = f"{r['top_ms']:.0f} ms ({r['top_ms'] / w / 10:.2f}%)" if r["top_ms"] is not None else "-"
        print(f"{r['ranks']:>5}  {r['row']:<36} {r['launcher_ms']:>6.1f} ms ({r['launcher_ms'] / w / 10:.2f}%)"
              f" {top:>16} {r['rss_mib']:>6.1f}Mi {r['hwm_mib']:>6.1f}Mi")
    print(f"(CPU over {w:.0f} s; % of one CPU; VmHWM is the launcher's peak)")


if __name__ == "__main__":
    sys.exit(main())
