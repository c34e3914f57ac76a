#!/usr/bin/python3
"""dtlaunch vs torchrun, side by side, in one run. Python 3 standard library only.

Usage: scripts/bench/run_all.sh [--only launch,memory,failure,throughput,idle] [--no-tuned]

Launchers:
  dtlaunch      $DTLAUNCH, or build/apps/dtlaunch/dtlaunch under the repository root
  torchrun      $TORCHRUN_PYTHON (default /usr/bin/python3) scripts/bench/torchrun_compat.py,
                i.e. torch.distributed.run with its defaults (--monitor_interval 5)
  torchrun-mi0.1  the same with --monitor_interval 0.1 (torchrun polls its workers; this is its
                fastest practical setting). Left out with --no-tuned.
  dtlaunch-baseline  with --baseline PATH: another build of dtlaunch (old against new in one run;
                --no-torchrun leaves torchrun out). Its ratio is its value over dtlaunch's.

Two tiny C helpers are compiled into the temp dir when a C compiler exists: spawn_rusage (the
launcher's parent: exact wait4 ru_maxrss and exit timestamps, see its comment) and fail_worker
(benchmark 3). Without a compiler the script falls back to posix_spawn from Python and sh + date.

Every benchmark prints the value for each launcher, the ratio torchrun/dtlaunch (how many times
dtlaunch is better) and PASS/MISS for its goal. A missed speed goal does not change the exit
status; a correctness failure of dtlaunch (lost or torn output lines, wrong exit status) does:
the script then exits 1. Correctness problems of torchrun are reported, not failed on.
"""
import argparse
import array
import glob
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NPROC = 4
LINES = 250_000

problems = []  # dtlaunch correctness failures: make the script exit 1
disturbed = []  # (benchmark, launcher) runs during which something else used the CPU
summary = []  # rows for the final table


# ---------------------------------------------------------------- launchers


class Launcher:
    def __init__(self, name, prefix, runs):
        self.name = name
        self.prefix = prefix  # argv before the torchrun-style arguments
        self.runs = runs  # repetitions for the repeated benchmarks
        self.is_dtlaunch = name.startswith("dtlaunch")  # dtlaunch, or --baseline's dtlaunch


def find_launchers(args):
    dt = os.environ.get("DTLAUNCH") or os.path.join(REPO, "build/apps/dtlaunch/dtlaunch")
    if not (os.path.isfile(dt) and os.access(dt, os.X_OK)):
        sys.exit(
            f"bench: dtlaunch not found at {dt}\n"
            f"bench: build it (cmake --build {REPO}/build -j2) or point $DTLAUNCH at the binary"
        )
    py = os.environ.get("TORCHRUN_PYTHON", "/usr/bin/python3")
    compat = os.path.join(HERE, "torchrun_compat.py")
    check = subprocess.run([py, "-c", "import torch.distributed.run"], capture_output=True, text=True)
    if check.returncode != 0:
        sys.exit(f"bench: {py} cannot import torch.distributed.run:\n{check.stderr}")
    # torch 1.13's --standalone always uses port 29400: on a shared machine another torchrun may hold it
    # (this one then joins that store). dtlaunch --standalone picks a free port; let torchrun do the same.
    os.environ["TORCHRUN_COMPAT_FREE_PORT"] = "1"
    launchers = [Launcher("dtlaunch", [os.path.abspath(dt)], runs=10)]
    if args.baseline:  # another build of dtlaunch, in the same run: its ratio says whether a change cost anything
        launchers.append(Launcher("dtlaunch-baseline", [os.path.abspath(args.baseline)], runs=10))
    if not args.no_torchrun:
        launchers.append(Launcher("torchrun", [py, compat], runs=3))
        if not args.no_tuned:
            launchers.append(Launcher("torchrun-mi0.1", [py, compat, "--monitor_interval", "0.1"], runs=3))
    return launchers


