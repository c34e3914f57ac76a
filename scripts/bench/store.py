#!/usr/bin/python3
"""The workers' c10d store: dtlaunch's server against torch's own TCPStore servers, side
by side in one run. Python 3 standard library; torch only in the python that serves torch's stores.

Usage: scripts/bench/store.py [--clients 1000,4000,16000] [--only load,init] [--repeat 3] [--load_repeat 1]
                             [--in_flight 2048] [--resolver files|system] [--timeout 300]
                             [--servers dtlaunch,torch libuv,torch legacy]

  load  N clients of build/tests/store_load (one process, C++, 8 clients to a source address in
        127.0.0.0/8 as from nodes of 8 GPUs, at most --in_flight connects at once): each connects,
        validates as torch 2.x's client does (VALIDATE and PING, waiting for the nonce), `add`s 1 to
        one counter and `wait`s on a barrier key that the client whose add reaches N sets. Servers,
        each started afresh for each N and run: dtlaunch's (build/tests/store_server), torch's libuv
        backend (its default) and torch's legacy backend (`use_libuv=False`), from $TORCH2_PYTHON
        (default /work/venv-accel/bin/python, else DTL_TORCH2_PYTHON). "total" is the time from the
        first connect until every client was released; memory per client is the server's peak
        VmHWM minus its VmRSS before any client came, over N; server CPU is its user and system
        time meanwhile, which the other helpers' load on this machine changes less than the times.
        A run over --timeout seconds is "did not finish". Each server runs in a mount namespace
        whose nsswitch.conf says "hosts: files" (--resolver files, the default): torch's servers
        look up the name of every client's address (getnameinfo, in their one serving thread), and
        this machine's DNS resolver answers about 50 queries and drops the next, so that glibc
        waits its 5 s timeout for every ~50 clients; "files" answers at once, as a resolver that
        keeps up would. --resolver system: as the machine is.
  init  launch to init_process_group returning, 4 gloo workers on one node, with the agent store
        (default) and with --agent_store=false (worker rank 0 hosts it), runs interleaved: the time
        from starting dtlaunch to the last rank's return, the median of --repeat runs, each torch.

Goals (PASS/MISS): at every N dtlaunch's total below torch libuv's; dtlaunch's memory per client under
16 KiB; init with the agent store no slower than with rank 0's (within 5%).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
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


NSSWITCH_FILES = "/tmp/dtl-bench-store-nsswitch.conf"


def files_resolver():
    """A prefix that runs a command where host names come from /etc/hosts alone, or None where mount
    namespaces are not available (not root)."""
    with open(NSSWITCH_FILES, "w") as f:
        f.write("hosts: files\n")
    prefix = ["unshare", "-m", "sh", "-c", f'mount --bind {NSSWITCH_FILES} /etc/nsswitch.conf && exec "$@"', "sh"]
    if shutil.which("unshare") is None:
        return None
    ok = subprocess.run(prefix + ["true"], capture_output=True, timeout=10).returncode == 0
    return prefix if ok else None


def cpu_s(pid):
    """User and system time the process has used, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(kind, prefix):
    if kind == "dtlaunch rdzv port":
        # The store as a c10d job's workers reach it: on the rendezvous's port, each connection
        # told apart by its first bytes and handed over (what an agent hosting c10d serves).
        port = free_port()
        p = subprocess.Popen(prefix + [DTLAUNCH, "rdzv-server", "--host=127.0.0.1", f"--port={port}", "--nnodes=2"],
                             stderr=subprocess.PIPE, text=True)
        lines = []
        while not lines or ("listening on" not in lines[-1] and lines[-1] and len(lines) < 20):
            lines.append(p.stderr.readline())
        if "listening on" not in lines[-1]:
            p.kill()
            raise RuntimeError(f"{kind} did not start: {''.join(lines)!r}")
        threading.Thread(target=p.stderr.read, daemon=True).start()  # its log must not fill the pipe
        return p, port
    if kind == "dtlaunch":
        p = subprocess.Popen(prefix + [STORE_SERVER, "127.0.0.1", "0"], stdout=subprocess.PIPE, text=True)
    else:
        p = subprocess.Popen(prefix + [TORCH2_PYTHON, "-c", TORCH_SERVER, "1" if kind == "torch libuv" else "0"],
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


def load(kind, n, timeout, in_flight, prefix):
    p, port = start_server(kind, prefix)
    try:
        time.sleep(0.2)
        base, cpu = status_kib(p.pid, "VmRSS"), cpu_s(p.pid)
        r = subprocess.run([STORE_LOAD, "127.0.0.1", str(port), str(n), str(timeout), str(in_flight), "8"],
                           capture_output=True,
                           text=True, timeout=timeout + 60)
        peak = status_kib(p.pid, "VmHWM")
        cpu = cpu_s(p.pid) - cpu
        result = json.loads(r.stdout.strip().splitlines()[-1])
        result["per_client_kib"] = (peak - base) / n if peak and base else None
        result["server_cpu_s"] = cpu
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
    ap.add_argument("--in_flight", default="2048", help="connects in flight at once, one table row each")
    ap.add_argument("--resolver", choices=("files", "system"), default="files",
                    help="where the servers' name lookups go: /etc/hosts alone, or as the machine is set up")
    ap.add_argument("--load_repeat", type=int, default=1, help="runs of each server at each N, interleaved")
    ap.add_argument("--servers", default="dtlaunch,torch libuv,torch legacy",
                    help="which of the load's servers run (legacy takes minutes from 16K clients on); "
                         "'dtlaunch rdzv port': the store behind `dtlaunch rdzv-server`'s port (c10d), "
                         "which keeps half the descriptors for the rendezvous: at most 10 000 clients here")
    a = ap.parse_args()
    only = set(a.only.split(","))
    ok = True
    if "load" in only:
        prefix = files_resolver() if a.resolver == "files" else []
        if prefix is None:
            print("warning: no mount namespace (root and unshare needed): torch's servers look names up through "
                  "the machine's resolver", file=sys.stderr)
            prefix = []
        print("| clients | connects in flight | server | run | connected (s) | all added (s) | total (s) "
              "| server CPU (s) | memory per client (KiB) | load average |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        kinds = tuple(a.servers.split(","))
        if not {"dtlaunch", "torch libuv"} <= set(kinds) or \
                not set(kinds) <= {"dtlaunch", "torch libuv", "torch legacy", "dtlaunch rdzv port"}:
            ap.error("--servers: dtlaunch and torch libuv, and torch legacy or dtlaunch rdzv port if wanted")
        for n, in_flight in [(n, f) for n in map(int, a.clients.split(",")) for f in map(int, a.in_flight.split(","))]:
            totals = {kind: [] for kind in kinds}
            for run in range(1, a.load_repeat + 1):  # interleaved, so that a change of load falls on all
                for kind in kinds:
                    loadavg = open("/proc/loadavg").read().split()[0]
                    r = load(kind, n, a.timeout, in_flight, prefix)
                    done = r["released"] == n
                    totals[kind].append(r["total_s"] if done else float("inf"))
                    mem = f"{r['per_client_kib']:.1f}" if r["per_client_kib"] is not None else "?"
                    total = (f"{r['total_s']:.3f}" if done else
                             f"did not finish in {a.timeout} s ({r['released']} released, {r['failed']} failed"
                             + (f", first: {r['first_error']})" if r["first_error"] else ")"))
                    added = f"{r['counted_s']:.3f}" if r["counted_s"] >= 0 else "-"
                    connected = f"{r['connect_s']:.3f}" if r["connect_s"] >= 0 else "-"
                    print(f"| {n} | {in_flight} | {kind} | {run} | {connected} | {added} | {total} "
                          f"| {r['server_cpu_s']:.2f} | {mem} | {loadavg} |", flush=True)
                    if kind == "dtlaunch":
                        mem_ok = r["per_client_kib"] is not None and r["per_client_kib"] < 16
                        print(f"  {'PASS' if mem_ok else 'MISS'}: dtlaunch's memory per client under 16 KiB at N={n}",
                              file=sys.stderr)
                        ok &= done
            median = {kind: statistics.median(t) for kind, t in totals.items()}
            faster = median["dtlaunch"] < median["torch libuv"]
            print(f"  {'PASS' if faster else 'MISS'}: dtlaunch faster than torch libuv at N={n}, {in_flight} connects "
                  f"in flight (median total {median['dtlaunch']:.3f} s against {median['torch libuv']:.3f} s)",
                  file=sys.stderr)
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
