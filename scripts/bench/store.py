#!/usr/bin/python3
"""The workers' c10d store (issue 12): dtlaunch's server against torch's own TCPStore servers, side
by side in one run. Python 3 standard library; torch only in the python that serves torch's stores.

Usage: scripts/bench/store.py [--clients 1000,4000,16000] [--only load,init] [--repeat 3]

  load  N clients of build/tests/store_load (one process, C++, source addresses spread over
        127.0.0.0/8 past 20000 clients, at most --in_flight connects at once; 2048 and 32 by default,
        since torch's servers stall for seconds once some 50 clients connect at once): each connects, validates, `add`s 1 to one
        counter and `wait`s on a barrier key that the client whose add reaches N sets. Servers, each
        started afresh for each N: dtlaunch's (build/tests/store_server), torch's libuv backend (its
        default) and torch's legacy backend (`use_libuv=False`), from $TORCH2_PYTHON (default
        /work/venv-accel/bin/python, else DTL_TORCH2_PYTHON). "total" is the time from the first
        connect until every client was released; memory per client is the server's peak VmHWM
        minus its VmRSS before any client came, over N. A run over --timeout seconds is "did not
        finish".
  init  launch to init_process_group returning, 4 gloo workers on one node, with the agent store
        (default) and with --agent_store=false (worker rank 0 hosts it), runs interleaved: the time
        from starting dtlaunch to the last rank's return, the median of --repeat runs, each torch.

Goals (PASS/MISS): at every N dtlaunch's total below torch libuv's; dtlaunch's memory per client under
16 KiB; init with the agent store no slower than with rank 0's (within 5%).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
STORE_SERVER = os.environ.get("STORE_SERVER", os.path.join(ROOT, "build/tests/store_server"))
STORE_LOAD = os.environ.get("STORE_LOAD", os.path.join(ROOT, "build/tests/store_load"))
DTLAUNCH = os.environ.get("DTLAUNCH", os.path.join(ROOT, "build/apps/dtlaunch/dtlaunch"))
TORCH2_PYTHON = os.environ.get("TORCH2_PYTHON", os.environ.get("DTL_TORCH2_PYTHON", "/work/venv-accel/bin/python"))

TORCH_SERVER = r"""
import datetime, sys, time, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=3600), wait_for_workers=False,
                  use_libuv=sys.argv[1] == "1")
print("port", s.port, flush=True)
sys.stdin.read()
"""

INIT_SCRIPT = r"""
import datetime, os, time, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
print("initialized", repr(time.time()), flush=True)
dist.destroy_process_group()
"""


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def start_server(kind):
    if kind == "dtlaunch":
        p = subprocess.Popen([STORE_SERVER, "127.0.0.1", "0"], stdout=subprocess.PIPE, text=True)
    else:
        p = subprocess.Popen([TORCH2_PYTHON, "-c", TORCH_SERVER, "1" if kind == "torch libuv" else "0"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("port "):
        p.kill()
        raise RuntimeError(f"{kind} server did not start: {line!r}")
    return p, int(line.split()[1])


def stop_server(p):
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def load(kind, n, timeout, in_flight):
    p, port = start_server(kind)
    try:
        time.sleep(0.2)
        base = status_kib(p.pid, "VmRSS")
        r = subprocess.run([STORE_LOAD, "127.0.0.1", str(port), str(n), str(timeout), str(in_flight)],
                           capture_output=True,
                           text=True, timeout=timeout + 60)
        peak = status_kib(p.pid, "VmHWM")
        result = json.loads(r.stdout.strip().splitlines()[-1])
        result["per_client_kib"] = (peak - base) / n if peak and base else None
        return result
    finally:
        stop_server(p)


def init_time(python, agent_store):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_", "MASTER_"))}
    env.update(PYTHON_EXEC=python, OMP_NUM_THREADS="1")
    path = "/tmp/dtl-bench-store-init.py"
    with open(path, "w") as f:
        f.write(INIT_SCRIPT)
    started = time.time()
    r = subprocess.run([DTLAUNCH, "--nproc_per_node=4", "--master_port=0", f"--agent_store={agent_store}", path],
                       env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"dtlaunch exited {r.returncode}: {r.stderr[-2000:]}")
    times = [float(line.split()[-1]) for line in r.stdout.splitlines() if "initialized" in line]
    if len(times) != 4:
        raise RuntimeError(f"expected 4 ranks, got {r.stdout}")
    return max(times) - started


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1000,4000,16000")
    ap.add_argument("--only", default="load,init")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--in_flight", default="2048,32", help="connects in flight at once, one table row each")
    a = ap.parse_args()
    only = set(a.only.split(","))
    ok = True
    if "load" in only:
        print("| clients | connects in flight | server | connected (s) | all added (s) | total (s) | memory per client (KiB) |")
        print("|---|---|---|---|---|---|---|")
        for n, in_flight in [(n, f) for n in map(int, a.clients.split(",")) for f in map(int, a.in_flight.split(","))]:
            totals = {}
            for kind in ("dtlaunch", "torch libuv", "torch legacy"):
                r = load(kind, n, a.timeout, in_flight)
                done = r["released"] == n
                totals[kind] = r["total_s"] if done else None
                mem = f"{r['per_client_kib']:.1f}" if r["per_client_kib"] is not None else "?"
                total = f"{r['total_s']:.3f}" if done else f"did not finish in {a.timeout} s ({r['released']} released)"
                added = f"{r['counted_s']:.3f}" if r["counted_s"] >= 0 else "-"
                print(f"| {n} | {in_flight} | {kind} | {r['connect_s']:.3f} | {added} | {total} | {mem} |", flush=True)
                if kind == "dtlaunch":
                    mem_ok = r["per_client_kib"] is not None and r["per_client_kib"] < 16
                    print(f"  {'PASS' if mem_ok else 'MISS'}: dtlaunch's memory per client under 16 KiB at N={n}",
                          file=sys.stderr)
                    ok &= done
            faster = totals["dtlaunch"] is not None and (totals["torch libuv"] is None
                                                         or totals["dtlaunch"] < totals["torch libuv"])
            print(f"  {'PASS' if faster else 'MISS'}: dtlaunch faster than torch libuv at N={n}, {in_flight} connects "
                  f"in flight", file=sys.stderr)
    if "init" in only:
        pythons = [("torch 2", TORCH2_PYTHON), ("torch 1.13", "/usr/bin/python3")]
        print("\n| torch | agent store (s) | rank 0's store (s) |")
        print("|---|---|---|")
        for label, python in pythons:
            if not os.path.exists(python):
                continue
            runs = {"true": [], "false": []}
            for _ in range(a.repeat):  # interleaved, so that a change of load falls on both
                for mode in runs:
                    runs[mode].append(init_time(python, mode))
            agent, rank0 = statistics.median(runs["true"]), statistics.median(runs["false"])
            print(f"| {label} | {agent:.3f} | {rank0:.3f} |", flush=True)
            print(f"  {'PASS' if agent <= rank0 * 1.05 else 'MISS'}: {label}: launch to init_process_group with "
                  f"the agent store no slower than with rank 0's", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
