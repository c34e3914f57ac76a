#!/usr/bin/env python3
"""The rendezvous host under an fd-exhaustion attack, for two dtlaunch builds side by side:
the host (prlimit --nofile=1024:4096) gets 1100 stalled connections from 127.0.0.2-9 that never
send a byte, kept topped up while node 1 joins. Prints, per build: the host's CPU in 2 s of attack,
node 1's outcome and time, and how long the host takes to exit after node 1; then how long a host
takes to exit after SIGTERM with 5 stalled peers connected.

  scripts/bench/rdzv_attack.py NEW_DTLAUNCH [OLD_DTLAUNCH]    (build tests/test_worker first)
"""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../tests/e2e"))
from common import WORKER, Running, free_port  # noqa: E402
from test_rdzv_attack import Stalled, open_fds, poll_until  # noqa: E402

ENV = dict(os.environ, DTLAUNCH_RDZV_TOKEN="s3cret", XDG_CONFIG_HOME="/tmp/dtl-bench-no-config")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def node_args(dtlaunch, rank, port, mode, where):
    return [dtlaunch, "--nnodes=2", f"--node_rank={rank}", "--nproc_per_node=1", "--master_addr=127.0.0.1",
            f"--master_port={port}", "--no_python", WORKER, mode, *where]


def attack(dtlaunch, connections=1100):
    port, tmp = free_port(), f"/tmp/dtl-bench-attack-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    host = Running(["prlimit", "--nofile=1024:4096", *node_args(dtlaunch, 0, port, "touch", [tmp])], ENV)
    host.wait_for(r"joined \(1 of 2 nodes\)", stream="err")
    stalled = Stalled(port, [f"127.0.0.{i}" for i in range(2, 10)])
    stalled.open(connections)
    c0 = cpu_seconds(host.proc.pid)
    time.sleep(2)  # a fixed window over which CPU is measured, not a wait for an event
    cpu = cpu_seconds(host.proc.pid) - c0
    stalled.keep_up()
    t = time.monotonic()
    r1 = subprocess.run(node_args(dtlaunch, 1, port, "touch", [tmp]), env=ENV, capture_output=True, text=True,
                        timeout=120)
    joined = time.monotonic() - t
    t = time.monotonic()
    try:
        host.proc.wait(timeout=15)
        host_exit = f"{time.monotonic() - t:.2f} s after node 1"
    except subprocess.TimeoutExpired:
        host.proc.kill()
        host_exit = "still running 15 s after node 1 (killed)"
    stalled.close()
    last = r1.stderr.strip().splitlines()[-1] if r1.stderr.strip() else ""
    print(f"  {stalled.opened} stalled connections: host CPU {cpu:.2f} s per 2 s; node 1 exit {r1.returncode} "
          f"after {joined:.2f} s {('(' + last + ')') if r1.returncode else ''}; host exit {host_exit}")


def exit_with_stalled_peers(dtlaunch):
    port = free_port()
    nodes = [Running(node_args(dtlaunch, r, port, "pause", []), ENV) for r in range(2)]
    for n in nodes:
        n.wait_for("ready rank")
    fds = open_fds(nodes[0].proc.pid)
    stalled = Stalled(port, ["127.0.0.2"])
    stalled.open(5)
    poll_until(lambda: open_fds(nodes[0].proc.pid) >= fds + 5, 10)
    t = time.monotonic()
    nodes[0].proc.send_signal(signal.SIGTERM)
    nodes[0].finish()
    print(f"  host exit {time.monotonic() - t:.2f} s after SIGTERM with 5 stalled peers")
    nodes[1].finish()
    stalled.close()


if __name__ == "__main__":
    for dtlaunch in sys.argv[1:] or [os.path.join(HERE, "../../build/apps/dtlaunch/dtlaunch")]:
        print(dtlaunch)
        attack(dtlaunch)
        exit_with_stalled_peers(dtlaunch)
