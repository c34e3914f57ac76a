#!/usr/bin/python3
"""ssh fan-out: the time from one command to every worker running on N ssh hosts, and
from a Ctrl-C to every host clean, for dtlaunch and a pdsh + torchrun baseline in the same run.
As root (network namespaces); Python 3 standard library, OpenSSH's server and pdsh.

Usage: scripts/bench/fanout.py [--hosts 3,16] [--repeat 3] [--only dtlaunch,pdsh,pdsh-tt] [--ctrl_c process|group]

Each host is a network namespace running its own sshd (tests/e2e/sshnet.py, the fixture of the ssh
tests); the launcher runs in one more namespace and logs in with a key made for the run.

  dtlaunch  dtlaunch --hostfile F --ssh_command 'ssh -F CFG' --remote_dtlaunch $DTLAUNCH
                     --nproc_per_node=2 --master_port=P --no_python /usr/bin/python3 worker.py ...
  pdsh      PDSH_SSH_ARGS_APPEND='-F CFG' pdsh -R ssh -w h1,...,hN $TORCHRUN --nnodes=N --node_rank=%n
                     --master_addr=h1 --master_port=P --nproc_per_node=2 --no-python /usr/bin/python3 worker.py ...
  pdsh-tt   the same with ssh -tt: a remote tty, so that a dropped connection hangs up the remote torchrun
            (without one, nothing tells it; see "clean" below).

The ssh floor: `pdsh -R ssh -w h1,...,hN true`, N logins in parallel and nothing else.
worker.py appends the time it started to a file shared by all hosts and sleeps. "running" is from
starting the command until the last of the N x 2 workers has written its line. Then Ctrl-C: SIGINT
to the launching process (--ctrl_c group: to its process group, as a terminal does; pdsh wants two
within a second, so it gets a second one 0.2 s later). "clean" is from the first SIGINT until no
process but the sshd daemons is left in any namespace (launcher and hosts), waited for at most
--clean_timeout s; what is left then is named and killed.

$DTLAUNCH: default build/apps/dtlaunch/dtlaunch; $TORCHRUN: default /work/venv-accel/bin/torchrun
(Debian's torchrun crashes on Python 3.11, see torchrun_compat.py). A dtlaunch without the fan-out
(an unknown flag, exit 2) is reported as not measured. Exit status 1 only when dtlaunch's workers do
not all run or a host is not clean after its Ctrl-C.
"""
import argparse
import collections
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests/e2e"))
from sshnet import SshCluster, why_no_sshd  # noqa: E402

DTLAUNCH = os.environ.get("DTLAUNCH") or os.path.join(REPO, "build/apps/dtlaunch/dtlaunch")
TORCHRUN = os.environ.get("TORCHRUN", "/work/venv-accel/bin/torchrun")
PYTHON = "/usr/bin/python3"  # the workers' interpreter, the same for every launcher
NPROC = 2

WORKER = """import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"{time.time():.6f} {os.getpid()}\\n")
time.sleep(float(sys.argv[2]))
"""

problems = []  # dtlaunch correctness failures: exit status 1
_ports = iter(range(29600, 30600))


def fmt_s(v):
    if v is None:
        return "—"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def program(cmdline):
    """'torchrun' for '/venv/bin/python /venv/bin/torchrun --nnodes...', 'sshd' for 'sshd: root@notty'."""
    words = [os.path.basename(w) for w in cmdline.replace(":", " ").split()[:2]] or ["?"]
    return words[1] if words[0].startswith("python") and len(words) > 1 else words[0]


def leftover_text(left):
    """'3 x torchrun, 6 x worker.py in 3 namespace(s)' from SshCluster.leftovers()."""
    names = collections.Counter(program(cmd) for v in left.values() for _, cmd in v)
    return ", ".join(f"{k} x {name}" for name, k in names.most_common()) + f" in {len(left)} namespace(s)"


