#!/usr/bin/python3
"""Rendezvous completion time versus number of nodes, dtlaunch and torchrun's c10d
rendezvous side by side in one run. Python 3 standard library only.

Usage: scripts/bench/rendezvous.py [--only agents,torchrun,load,loss] [--repeat 3]

  agents    N real dtlaunch agents on loopback, N = 2 4 8 16 32 64, all started at once:
            dtlaunch --nnodes=N --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT --rdzv_id=bench
                     --nproc_per_node=1 --no_python true
            (the first to bind the port hosts the rendezvous). "rendezvous" is the time from the first
            start until the last agent logs its "round 1:" line; "all exited" until every agent has
            exited 0.
  torchrun  the same with torchrun (torch 1.13 via torchrun_compat.py, LOGLEVEL=INFO) for N = 4 and 16;
            "rendezvous" is until the last "Rendezvous complete for workers" line.
  load      `dtlaunch rdzv-server --nnodes N --rdzv_backend c10d` and build/tests/rdzv_load, N real
            clients in one process, N = 256 1024 4096: the time from the first connect until every
            client has its Round, then Done -> Exit. While every client holds its Round, the server's
            VmRSS minus its VmRSS before any client came, divided by N, is its memory per node.
  loss      a static 2-node job with workers `test_worker pause`; one agent is frozen with SIGSTOP
            (its socket stays open: only the missing heartbeats tell) or killed with SIGKILL; the time
            from the signal until the other agent logs the loss and until it exits, at 5 phases spread
            over one heartbeat interval (the worst is what counts).

Binaries: $DTLAUNCH (default build/apps/dtlaunch/dtlaunch), $RDZV_LOAD (build/tests/rdzv_load),
$TEST_WORKER (build/tests/test_worker), $TORCHRUN_PYTHON (default /usr/bin/python3).
Prints PASS/MISS per goal and a Markdown table. Exit status 1 only when a correctness check fails
(wrong ranks, a non-zero exit, a loss not noticed, a process left behind); a missed goal is a MISS.
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

from bench import rss_kib  # the same /proc/<pid>/status reader as the launcher benchmarks

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DTLAUNCH = os.environ.get("DTLAUNCH") or os.path.join(REPO, "build/apps/dtlaunch/dtlaunch")
RDZV_LOAD = os.environ.get("RDZV_LOAD") or os.path.join(REPO, "build/tests/rdzv_load")
TEST_WORKER = os.environ.get("TEST_WORKER") or os.path.join(REPO, "build/tests/test_worker")
TORCHRUN_PYTHON = os.environ.get("TORCHRUN_PYTHON", "/usr/bin/python3")
COMPAT = os.path.join(HERE, "torchrun_compat.py")

AGENT_NODES = [2, 4, 8, 16, 32, 64]
TORCHRUN_NODES = [4, 16]
LOAD_NODES = [256, 1024, 4096]
MEMORY_NODES = [1024, 4096]
GOAL_TIME = {16: 0.5, 1024: 2.0, 4096: 10.0}  # seconds
GOAL_LOSS = 2.0  # seconds
GOAL_MEMORY = 64.0  # KiB per node

problems = []  # dtlaunch correctness failures: exit status 1
rows = []  # the final table
started = []  # every process started, for the final cleanup


def problem(what):
    problems.append(what)
    print(f"  FAIL: {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A process in a session of its own, its output lines read as they come with their time.

    posix_spawn (vfork-like) rather than subprocess: starting 64 agents from Python must not be what
    is measured. With start=False the reader threads start later (start()), so that a batch of
    processes is spawned back to back."""

    def __init__(self, argv, env=None, stdin_pipe=False, start=True):
        full_env = dict(os.environ)
        full_env.update(env or {})
        out_r, out_w = os.pipe()  # non-inheritable: only the dup2'ed copies reach the child
        err_r, err_w = os.pipe()
        actions = [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
        if stdin_pipe:
            in_r, in_w = os.pipe()
            actions.append((os.POSIX_SPAWN_DUP2, in_r, 0))
        else:
            actions.append((os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0))
        try:
            self.pid = os.posix_spawnp(argv[0], argv, full_env, file_actions=actions, setsid=True)
        finally:
            os.close(out_w)
            os.close(err_w)
            if stdin_pipe:
                os.close(in_r)
        started.append(self)
        self.stdin = os.fdopen(in_w, "wb") if stdin_pipe else None
        self.returncode = None
        self.lines = {"out": [], "err": []}  # (monotonic time, text)
        self.exited_at = None
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._read, args=(os.fdopen(out_r, "rb"), "out"), daemon=True),
                        threading.Thread(target=self._read, args=(os.fdopen(err_r, "rb"), "err"), daemon=True)]
        if start:
            self.start()

    def start(self):
        for t in self.threads:
            t.start()

    def _read(self, pipe, name):
        with pipe:
            for raw in iter(pipe.readline, b""):
                t = time.monotonic()
                with self.cond:
                    self.lines[name].append((t, raw.decode(errors="replace").rstrip("\n")))
                    self.cond.notify_all()
        if name == "err":
            _, status = os.waitpid(self.pid, 0)
            with self.cond:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.exited_at = time.monotonic()
                self.cond.notify_all()

    def first(self, pattern, stream="err"):
        """(time, line) of the first line matching pattern, or None."""
        rx = re.compile(pattern)
        with self.cond:
            for t, line in self.lines[stream]:
                if rx.search(line):
                    return t, line
        return None

    def wait_for(self, pattern, stream="err", timeout=10.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                hit = self.first_locked(pattern, stream)
                if hit or self.exited_at is not None:
                    return hit
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def first_locked(self, pattern, stream):
        rx = re.compile(pattern)
        for t, line in self.lines[stream]:
            if rx.search(line):
                return t, line
        return None

    def wait(self, timeout):
        """The exit code, or None when it did not exit in time."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.exited_at is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
        for t in self.threads:
            t.join(1)
        return self.returncode

    def text(self, stream="err"):
        with self.cond:
            return "\n".join(line for _, line in self.lines[stream])

    def tail(self, n=8):
        return "\n".join("    | " + line for line in self.text().splitlines()[-n:])

    def kill(self):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def session_members(sids):
    """Processes whose session is one of sids (each Proc is a session leader: its workers are there)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if rest[0] != "Z" and int(rest[3]) in sids:
            found.append(int(entry))
    return found


def check_nothing_left(procs, what, is_dtlaunch=True, timeout=3.0):
    """Every process of these sessions is gone (workers die with their agent); kill what is left."""
    sids = {p.pid for p in procs}
    deadline = time.monotonic() + timeout
    while True:
        left = session_members(sids)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if left:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        msg = f"{what}: {len(left)} process(es) left behind: {left}"
        if is_dtlaunch:
            problem(msg)
        else:
            print(f"  note: {msg} (killed)")


def fmt_s(v):
    if v is None:
        return "—"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def verdict(value, goal):
    if value is None:
        return "—"
    return "PASS" if value < goal else "MISS"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class OtherLoad:
    """CPU used by other processes on the machine while a section runs, in cores: busy time from
    /proc/stat minus this script's own CPU and that of the processes it started and reaped."""

    def __init__(self):
        self.t, self.busy, self.own = time.monotonic(), self._busy(), self._own()

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own():
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def text(self):
        wall = time.monotonic() - self.t
        other = max(0.0, (self._busy() - self.busy) - (self._own() - self.own)) / max(wall, 1e-3)
        return f"other load {other:.2f} cores" + (" (MAY BE DISTURBED)" if other > 0.15 else "")


# ------------------------------------------------------------------------------ agents


def run_agents(n, torchrun=False, timeout=60.0):
    """N agents started at once; returns (rendezvous s, all exited s, spawning s) or None after a failure."""
    port = free_port()
    common = [f"--nnodes={n}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=bench",
              "--nproc_per_node=1", "--no_python", "true"]
    if torchrun:
        argv, env, done_rx = [TORCHRUN_PYTHON, COMPAT] + common, {"LOGLEVEL": "INFO"}, r"Rendezvous complete for workers"
    else:
        argv, env, done_rx = [DTLAUNCH] + common, None, r"round 1: node \d+ of"
    name = "torchrun" if torchrun else "dtlaunch"
    t0 = time.monotonic()
    procs = [Proc(argv, env=env, start=False) for _ in range(n)]
    spawned = time.monotonic() - t0  # posix_spawn from Python, part of every number
    for p in procs:
        p.start()
    deadline = t0 + timeout
    codes = [p.wait(max(0.1, deadline - time.monotonic())) for p in procs]
    try:
        if any(c is None for c in codes):
            stuck = [i for i, c in enumerate(codes) if c is None]
            msg = f"{name} {n} agents: {len(stuck)} still running after {timeout:.0f} s"
            print(procs[stuck[0]].tail())
            return fail_or_note(msg, torchrun)
        if any(c != 0 for c in codes):
            bad = [i for i, c in enumerate(codes) if c != 0]
            print(procs[bad[0]].tail())
            return fail_or_note(f"{name} {n} agents: exit codes {sorted(set(codes))}", torchrun)
        rounds = [p.first(done_rx) for p in procs]
        if any(r is None for r in rounds):
            return fail_or_note(f"{name} {n} agents: an agent never logged /{done_rx}/", torchrun)
        if not torchrun:
            ranks = sorted(int(re.search(r"round 1: node (\d+) of (\d+)", line).group(1)) for _, line in rounds)
            worlds = {re.search(r"ranks \d+\.\.\d+ of (\d+)", line).group(1) for _, line in rounds}
            masters = {re.search(r"master (\S+), restart", line).group(1) for _, line in rounds}
            hosts = sum(1 for p in procs if p.first(r"hosting the rendezvous"))
            if ranks != list(range(n)) or worlds != {str(n)} or len(masters) != 1 or hosts != 1:
                return fail_or_note(f"dtlaunch {n} agents: group ranks {ranks}, world sizes {worlds}, masters "
                                    f"{masters}, {hosts} hosts (want 0..{n - 1}, {n}, one master, one host)", False)
        return max(t for t, _ in rounds) - t0, max(p.exited_at for p in procs) - t0, spawned
    finally:
        for p in procs:
            if p.exited_at is None:
                p.kill()
        check_nothing_left(procs, f"{name} {n} agents", is_dtlaunch=not torchrun)


def fail_or_note(msg, torchrun):
    if torchrun:
        print(f"  note: {msg}")
    else:
        problem(msg)
    return None


def bench_agents(repeat):
    print(f"\n== real dtlaunch agents on loopback (median of {repeat}) ==", flush=True)
    results = {}
    for n in AGENT_NODES:
        runs = [r for r in (run_agents(n) for _ in range(repeat)) if r]
        if not runs:
            results[n] = None
            continue
        rdzv = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        spawn = statistics.median(r[2] for r in runs)
        results[n] = (rdzv, wall, spawn)
        goal = GOAL_TIME.get(n)
        tail = f"   goal < {goal} s: {verdict(rdzv, goal)}" if goal else ""
        print(f"  {n:3d} agents: rendezvous {fmt_s(rdzv):>8}   all exited {fmt_s(wall):>8}   "
              f"(starting them from Python took {fmt_s(spawn)}; runs: {', '.join(fmt_s(r[0]) for r in runs)}){tail}",
              flush=True)
    return results


def bench_torchrun():
    print("\n== torchrun c10d agents on loopback (one run each) ==", flush=True)
    check = subprocess.run([TORCHRUN_PYTHON, "-c", "import torch.distributed.run"], capture_output=True, text=True)
    if check.returncode != 0:
        print(f"  skipped: {TORCHRUN_PYTHON} cannot import torch.distributed.run")
        return {}
    results = {}
    for n in TORCHRUN_NODES:
        r = run_agents(n, torchrun=True, timeout=75.0)
        results[n] = r
        if r:
            print(f"  {n:3d} agents: rendezvous {fmt_s(r[0]):>8}   all exited {fmt_s(r[1]):>8}   "
                  f"(starting them from Python took {fmt_s(r[2])})", flush=True)
    return results


# ------------------------------------------------------------------------------ load tool


def run_load(n, timeout=60):
    """rdzv-server + rdzv_load with N clients; returns (round s, exit s, KiB per node) or None."""
    port = free_port()
    server = Proc([DTLAUNCH, "rdzv-server", "--host=127.0.0.1", f"--port={port}", f"--nnodes={n}",
                   "--rdzv_backend=c10d", "--rdzv_id=bench"])
    load = None
    try:
        if not server.wait_for(r"listening on", timeout=10):
            print(server.tail())
            return fail_or_note(f"rdzv-server --nnodes {n} did not start listening", False)
        time.sleep(0.1)
        rss0 = rss_kib(server.pid)
        load = Proc([RDZV_LOAD, "--port", str(port), "--nodes", str(n), "--run_id", "bench", "--hold",
                     "--timeout_s", str(timeout)], stdin_pipe=True)
        hold = load.wait_for(r"holding|checks=FAIL", stream="out", timeout=timeout + 5)
        per_node = None
        if hold and "holding" in hold[1]:
            time.sleep(0.2)  # a heartbeat or so with every node connected
            rss = rss_kib(server.pid)
            if rss is not None and rss0 is not None:
                per_node = (rss - rss0) / n
            load.stdin.write(b"\n")
            load.stdin.flush()
        code = load.wait(timeout + 5)
        scode = server.wait(10)
        out = load.text("out")
        if code != 0 or scode != 0:
            print("\n".join("    | " + line for line in (out + "\n" + load.text()).splitlines()[-10:]))
            print(server.tail(4))
            return fail_or_note(f"load {n} nodes: rdzv_load exited {code}, rdzv-server exited {scode}", False)
        if "job over (exit code 0): every node finished" not in server.text():
            return fail_or_note(f"load {n} nodes: the server did not end the job with every node finished", False)
        m1 = re.search(r"round_ms=([\d.]+) checks=ok", out)
        m2 = re.search(r"exit_ms=([\d.]+)", out)
        if not m1 or not m2:
            return fail_or_note(f"load {n} nodes: unexpected output: {out!r}", False)
        return float(m1.group(1)) / 1000, float(m2.group(1)) / 1000, per_node
    finally:
        for p in (server, load):
            if p and p.exited_at is None:
                p.kill()
        check_nothing_left([p for p in (server, load) if p], f"load {n} nodes")


def bench_load(repeat):
    print(f"\n== rdzv_load: N clients in one process against dtlaunch rdzv-server (median of {repeat}) ==",
          flush=True)
    results = {}
    for n in LOAD_NODES:
        runs = [r for r in (run_load(n) for _ in range(repeat)) if r]
        if not runs:
            results[n] = None
            continue
        rnd = statistics.median(r[0] for r in runs)
        ext = statistics.median(r[1] for r in runs)
        mems = [r[2] for r in runs if r[2] is not None]
        mem = statistics.median(mems) if mems else None
        results[n] = (rnd, ext, mem)
        goal = GOAL_TIME.get(n)
        tail = f"   goal < {goal} s: {verdict(rnd, goal)}" if goal else ""
        mem_text = f"{mem:.1f} KiB/node" if mem is not None else "—"
        print(f"  {n:5d} nodes: every Round {fmt_s(rnd):>8}   Done->every Exit {fmt_s(ext):>8}   server "
              f"{mem_text}   (runs: {', '.join(fmt_s(r[0]) for r in runs)}){tail}", flush=True)
    for n in MEMORY_NODES:
        mem = results.get(n) and results[n][2]
        if mem is not None:
            print(f"  server memory at {n} nodes: {mem:.1f} KiB per node   goal < {GOAL_MEMORY:.0f} KiB: "
                  f"{verdict(mem, GOAL_MEMORY)}")
    return results


# ------------------------------------------------------------------------------ node loss


def run_loss(victim_rank, sig, delay, show=False):
    """Static 2-node job; `sig` to node `victim_rank`'s agent (node 0 hosts) `delay` s after its workers are up
    (the phase against the 0.5 s heartbeats decides where in [1.5, 2] s a freeze is noticed).
    Returns (detected s, exited s)."""
    port = free_port()
    worker = [TEST_WORKER, "pause"] if os.access(TEST_WORKER, os.X_OK) else ["sleep", "60"]
    ready = r"ready rank" if worker[0] == TEST_WORKER else None
    nodes = [Proc([DTLAUNCH, "--nnodes=2", f"--node_rank={r}", "--nproc_per_node=1", "--master_addr=127.0.0.1",
                   f"--master_port={port}", "--no_python", *worker]) for r in range(2)]
    victim, survivor = nodes[victim_rank], nodes[1 - victim_rank]
    what = f"{signal.Signals(sig).name} of node {victim_rank}{' (the host)' if victim_rank == 0 else ''}"
    try:
        for p in nodes:
            ok = p.wait_for(ready, stream="out", timeout=15) if ready else p.wait_for(r"round 1:", timeout=15)
            if not ok:
                print(p.tail())
                return fail_or_note(f"node loss ({what}): the job did not start", False)
        time.sleep(delay)
        t_sig = time.monotonic()
        os.kill(victim.pid, sig)
        code = survivor.wait(15)
        if code is None:
            print(survivor.tail())
            return fail_or_note(f"node loss ({what}): the other agent still runs 15 s later", False)
        lost_rx = r"nothing heard for \d+ ms|lost|closed the connection"
        hit = survivor.first(lost_rx)
        if code != 1 or not hit or hit[0] < t_sig:
            print(survivor.tail())
            return fail_or_note(f"node loss ({what}): the other agent exited {code} "
                                f"{'without' if not hit else 'with'} a loss line", False)
        if show:
            print(f"    the other agent: {hit[1]}")
        return hit[0] - t_sig, survivor.exited_at - t_sig
    finally:
        for p in nodes:
            if p.exited_at is None:
                p.kill()  # SIGCONT then SIGKILL: a stopped agent goes too, and its workers with it
        for p in nodes:
            p.wait(5)
        check_nothing_left(nodes, f"node loss ({what})")


def bench_loss(repeat):
    print(f"\n== node loss: static 2-node job, workers `test_worker pause` ({repeat} runs at different heartbeat "
          "phases; worst shown) ==", flush=True)
    results = {}
    for victim, sig, label in ((1, signal.SIGSTOP, "SIGSTOP of a node (heartbeats stop, socket open)"),
                               (0, signal.SIGSTOP, "SIGSTOP of the hosting node"),
                               (1, signal.SIGKILL, "SIGKILL of a node (connection closed)")):
        runs = [r for r in (run_loss(victim, sig, 0.3 + k * 0.5 / repeat, show=k == 0) for k in range(repeat)) if r]
        if not runs:
            results[label] = None
            continue
        worst = (max(r[0] for r in runs), max(r[1] for r in runs), statistics.median(r[1] for r in runs))
        results[label] = worst
        print(f"  {label}: noticed after {fmt_s(worst[0])}, other agent exited after {fmt_s(worst[1])}   "
              f"(exits: {', '.join(fmt_s(r[1]) for r in runs)})   goal < {GOAL_LOSS:.0f} s: "
              f"{verdict(worst[1], GOAL_LOSS)}", flush=True)
    return results


# ------------------------------------------------------------------------------ main


def table(agents, torchrun, load, loss):
    out = ["| what | nodes | dtlaunch | torchrun | ratio | goal | met? |", "|---|---:|---:|---:|---:|---|---|"]

    def row(what, n, dt, tr, goal, ok):
        ratio = (f"{tr / dt:.0f}×" if tr / dt >= 10 else f"{tr / dt:.1f}×") if dt and tr else "—"
        out.append(f"| {what} | {n} | {fmt_s(dt)} | {fmt_s(tr)} | {ratio} | {goal} | {ok} |")

    for n in AGENT_NODES:
        r, t = agents.get(n), torchrun.get(n)
        goal = GOAL_TIME.get(n)
        row("rendezvous, real agents", n, r and r[0], t and t[0], f"< {goal} s" if goal else "",
            verdict(r and r[0], goal) if goal else "")
    for n in AGENT_NODES:
        r, t = agents.get(n), torchrun.get(n)
        if t:
            row("whole job (`true`), real agents", n, r and r[1], t[1], "", "")
    for n in LOAD_NODES:
        r = load.get(n)
        goal = GOAL_TIME.get(n)
        row("rendezvous, rdzv_load clients", n, r and r[0], None, f"< {goal} s" if goal else "",
            verdict(r and r[0], goal) if goal else "")
    for n in LOAD_NODES:
        r = load.get(n)
        row("Done → every Exit, rdzv_load", n, r and r[1], None, "", "")
    for n in MEMORY_NODES:
        r = load.get(n)
        mem = r and r[2]
        out.append(f"| server memory per node | {n} | {f'{mem:.1f} KiB' if mem is not None else '—'} | — | — | "
                   f"< {GOAL_MEMORY:.0f} KiB | {verdict(mem, GOAL_MEMORY)} |")
    for label, r in loss.items():
        cell = f"worst {fmt_s(r[1])}, median {fmt_s(r[2])}" if r else "—"
        out.append(f"| node loss: {label}, until the other agent exits | 2 | {cell} | — | — | < {GOAL_LOSS:.0f} s "
                   f"(worst) | {verdict(r and r[1], GOAL_LOSS)} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="agents,torchrun,load,loss", help="comma list of agents,torchrun,load,loss")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per dtlaunch case (median); node loss runs at least 5 heartbeat phases (worst)")
    args = ap.parse_args()
    want = set(args.only.split(","))
    unknown = want - {"agents", "torchrun", "load", "loss"}
    if unknown:
        ap.error(f"unknown --only part(s): {', '.join(sorted(unknown))}")
    for path, what in ((DTLAUNCH, "dtlaunch ($DTLAUNCH)"), (RDZV_LOAD, "rdzv_load ($RDZV_LOAD)")):
        if not os.access(path, os.X_OK):
            print(f"rendezvous.py: {what} not found at {path}: build it with "
                  f"'cmake --build {REPO}/build -j2 --target dtlaunch rdzv_load test_worker'", file=sys.stderr)
            return 2
    print(f"rendezvous benchmark: {DTLAUNCH}; {os.cpu_count()} CPUs; load average {loadavg()}", flush=True)
    t_start = time.monotonic()
    agents, torchrun, load, loss = {}, {}, {}, {}
    try:
        if "agents" in want:
            other = OtherLoad()
            agents = bench_agents(args.repeat)
            print(f"  ({other.text()})")
        if "torchrun" in want:
            other = OtherLoad()
            torchrun = bench_torchrun()
            print(f"  ({other.text()})")
            for n in TORCHRUN_NODES:
                if agents.get(n) and torchrun.get(n):
                    print(f"  {n} agents: torchrun/dtlaunch = {torchrun[n][0] / agents[n][0]:.0f}× (rendezvous), "
                          f"{torchrun[n][1] / agents[n][1]:.0f}× (whole job)")
        if "load" in want:
            other = OtherLoad()
            load = bench_load(args.repeat)
            print(f"  ({other.text()})")
        if "loss" in want:
            other = OtherLoad()
            loss = bench_loss(max(5, args.repeat))
            print(f"  ({other.text()})")
    finally:
        for p in started:
            if p.exited_at is None:
                p.kill()
    print(f"\n{table(agents, torchrun, load, loss)}\n")
    print(f"total {time.monotonic() - t_start:.0f} s; load average now {loadavg()}")
    if problems:
        print(f"\n{len(problems)} correctness problem(s):")
        for p in problems:
            print(f"  - {p}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