def spawn(argv, stdout_path, stderr_path, env=None):
    """posix_spawn with stdin from /dev/null and stdout/stderr to files."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    return os.posix_spawn(argv[0], argv, env if env is not None else os.environ, file_actions=actions)


SPAWN_HELPER_C = r"""
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* spawn_rusage REPORT PROG ARGS...: fork+exec PROG, wait4 it, write
   "<pid> <ru_maxrss KiB> <CLOCK_REALTIME at exit> <wall seconds> <wait status>" to REPORT.
   A small parent matters: a child's ru_maxrss starts from the RSS of the process it was forked
   from (the kernel keeps the old mm's high-water mark at exec), so a launcher spawned straight
   from Python would be charged Python's ~10 MiB. */
int main(int argc, char** argv) {
  if (argc < 3) return 2;
  struct timespec t0, t1, end;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) return 2;
  }
  clock_gettime(CLOCK_REALTIME, &end);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  FILE* f = fopen(argv[1], "w");
  if (!f) return 2;
  fprintf(f, "%d %ld %lld.%09ld %.9f %d\n", (int)pid, ru.ru_maxrss, (long long)end.tv_sec, end.tv_nsec, wall,
          status);
  fclose(f);
  return 0;
}
"""

HELPERS = {}  # name -> path of a compiled helper, filled by build_helpers()


def build_helpers(tmp):
    cc = shutil.which("cc") or shutil.which("gcc")
    for name, src in (("spawn_rusage", SPAWN_HELPER_C), ("fail_worker", FAIL_HELPER_C)):
        if not cc:
            break
        path = os.path.join(tmp, name)
        with open(path + ".c", "w") as f:
            f.write(src)
        res = subprocess.run([cc, "-O2", "-o", path, path + ".c"], capture_output=True, text=True)
        if res.returncode == 0:
            HELPERS[name] = path
        else:
            print(f"bench: cannot compile {name}: {res.stderr}", file=sys.stderr)
    if "spawn_rusage" not in HELPERS:
        print("bench: no C compiler: launchers are spawned from Python, so their ru_maxrss includes "
              "Python's RSS (~10 MiB too high) and times include posix_spawn from Python", file=sys.stderr)


def children(pid):
    kids = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                kids += [int(k) for k in f.read().split()]
        except OSError:
            pass
    return kids


class Run:
    """One launcher run: wall time, exit status, the launcher's wait4 ru_maxrss, CLOCK_REALTIME at its exit.

    With the spawn_rusage helper the launcher's parent is that small C program (accurate ru_maxrss,
    timestamps taken right at wait4); without it the launcher is posix_spawn'ed from Python."""

    def __init__(self, argv, tmp, tag, env=None, timeout=60, on_start=None):
        self.out = os.path.join(tmp, f"{tag}.out")
        self.err = os.path.join(tmp, f"{tag}.err")
        report = os.path.join(tmp, f"{tag}.rusage")
        full_env = dict(os.environ)
        full_env.update(env or {})
        helper = HELPERS.get("spawn_rusage")
        killed = []

        t0 = time.perf_counter()
        pid = spawn([helper, report] + argv if helper else argv, self.out, self.err, full_env)
        self.pid = pid

        def launcher_pid(wait):
            """The launcher itself: the helper's child. Only looked up when needed (no polling while
            the launcher runs, which would steal CPU on a 2-core machine)."""
            if not helper:
                return pid
            deadline = time.monotonic() + (10 if wait else 0)
            while True:
                kids = children(pid)
                if kids or time.monotonic() >= deadline:
                    return kids[0] if kids else None
                time.sleep(0.001)

        def watchdog():
            killed.append(True)
            target = launcher_pid(False)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    if target:
                        os.kill(target, sig)
                except ProcessLookupError:
                    return
                time.sleep(3)

        timer = threading.Timer(timeout, watchdog)
        timer.daemon = True
        timer.start()
        if on_start:
            self.pid = launcher_pid(True)
            on_start(self.pid, t0)
        _, status, rusage = os.wait4(pid, 0)
        end_wall = time.time()
        seconds = time.perf_counter() - t0
        timer.cancel()
        self.timed_out = bool(killed)
        if helper:
            try:
                with open(report) as f:
                    _, maxrss, end_wall, seconds, status = f.read().split()
            except (OSError, ValueError):
                raise RuntimeError(f"spawn_rusage left no report for {argv} (wait status {status})")
            self.maxrss_kib, self.end_wall, self.seconds = int(maxrss), float(end_wall), float(seconds)
            self.code = os.waitstatus_to_exitcode(int(status))
        else:
            self.maxrss_kib, self.end_wall, self.seconds = rusage.ru_maxrss, end_wall, seconds
            self.code = os.waitstatus_to_exitcode(status)
        self.maxrss_mib = self.maxrss_kib / 1024.0

    def stderr_tail(self, n=15):
        try:
            with open(self.err, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def check_run(launcher, run, what, expect_code=0):
    """A wrong exit status is a correctness failure for dtlaunch and a warning for torchrun."""
    if run.timed_out:
        msg = f"{launcher.name}: {what}: timed out"
    elif run.code != expect_code:
        msg = f"{launcher.name}: {what}: exit status {run.code}, expected {expect_code}"
    else:
        return True
    print(f"  !! {msg}\n{run.stderr_tail()}", file=sys.stderr)
    if launcher.is_dtlaunch:
        problems.append(msg)
    return False


class Noise:
    """CPU used on this machine by anything outside this script and the processes it started
    (e.g. someone compiling): machine busy time from /proc/stat minus our own and our reaped
    children's CPU time. Reported in cores (0.25 = a quarter of one core on average)."""

    LIMIT = 0.15  # above this the numbers may be disturbed

    def __init__(self):
        self.t0, self.busy0, self.own0 = time.monotonic(), self._busy(), self._own()

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal: everything but idle and iowait
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own():
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    def note(self, name):
        wall = time.monotonic() - self.t0
        other = max(0.0, (self._busy() - self.busy0) - (self._own() - self.own0))
        cores = other / wall if wall > 0 else 0.0
        if cores > self.LIMIT:
            disturbed.append(name)
            return f"; other load {cores:.2f} cores: MAY BE DISTURBED"
        return f"; other load {cores:.2f} cores"


# ---------------------------------------------------------------- reporting


def fmt(v, unit):
    if v is None:
        return "n/a"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "MiB":
        return f"{v:.1f} MiB"
    if unit == "lines/s":
        return f"{v / 1e6:.2f} M lines/s" if v >= 1e5 else f"{v / 1e3:.0f} k lines/s"
    if unit == "ms":
        return f"{v:.2f} ms"
    return f"{v} {unit}"


def fmt_ratio(r):
    return "inf (dtlaunch: 0)" if r == float("inf") else f"{r:.1f}x"


def report(title, unit, values, higher_is_better, goal_text, goal_ok, extra=None):
    """values: {launcher name: number or None}. Prints the comparison and records a summary row."""
    dt = values.get("dtlaunch")
    print(f"  {'launcher':<16}{'value':>18}{'ratio (x better)':>20}")
    ratios = {}
    for name, v in values.items():
        ratio = None
        if name != "dtlaunch" and v is not None and dt is not None:
            num, den = (dt, v) if higher_is_better else (v, dt)
            ratio = num / den if den else float("inf")
            ratios[name] = ratio
        rtxt = fmt_ratio(ratio) if ratio is not None else ""
        print(f"  {name:<16}{fmt(v, unit):>18}{rtxt:>20}")
    ok = goal_ok(dt, ratios)
    verdict = "PASS" if ok else "MISS"
    print(f"  goal: {goal_text}: {verdict}")
    if extra:
        for line in extra:
            print(f"  {line}")
    summary.append((title, values, ratios, unit, goal_text, verdict))


def header(title):
    print(f"\n== {title}", flush=True)


# ---------------------------------------------------------------- benchmarks


def bench_launch(launchers, tmp, want):
    """1. launch 4 workers of `true` (wall time, median); 2. peak RSS of the launcher (wait4)."""
    times, rss, spreads = {}, {}, []
    for l in launchers:
        argv = l.prefix + ["--standalone", f"--nproc_per_node={NPROC}", "--no_python", "true"]
        runs = []
        noise = Noise()
        if l.is_dtlaunch:
            Run(argv, tmp, f"launch-{l.name}-warmup")  # page cache, not counted
        for i in range(l.runs):
            r = Run(argv, tmp, f"launch-{l.name}-{i}")
            check_run(l, r, "launch of 4x true")
            runs.append(r)
        secs = [r.seconds for r in runs]
        times[l.name] = statistics.median(secs)
        rss[l.name] = max(r.maxrss_mib for r in runs)
        spreads.append(f"{l.name}: {len(secs)} runs, min {fmt(min(secs), 's')}, max {fmt(max(secs), 's')}"
                       + noise.note(f"launch/{l.name}"))
    if "launch" in want:
        header("1. launch: --standalone --nproc_per_node=4 --no_python true (wall time, median)")
        report(
            "1. launch 4x `true` (wall, median)", "s", times, False, "dtlaunch >= 50x faster than each torchrun",
            lambda dt, ratios: bool(ratios) and min(ratios.values()) >= 50, extra=spreads,
        )
    if "memory" in want:
        header("2. memory: peak RSS of the launcher for the same command (wait4 ru_maxrss, max over runs)")
        report(
            "2. launcher peak RSS (wait4 ru_maxrss)", "MiB", rss, False, "dtlaunch < 16 MiB",
            lambda dt, ratios: dt is not None and dt < 16,
            extra=["ru_maxrss covers the launcher and the descendants it reaped; with `true` workers the launcher dominates",
                   "the launcher's parent is the small spawn_rusage helper" if "spawn_rusage" in HELPERS else
                   "WARNING: spawned from Python: each value includes Python's RSS at fork (~10 MiB)"],
        )


FAIL_HELPER_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/* local rank 1: write a CLOCK_REALTIME stamp to $F, exit 1. Every other rank: sleep 30. */
int main(void) {
  const char* lr = getenv("LOCAL_RANK");
  if (lr && strcmp(lr, "1") == 0) {
    int fd = open(getenv("F"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    if (fd < 0 || write(fd, buf, (size_t)n) != n) _exit(2);
    _exit(1);
  }
  sleep(30);
  return 0;
}
"""


def failure_worker():
    """The compiled helper when a C compiler is there (no fork between stamp and exit), else sh + date."""
    if "fail_worker" in HELPERS:
        return [HELPERS["fail_worker"]], "C helper (clock_gettime, then _exit(1))"
    return (
        ["sh", "-c", 'if [ "$LOCAL_RANK" = 1 ]; then date +%s.%N > "$F"; exit 1; else exec sleep 30; fi'],
        "sh + date (fallback: no C compiler)",
    )


def bench_failure(launchers, tmp):
    header("3. failure: local rank 1 exits 1, others sleep 30; its exit stamp -> launcher exit (median)")
    worker, how = failure_worker()
    values, extra = {}, [f"worker: {how}"]
    for l in launchers:
        argv = l.prefix + ["--standalone", f"--nproc_per_node={NPROC}", "--no_python"] + worker
        lat = []
        noise = Noise()
        for i in range(l.runs):
            stamp = os.path.join(tmp, f"stamp-{l.name}-{i}")
            r = Run(argv, tmp, f"fail-{l.name}-{i}", env={"F": stamp})
            check_run(l, r, "worker failure", expect_code=1)
            try:
                with open(stamp) as f:
                    lat.append(r.end_wall - float(f.read().strip()))
            except (OSError, ValueError):
                print(f"  !! {l.name}: no stamp from local rank 1\n{r.stderr_tail()}", file=sys.stderr)
                if l.is_dtlaunch:
                    problems.append(f"{l.name}: failure benchmark: no stamp")
        values[l.name] = statistics.median(lat) if lat else None
        if lat:
            extra.append(f"{l.name}: {len(lat)} runs, min {fmt(min(lat), 's')}, max {fmt(max(lat), 's')}"
                         + noise.note(f"failure/{l.name}"))
    report(
        "3. worker failure -> launcher exit (median)", "s", values, False, "dtlaunch < 20 ms",
        lambda dt, ratios: dt is not None and dt < 0.020, extra=extra,
    )


LINE_RE = re.compile(rb"^\[default(\d)\]:r\1 line (\d+)$")


def check_console(path):
    """Every line must be [default<r>]:r<r> line <n>, and each rank must show exactly 1..LINES in order.
    Returns (torn, out_of_order, lost, examples): torn = lines that do not match (or lack their newline),
    out_of_order = lines whose number is not one more than that rank's previous line (duplicates and
    reordering included), lost = numbers 1..LINES that never appeared for their rank."""
    seen = [array.array("i") for _ in range(NPROC)]
    torn = disorder = 0
    examples = []
    with open(path, "rb") as f:
        for raw in f:
            m = LINE_RE.match(raw[:-1]) if raw.endswith(b"\n") else None
            r = int(m.group(1)) if m else NPROC
            if r >= NPROC:
                torn += 1
                if len(examples) < 3:
                    examples.append(raw[:80])
                continue
            n = int(m.group(2))
            prev = seen[r][-1] if seen[r] else 0
            if n != prev + 1:
                disorder += 1
                if len(examples) < 3:
                    examples.append(raw[:80])
            seen[r].append(n)
    lost = sum(LINES - len(set(s) & set(range(1, LINES + 1))) for s in seen)
    return torn, disorder, lost, examples


def check_rank_files(log_dir):
    """torchrun's layout: <log_dir>/<run_id>_<rand>/attempt_0/<local_rank>/stdout.log, all LINES lines."""
    bad = []
    runs = glob.glob(os.path.join(log_dir, "*", "attempt_0"))
    if len(runs) != 1:
        return [f"expected one <run>/attempt_0 under the log dir, found {len(runs)}"]
    for lr in range(NPROC):
        path = os.path.join(runs[0], str(lr), "stdout.log")
        expect = "".join(f"r{lr} line {i}\n" for i in range(1, LINES + 1)).encode()
        try:
            with open(path, "rb") as f:
                got = f.read()
        except OSError as e:
            bad.append(f"rank {lr}: {e}")
            continue
        if got != expect:
            nlines = got.count(b"\n")
            bad.append(f"rank {lr}: stdout.log has {nlines} lines, differs from the expected {LINES}")
    return bad


def bench_throughput(launchers, tmp):
    header(f"4. output: {NPROC} workers x {LINES} lines through --tee 3 (console to a file + per-rank files)")
    program = f'BEGIN {{ for (i = 1; i <= {LINES}; i++) print "r" r " line " i }}'
    worker = ["sh", "-c", f"exec awk -v r=\"$RANK\" '{program}'"]
    values, extra = {}, []
    for l in launchers:
        log_dir = os.path.join(tmp, f"logs-{l.name}")
        argv = l.prefix + ["--standalone", f"--nproc_per_node={NPROC}", "--tee", "3", "--log_dir", log_dir,
                           "--no_python"] + worker
        noise = Noise()
        r = Run(argv, tmp, f"tput-{l.name}", timeout=120)
        load = noise.note(f"throughput/{l.name}")
        check_run(l, r, "output throughput")
        torn, disorder, lost, examples = check_console(r.out)
        bad_files = check_rank_files(log_dir)
        total = NPROC * LINES
        values[l.name] = total / r.seconds
        ok = torn == 0 and disorder == 0 and lost == 0 and not bad_files
        extra.append(
            f"{l.name}: wall {fmt(r.seconds, 's')}; console: torn {torn}, out of order {disorder}, lost {lost}; "
            f"per-rank stdout.log: {'all complete' if not bad_files else '; '.join(bad_files)}"
            + ("" if ok else f"; examples: {examples}") + load
        )
        if not ok and l.is_dtlaunch:
            problems.append(f"dtlaunch: output check failed: torn {torn}, disorder {disorder}, lost {lost}, "
                            f"files {bad_files}")
        shutil.rmtree(log_dir, ignore_errors=True)
    report(
        "4. output throughput, --tee 3 (4 x 250k lines)", "lines/s", values, True,
        "dtlaunch >= 1M lines/s, zero lost/torn",
        lambda dt, ratios: dt is not None and dt >= 1e6 and not any("output check" in p for p in problems),
        extra=extra,
    )


def cpu_ns(pid):
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just exited
    return total


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def sleep_children(pid):
    n = 0
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                kids = f.read().split()
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/comm") as f:
                    n += f.read().strip() == "sleep"
            except OSError:
                pass
    return n


def bench_idle(launchers, tmp):
    header("5. idle supervision: 4 workers `sleep 11`; launcher CPU over 10 s (schedstat, all threads)")
    values, extra = {}, []
    for l in launchers:
        argv = l.prefix + ["--standalone", f"--nproc_per_node={NPROC}", "--no_python", "sleep", "11"]
        sample = {}

        def on_start(pid, t0):
            # The window starts 0.5 s after all 4 workers run (for dtlaunch that is t ~ 0.5 s after the
            # launch; torchrun first spends ~1.5 s importing torch, which must not count as supervision).
            deadline = time.monotonic() + 30
            while sleep_children(pid) < NPROC and time.monotonic() < deadline:
                time.sleep(0.01)
            ready = time.perf_counter() - t0
            time.sleep(0.5)
            a = cpu_ns(pid)
            time.sleep(10.0)
            b = cpu_ns(pid)
            sample.update(ready=ready, delta_ms=(b - a) / 1e6, rss=rss_kib(pid),
                          alive=sleep_children(pid) == NPROC)

        noise = Noise()
        r = Run(argv, tmp, f"idle-{l.name}", timeout=60, on_start=on_start)
        load = noise.note(f"idle/{l.name}")
        check_run(l, r, "idle supervision")
        values[l.name] = sample.get("delta_ms")
        rss = sample.get("rss")
        extra.append(
            f"{l.name}: workers running at t={sample.get('ready', 0):.2f} s; window t+0.5..t+10.5 s; "
            f"launcher VmRSS while idle {rss / 1024 if rss else 0:.1f} MiB"
            + ("" if sample.get("alive") else "; WARNING: workers ended inside the window") + load
        )
    report(
        "5. idle supervision CPU per 10 s", "ms", values, False, "dtlaunch < 10 ms",
        lambda dt, ratios: dt is not None and dt < 10, extra=extra,
    )


# ---------------------------------------------------------------- main


def print_summary(launchers):
    names = [l.name for l in launchers]
    print("\n== summary (markdown)\n")
    cols = ["benchmark"] + names + [f"dtlaunch advantage vs {n}" for n in names[1:]] + ["goal", "met?"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for title, values, ratios, unit, goal, verdict in summary:
        cells = [title] + [fmt(values.get(n), unit) for n in names]
        cells += [fmt_ratio(ratios[n]) if n in ratios else "n/a" for n in names[1:]]
        cells += [goal, verdict]
        print("| " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="launch,memory,failure,throughput,idle",
                    help="comma-separated subset of: launch,memory,failure,throughput,idle")
    ap.add_argument("--no-tuned", action="store_true", help="leave out torchrun --monitor_interval 0.1")
    ap.add_argument("--baseline", metavar="DTLAUNCH", help="another dtlaunch binary to measure beside $DTLAUNCH")
    ap.add_argument("--no-torchrun", action="store_true", help="leave torchrun out (with --baseline: old against new)")
    args = ap.parse_args()
    want = set(args.only.split(","))
    unknown = want - {"launch", "memory", "failure", "throughput", "idle"}
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")

    launchers = find_launchers(args)
    started = time.monotonic()
    dt_version = subprocess.run([launchers[0].prefix[0], "--version"], capture_output=True, text=True).stdout.strip()
    torch_version = subprocess.run([launchers[1].prefix[0], "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s"], capture_output=True,
                            text=True).stdout.strip()[:90]
    built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(launchers[0].prefix[0]).st_mtime))
    print(f"dtlaunch: {launchers[0].prefix[0]} ({dt_version}, built {built}; repo at {commit or '?'})")
    print(f"torchrun: {' '.join(launchers[1].prefix)} (torch {torch_version}, python {launchers[1].prefix[0]})")
    print(f"machine: {os.cpu_count()} cpus ({cpu}), kernel {os.uname().release}")
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
    tmp = tempfile.mkdtemp(prefix="dtlaunch-bench-")
    try:
        build_helpers(tmp)
        if want & {"launch", "memory"}:
            bench_launch(launchers, tmp, want)
        if "failure" in want:
            bench_failure(launchers, tmp)
        if "throughput" in want:
            bench_throughput(launchers, tmp)
        if "idle" in want:
            bench_idle(launchers, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_summary(launchers)
    if disturbed:
        print(f"\nWARNING: other processes used more than {Noise.LIMIT} cores during: {', '.join(disturbed)}; "
              "rerun on a quiet machine before trusting those numbers")
    print(f"\nsuite took {time.monotonic() - started:.0f} s; load average at end: "
          f"{open('/proc/loadavg').read().split()[:3]}")
    if problems:
        print("\nCORRECTNESS FAILURES (dtlaunch):", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