class Case:
    """One launch of N hosts x NPROC workers, then a Ctrl-C."""

    def __init__(self, cluster, kind, n):
        self.c, self.kind, self.n = cluster, kind, n
        self.hosts = cluster.hosts[:n]
        self.marks = os.path.join(cluster.tmp, f"marks-{kind}-{n}-{time.monotonic_ns()}")
        self.worker = os.path.join(cluster.tmp, "worker.py")
        self.log = open(os.path.join(cluster.tmp, f"log-{kind}-{n}"), "w+")
        self.port = next(_ports)

    def argv_env(self):
        tail = ["--nproc_per_node=2", "--master_port", str(self.port)]
        work = [PYTHON, self.worker, self.marks, "600"]
        if self.kind == "dtlaunch":
            return [DTLAUNCH, *self.c.fanout_args(DTLAUNCH, slots=NPROC, hosts=self.hosts), *tail, "--no_python",
                    *work], {}
        ssh_args = f"-F {self.c.config}" + (" -tt" if self.kind == "pdsh-tt" else "")
        return (["pdsh", "-R", "ssh", "-f", "64", "-w", ",".join(self.hosts), TORCHRUN, f"--nnodes={self.n}",
                 "--node_rank=%n", f"--master_addr={self.hosts[0]}", *tail, "--no-python", *work],
                {"PDSH_SSH_ARGS_APPEND": ssh_args})

    def marked(self):
        try:
            with open(self.marks) as f:
                return [float(line.split()[0]) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def run(self, timeout, clean_timeout):
        """{'running': s, 'clean': s or None, 'left': text} or {'error': text}."""
        argv, env = self.argv_env()
        t0 = time.time()
        proc = subprocess.Popen(self.c.launcher_argv(argv), env=dict(os.environ, **env), stdin=subprocess.DEVNULL,
                                stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while len(self.marked()) < self.n * NPROC and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            marks = self.marked()
            if len(marks) < self.n * NPROC:
                state = f"exit {proc.returncode}" if proc.poll() is not None else f"still running after {timeout:.0f} s"
                return {"error": f"{len(marks)} of {self.n * NPROC} workers ran ({state}): {self.tail()}",
                        "exit": proc.returncode}
            running = max(marks) - t0
            interrupted = time.monotonic()
            self.ctrl_c(proc)
            left = self.c.wait_clean(timeout=clean_timeout)
            clean = None if left else time.monotonic() - interrupted
            return {"running": running, "clean": clean, "left": leftover_text(left) if left else ""}
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            self.c.kill_leftovers()
            if self.c.wait_clean(timeout=10):
                raise RuntimeError(f"cannot clean the namespaces: {self.c.leftovers()}")
            self.log.close()

    def ctrl_c(self, proc):
        send = (lambda: os.killpg(proc.pid, signal.SIGINT)) if ARGS.ctrl_c == "group" else \
            (lambda: proc.send_signal(signal.SIGINT))
        send()
        if self.kind.startswith("pdsh"):  # one Ctrl-C only lists pdsh's threads; two within 1 s abort
            time.sleep(0.2)
            if proc.poll() is None:
                send()

    def tail(self, n=3):
        self.log.flush()
        self.log.seek(0)
        lines = [line.rstrip() for line in self.log.read().splitlines() if line.strip()]
        return " | ".join(lines[-n:]) or "(no output)"


def bench(cluster, kind, n, repeat, timeout, clean_timeout):
    runs = []
    for i in range(repeat):
        r = Case(cluster, kind, n).run(timeout, clean_timeout)
        if "error" in r:
            if kind == "dtlaunch" and r.get("exit") == 2:
                print(f"  {kind:8} {n:2d} hosts: not measured: this dtlaunch has no ssh fan-out yet ({r['error']})",
                      flush=True)
                return None
            print(f"  {kind:8} {n:2d} hosts: FAIL run {i + 1}: {r['error']}", flush=True)
            if kind == "dtlaunch":
                problems.append(f"{kind} {n} hosts: {r['error']}")
            continue
        if r["left"] and kind == "dtlaunch":
            problems.append(f"{kind} {n} hosts: not clean {clean_timeout:.0f} s after Ctrl-C: {r['left']}")
        clean = fmt_s(r["clean"]) if r["clean"] is not None else f"NOT CLEAN after {clean_timeout:.0f} s ({r['left']})"
        print(f"  {kind:8} {n:2d} hosts, run {i + 1}: every worker running after {fmt_s(r['running']):>8}, "
              f"clean {clean} after Ctrl-C", flush=True)
        runs.append(r)
    if not runs:
        return None
    cleans = [r["clean"] for r in runs]
    return {"running": statistics.median(r["running"] for r in runs),
            "clean": statistics.median(cleans) if None not in cleans else None,
            "left": next((r["left"] for r in runs if r["left"]), "")}


def ssh_floor(cluster, n, repeat):
    """Median s of `pdsh -R ssh -w <n hosts> true`: n logins in parallel, what any ssh fan-out pays."""
    times = []
    for _ in range(repeat):
        t0 = time.monotonic()
        r = cluster.run_in_launcher(["pdsh", "-R", "ssh", "-f", "64", "-w", ",".join(cluster.hosts[:n]), "true"],
                                    env=dict(os.environ, PDSH_SSH_ARGS_APPEND=f"-F {cluster.config}"), timeout=60)
        if r.returncode != 0:
            print(f"  ssh floor {n:2d} hosts: pdsh exit {r.returncode}: {r.stderr.strip()[-300:]}", flush=True)
            return None
        times.append(time.monotonic() - t0)
    print(f"  ssh floor {n:2d} hosts: `pdsh -w ... true` {fmt_s(statistics.median(times))} "
          f"(runs: {', '.join(fmt_s(t) for t in times)})", flush=True)
    return statistics.median(times)


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--hosts", default="3,16")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default="dtlaunch,pdsh,pdsh-tt")
    p.add_argument("--ctrl_c", choices=["process", "group"], default="process")
    p.add_argument("--timeout", type=float, default=180.0, help="s for every worker to run")
    p.add_argument("--clean_timeout", type=float, default=20.0, help="s for the hosts to be clean after Ctrl-C")
    ARGS = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # still tear the hosts down
    reason = why_no_sshd()
    if reason:
        print(f"fanout.py: {reason}", file=sys.stderr)
        return 2
    counts = [int(x) for x in ARGS.hosts.split(",")]
    kinds = ARGS.only.split(",")
    if set(kinds) - {"dtlaunch", "pdsh", "pdsh-tt"} or not counts or min(counts) < 1:
        p.error(f"--only takes dtlaunch,pdsh,pdsh-tt and --hosts counts >= 1 (got {ARGS.only!r}, {ARGS.hosts!r})")
    missing = [x for x, ok in ((DTLAUNCH, "dtlaunch" not in kinds or os.access(DTLAUNCH, os.X_OK)),
                               (TORCHRUN, not any(k.startswith("pdsh") for k in kinds) or os.access(TORCHRUN, os.X_OK)))
               if not ok]
    if missing:
        print(f"fanout.py: not found: {', '.join(missing)} (set DTLAUNCH / TORCHRUN)", file=sys.stderr)
        return 2
    print(f"== ssh fan-out: N hosts x {NPROC} workers, median of {ARGS.repeat}, Ctrl-C = SIGINT to the launching "
          f"{ARGS.ctrl_c} ==", flush=True)
    results = {}
    started = time.monotonic()
    with SshCluster(max(counts), name="f") as cluster:
        print(f"  {max(counts)} sshd hosts up in {fmt_s(time.monotonic() - started)} "
              f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})", flush=True)
        with open(os.path.join(cluster.tmp, "worker.py"), "w") as f:
            f.write(WORKER)
        for n in counts:
            results["floor", n] = ssh_floor(cluster, n, ARGS.repeat)
            for kind in kinds:
                results[kind, n] = bench(cluster, kind, n, ARGS.repeat, ARGS.timeout, ARGS.clean_timeout)
    print("\n| hosts | launcher | every worker running | clean after Ctrl-C |\n|---|---|---|---|")
    for n in counts:
        for kind in kinds:
            r = results[kind, n]
            if r is None:
                print(f"| {n} | {kind} | — | — |")
                continue
            clean = fmt_s(r["clean"]) if r["clean"] is not None else \
                f"not clean after {ARGS.clean_timeout:.0f} s: {r['left']}"
            print(f"| {n} | {kind} | {fmt_s(r['running'])} | {clean} |")
    for n in counts:
        print(f"{n} hosts: logging in to every host and running `true` (pdsh) takes {fmt_s(results['floor', n])}")
    for n in counts:
        d = results.get(("dtlaunch", n))
        for kind in (k for k in kinds if k != "dtlaunch"):
            b = results.get((kind, n))
            if d and b:
                print(f"{n} hosts: dtlaunch reaches every worker running {b['running'] / d['running']:.1f}x "
                      f"as fast as {kind}")
    print(f"(load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
    for what in problems:
        print(f"FAIL: {what}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
