"""torch's flight recorder read from every rank at a hang, with real torch 2.15 (gloo on CPU) from the
oracle venv: the report names the collective where the ranks part, and its verdict is the one
torch's own analyzer (python -m torch.distributed.flight_recorder.fr_trace) prints on the same
records; where every rank waits in a collective, the verdict picks the suspect. While the job runs,
a rank that arrives last at the collectives is named; an even job gets no such line."""
import glob
import json
import os
import pickle
import re
import signal
import subprocess
import time

from common import DTLAUNCH, LaunchTest, Running, free_port, main

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
PYTHON = os.path.join(VENV, "bin", "python")
PY_SPY = os.path.join(VENV, "bin", "py-spy")
DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's torch 1.13, which has no flight recorder
HANG_TIMEOUT = 6

# Printed while torch loads, which takes longer than the hang timeout on a busy machine.
STARTING = '''import threading
started = threading.Event()
def say_starting():
    while not started.wait(1):
        print("starting", flush=True)
threading.Thread(target=say_starting, daemon=True).start()
'''

# Three good all_reduces (collectives 1-3), then the ranks part at collective 4 as `mode` says.
PART = STARTING + '''import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, mode = dist.get_rank(), sys.argv[1]
for _ in range(3):
    dist.all_reduce(torch.ones(4))
print("ready", flush=True)
started.set()
if mode == "wrongtype":  # rank 1 broadcasts while the others all_reduce: both wait, in two collectives
    dist.broadcast(torch.ones(4), 0) if rank == 1 else dist.all_reduce(torch.ones(4))
elif mode == "skip":  # rank 1 never comes to collective 4
    time.sleep(3600) if rank == 1 else dist.all_reduce(torch.ones(4))
elif mode == "spin":  # every rank busy, as NCCL's ranks spin while they wait: rank 1 computes on,
    if rank == 1:    # and rank 0 spins on an all_reduce that rank 1 never joins
        while True:
            sum(range(10000))
    work = dist.all_reduce(torch.ones(4), async_op=True)
    while not work.is_completed():
        pass
elif mode == "compute":  # every rank computes quietly after collectives that completed: no hang
    while True:
        sum(range(10000))
elif mode == "empty":
    # rank 0's tensor is empty at its 4th step: gloo returns at once there, and the ranks wait one
    # collective apart (a size mismatch that hangs, where 4 against 8 elements aborts at once)
    for step in range(6):
        dist.all_reduce(torch.ones(0 if rank == 0 and step == 3 else 4))
'''

# Every rank all_reduces a stop flag each step (the test sets it); rank SLOW sleeps 0.15 s before
# each, the others not, or every rank 0.15 s with SLOW=-1.
STEPS = STARTING + '''import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
started.set()
rank, slow, stop = dist.get_rank(), int(sys.argv[1]), sys.argv[2]
for step in range(int(sys.argv[3])):
    if slow in (rank, -1):
        time.sleep(0.15)
    flag = torch.tensor([1.0 if os.path.exists(stop) else 0.0])
    dist.all_reduce(flag)
    if step % 20 == 0:
        print("step", step, flush=True)
    if flag.item() > 0:
        break
dist.destroy_process_group()
'''

# What the worker's environment holds, and what its Python sees of it (the hook takes its FIFO out).
ENV = '''import json, os
raw = dict(e.split("=", 1) for e in open("/proc/self/environ").read().split("\\0") if "=" in e)
print("ENV " + json.dumps({"raw": raw, "seen": dict(os.environ)}), flush=True)
'''

# The analyzer's CLI on a folder, comparing every rank with `first`'s (fr_trace takes the first file
# os.walk lists; dtlaunch says which rank it compared with).
FR_TRACE = '''import os, runpy, sys
folder, first = sys.argv[1], sys.argv[2]
walk = os.walk
def ordered(top, *a, **k):
    for root, dirs, files in walk(top, *a, **k):
        yield root, dirs, sorted(files, key=lambda f: f != first)
os.walk = ordered
sys.argv = ["fr_trace", folder, "-p", "rank_"]
runpy.run_module("torch.distributed.flight_recorder.fr_trace", run_name="__main__")
'''


def fr_trace(folder, first):
    """torch's analyzer's text on `folder`, `first` (a rank) compared with the others."""
    r = subprocess.run([PYTHON, "-c", FR_TRACE, folder, f"rank_{first}"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr


def first_problem(text):
    """The first collective fr_trace says the ranks part at: its number, group, kind, missing ranks
    and culprits, as dtlaunch's report's JSON has them."""
    m = re.search(r"(Collective sequence number: (\d+) has errors|Not all ranks joining collective, "
                  r"sequence number: (\d+))\n(.*?)collective stack trace", text, re.S)
    assert m, text
    block = m.group(4)
    missing = re.search(r"missing ranks: \{([\d, ]*)\}", block)
    culprits = sorted(int(c) for c in re.findall(r"Culprit rank (\d+);", block))
    kinds = set(re.findall(r"Error type: (\w+)", block))
    return {"seq": int(m.group(2) or m.group(3)), "pg_desc": re.search(r"group info: (\S+)", block).group(1),
            "kind": kinds.pop() if kinds else "MISSING_RANKS",
            "missing": sorted(int(r) for r in missing.group(1).split(",")) if missing else [],
            "culprits": culprits}


class FlightRecorder(LaunchTest):
    def setUp(self):
        super().setUp()
        if not os.access(PYTHON, os.X_OK):
            self.skipTest(f"no torch 2.x venv at {VENV} (scripts/parity/make_venv.sh)")
        for name, text in (("part.py", PART), ("steps.py", STEPS), ("env.py", ENV)):
            with open(os.path.join(self.tmp, name), "w") as f:
                f.write(text)
        self.logs = os.path.join(self.tmp, "logs")

    def run_env(self, **extra):
        env = {"PYTHON_EXEC": PYTHON, "DTLAUNCH_PY_SPY": PY_SPY if os.access(PY_SPY, os.X_OK) else "",
               "OMP_NUM_THREADS": "1"}
        env.update(extra)
        return self.env(**env)

    def hang(self, mode, nproc=2):
        """dtlaunch over part.py `mode` with --on_hang=fail: its exit code, stderr and hang report."""
        r = subprocess.run([DTLAUNCH, f"--nproc_per_node={nproc}", "--master_port", str(free_port()),
                            f"--hang_timeout={HANG_TIMEOUT}", "--on_hang=fail", "--shutdown_timeout=3",
                            "--log_dir", self.logs, "part.py", mode],
                           cwd=self.tmp, env=self.run_env(), capture_output=True, text=True, timeout=180)
        reports = glob.glob(os.path.join(self.logs, "*", "attempt_0", "hang_1.json"))
        self.assertEqual(len(reports), 1, r.stderr)
        with open(reports[0]) as f:
            return r.returncode, r.stderr, json.load(f)

    def assert_same_as_fr_trace(self, verdict, world):
        """The report's verdict is fr_trace's on the records dtlaunch read, and the records' pg_config
        names the default group with the world's ranks (torch 2.15's Gloo records name a group '')."""
        for rank in range(world):
            with open(os.path.join(verdict["folder"], f"rank_{rank}"), "rb") as f:
                config = pickle.load(f)["pg_config"]
            self.assertEqual(config, {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}})
        theirs = first_problem(fr_trace(verdict["folder"], verdict["compared_with"]))
        ours = {k: verdict[k] for k in ("seq", "pg_desc", "kind", "missing", "culprits")}
        self.assertEqual(ours, theirs)

    def test_a_collective_of_the_wrong_type_is_named_and_its_rank_is_the_suspect(self):
        code, err, report = self.hang("wrongtype")
        v = report["collective"]
        self.assertEqual((v["seq"], v["kind"], v["culprits"], v["missing"]), (4, "COLLECTIVE_TYPE_MISMATCH", [1], []))
        self.assertEqual({r: c["op"] for r, c in v["entered"].items()}, {"0": "all_reduce", "1": "broadcast"})
        self.assertIn("dtlaunch: flight recorder", err)
        self.assertIn("the ranks part at collective #4 of process group 0:default_pg: not the same collective", err)
        # every rank waits in a collective: only the flight recorder names one
        self.assertRegex(err, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): calls broadcast \[\[4\]\] Float where "
                              r"rank 0 calls all_reduce \[\[4\]\] Float at collective #4")
        self.assertEqual(report["suspect"], 1)
        self.assertEqual(code, 1, err)
        self.assertIn("rank      : 1 (local_rank: 1)", err.split("Root Cause")[-1])
        self.assert_same_as_fr_trace(v, 2)

    def test_a_rank_that_skips_a_collective_is_named_as_never_entering_it(self):
        code, err, report = self.hang("skip")
        v = report["collective"]
        self.assertEqual((v["seq"], v["kind"], v["missing"]), (4, "MISSING_RANKS", [1]))
        self.assertEqual(v["never_entered"]["1"]["seq"], 3)
        self.assertIn("rank 1: never entered it; its last: all_reduce #3", err)
        self.assertEqual(report["suspect"], 1)
        self.assert_same_as_fr_trace(v, 2)

    def test_a_collective_that_never_completes_while_every_rank_is_busy_is_a_hang(self):
        # no rank sleeps, so the silence alone is no hang: the records' progress says it is
        code, err, report = self.hang("spin")
        self.assertRegex(report["cause"], r"^rank 0's all_reduce #4 of process group 0 has not completed in \d+ s "
                                          r"\(flight recorder\), while every rank is busy$")
        self.assertTrue(all(r["busy"] for r in report["ranks"]), report["ranks"])
        v = report["collective"]
        self.assertEqual((v["seq"], v["kind"], v["missing"]), (4, "MISSING_RANKS", [1]))
        self.assertEqual(report["suspect"], 1)
        self.assertEqual(code, 1, err)
        self.assert_same_as_fr_trace(v, 2)

    def test_ranks_computing_quietly_after_collectives_that_completed_are_not_hung(self):
        job = Running([DTLAUNCH, "--nproc_per_node=2", "--master_port", str(free_port()),
                       f"--hang_timeout={HANG_TIMEOUT}", "--log_dir", self.logs, "part.py", "compute"],
                      self.run_env(), cwd=self.tmp)
        try:
            job.wait_for(r"ready", count=2, timeout=120)
            # the progress check reads every rank's record every 2 s meanwhile
            read, deadline = False, time.monotonic() + 3 * HANG_TIMEOUT
            while time.monotonic() < deadline:
                read |= bool(glob.glob(os.path.join(self.logs, "*", "attempt_0", "fr_progress", "rank_1")))
                time.sleep(0.5)
            self.assertTrue(read, "the records' progress was never read")
        finally:
            job.proc.send_signal(signal.SIGTERM)
            ended = job.finish(timeout=60)
        self.assertNotIn("dtlaunch: hang", ended.stderr)
        # A collective torch never retired, behind one of its group that completed, is no stall; the
        # first after the group's last completed one is, where its rank waits on it.
        analyzer = glob.glob(os.path.join(self.logs, "*", "flight_recorder_analyzer.py"))[0]
        folder = os.path.join(self.tmp, "records")
        os.makedirs(folder)
        now = time.time_ns()

        def entry(seq, retired):
            return {"collective_seq_id": seq, "profiling_name": "nccl:all_reduce", "process_group": ("0", "default_pg"),
                    "is_p2p": False, "retired": retired, "state": "completed" if retired else "started",
                    "time_created_ns": now - (100 - seq) * 10**9, "input_sizes": [[4]], "input_dtypes": ["Float"]}
        for rank, retired in ((0, (True, False, True)), (1, (True, False, False))):
            with open(os.path.join(folder, f"rank_{rank}"), "wb") as f:
                pickle.dump({"entries": [entry(seq, r) for seq, r in enumerate(retired, 1)]}, f)
        r = subprocess.run([PYTHON, analyzer, "progress", folder, "rank_", str(now)], capture_output=True, text=True,
                           timeout=60)
        waiting = json.loads(r.stdout)
        self.assertEqual(list(waiting), ["1"], r.stdout + r.stderr)
        self.assertEqual((waiting["1"]["seq"], waiting["1"]["op"], waiting["1"]["state"]), (2, "all_reduce", "started"))
        self.assertAlmostEqual(waiting["1"]["age_s"], 98, delta=1)

    def test_an_empty_tensor_that_hangs_gloo_is_named_as_a_size_mismatch_of_the_odd_rank(self):
        code, err, report = self.hang("empty", nproc=3)
        v = report["collective"]
        # rank 0's 4th step is collective 7; ranks 1 and 2 agree, so rank 0 is the one compared off
        self.assertEqual((v["seq"], v["kind"], v["culprits"], v["compared_with"]),
                         (7, "SIZE_OR_SYNTAX_MISMATCH", [0], 1))
        self.assertEqual(v["entered"]["0"]["sizes"], "[[0]]")
        self.assertEqual(report["suspect"], 0)
        self.assertRegex(err, r"dtlaunch: suspect rank 0 on \S+ \(pid \d+\): calls all_reduce \[\[0\]\] Float")
        self.assert_same_as_fr_trace(v, 3)

    def test_two_nodes_send_their_records_with_their_stacks_and_the_host_names_the_collective(self):
        port = free_port()
        procs = []
        for node in (0, 1):
            procs.append(subprocess.Popen(
                [DTLAUNCH, "--nnodes=2", f"--node_rank={node}", "--master_addr=127.0.0.1", f"--master_port={port}",
                 "--nproc_per_node=1", f"--hang_timeout={HANG_TIMEOUT}", "--on_hang=fail", "--shutdown_timeout=3",
                 "--log_dir", os.path.join(self.logs, str(node)), "part.py", "wrongtype"],
                cwd=self.tmp, env=self.run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        (_, err0), (_, err1) = [p.communicate(timeout=180) for p in procs]
        self.assertIn("the job's report comes from the node hosting the rendezvous", err1)
        reports = glob.glob(os.path.join(self.logs, "0", "*", "attempt_0", "hang_1.json"))
        self.assertEqual(len(reports), 1, err0)
        with open(reports[0]) as f:
            report = json.load(f)
        v = report["collective"]
        self.assertEqual((v["seq"], v["kind"], v["culprits"]), (4, "COLLECTIVE_TYPE_MISMATCH", [1]), err0 + err1)
        self.assertIn("the ranks part at collective #4 of process group 0:default_pg: not the same collective", err0)
        self.assertEqual(report["suspect"], 1)
        self.assertEqual(procs[0].returncode, 1, err0)
        self.assert_same_as_fr_trace(v, 2)

    def stacks_name_the_wrong_type(self, **env):
        """`dtlaunch stacks` while part.py wrongtype hangs (no report: --hang_timeout=120) names the
        collective; the job's run, once ended."""
        job = Running([DTLAUNCH, "--nproc_per_node=2", "--master_port", str(free_port()), "--hang_timeout=120",
                       "--log_dir", self.logs, "part.py", "wrongtype"], self.run_env(**env), cwd=self.tmp)
        try:
            job.wait_for(r"ready", count=2, timeout=120)
            time.sleep(1)
            r = subprocess.run([DTLAUNCH, "stacks", str(job.proc.pid)], env=self.run_env(), capture_output=True,
                               text=True, timeout=120)
            self.assertIn("the ranks part at collective #4 of process group 0:default_pg: not the same collective",
                          r.stdout, r.stdout + r.stderr)
        finally:
            job.proc.send_signal(signal.SIGTERM)
            ended = job.finish(timeout=60)
        return ended

    def test_dtlaunch_stacks_names_the_collective_while_the_job_hangs(self):
        self.stacks_name_the_wrong_type()

    def test_a_rank_that_stops_answering_leaves_no_record_from_an_earlier_reading(self):
        # the silence's report reads both ranks' records; rank 1, stopped, cannot answer the next reading
        job = Running([DTLAUNCH, "--nproc_per_node=2", "--master_port", str(free_port()),
                       f"--hang_timeout={HANG_TIMEOUT}", "--log_dir", self.logs, "part.py", "wrongtype"],
                      self.run_env(), cwd=self.tmp)
        try:
            job.wait_for(r"the hang's report is in", timeout=180, stream="err")
            with open(glob.glob(os.path.join(self.logs, "*", "attempt_0", "hang_1.json"))[0]) as f:
                report = json.load(f)
            kept = report["collective"]["folder"]
            self.assertEqual(os.path.basename(kept), "hang_1_records")
            records = lambda: sorted(n for n in os.listdir(kept) if not n.startswith("."))  # noqa: E731
            self.assertEqual(records(), ["rank_0", "rank_1"])
            stopped = next(r["pid"] for r in report["ranks"] if r["rank"] == 1)
            os.kill(stopped, signal.SIGSTOP)
            try:
                r = subprocess.run([DTLAUNCH, "stacks", str(job.proc.pid)], env=self.run_env(), capture_output=True,
                                   text=True, timeout=120)
            finally:
                os.kill(stopped, signal.SIGCONT)
            self.assertIn("  rank 1: no record: it is stopped (SIGSTOP, or a debugger holds it)", r.stdout,
                          r.stdout + r.stderr)
            self.assertNotIn("not the same collective", r.stdout)  # rank 1's record from the report is not read
            self.assertEqual(records(), ["rank_0", "rank_1"])  # and the report's are kept
        finally:
            job.proc.send_signal(signal.SIGTERM)
            job.finish(timeout=60)

    def test_a_user_sitecustomize_that_fails_leaves_the_recorder_on(self):
        # Python's site reports the user's sitecustomize's error; dtlaunch's hook ran before it
        user = os.path.join(self.tmp, "user_site")
        os.makedirs(user)
        with open(os.path.join(user, "sitecustomize.py"), "w") as f:
            f.write("raise RuntimeError('the site is broken')\n")
        ended = self.stacks_name_the_wrong_type(PYTHONPATH=user)
        self.assertIn("Error in sitecustomize; set PYTHONVERBOSE for traceback:", ended.stderr)

    def test_a_worker_without_the_hook_has_no_record_and_says_why(self):
        # rank 1 runs python -I (no sitecustomize), rank 0 Debian's torch 1.13 (no flight recorder)
        if not os.path.exists(DEBIAN_PYTHON) or subprocess.run([DEBIAN_PYTHON, "-c", "import torch.distributed"],
                                                               capture_output=True).returncode:
            self.skipTest("no Debian torch 1.13")
        wrapper = os.path.join(self.tmp, "run.sh")
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\nif [ "$RANK" = 1 ]; then exec {DEBIAN_PYTHON} -I "$@"; fi\n'
                    f'exec {DEBIAN_PYTHON} "$@"\n')
        os.chmod(wrapper, 0o755)
        r = subprocess.run([DTLAUNCH, "--nproc_per_node=2", "--master_port", str(free_port()),
                            f"--hang_timeout={HANG_TIMEOUT}", "--on_hang=fail", "--shutdown_timeout=3",
                            "--no_python", wrapper, "part.py", "skip"],
                           cwd=self.tmp, env=self.run_env(), capture_output=True, text=True, timeout=180)
        self.assertRegex(r.stderr, r"  rank 0: no record: torch 1\.13\S* has no flight recorder")
        self.assertRegex(r.stderr, r"  rank 1: no record: dtlaunch's hook does not answer \(not loaded: python -I")

    def test_the_workers_record_where_the_user_did_not_choose_and_keep_what_they_chose(self):
        def worker_env(*flags, **extra):
            r = subprocess.run([DTLAUNCH, "--nproc_per_node=1", "--master_port", str(free_port()), *flags,
                                "--log_dir", self.logs, "env.py"], cwd=self.tmp, env=self.run_env(**extra),
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            line = next(l for l in r.stdout.splitlines() if "ENV " in l)
            return json.loads(line.split("ENV ", 1)[1])

        env = worker_env()
        raw = env["raw"]
        self.assertEqual(raw["TORCH_FR_BUFFER_SIZE"], "2000")
        self.assertRegex(raw["TORCH_FR_DUMP_TEMP_FILE"], r"/attempt_0/fr/rank_$")
        self.assertRegex(raw["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], r"/attempt_0/nccl_pipe_$")
        self.assertRegex(raw["DTLAUNCH_FR_TRIGGER"], r"/attempt_0/0/flight_recorder\.fifo$")
        self.assertRegex(raw["PYTHONPATH"], r"^/.*/python$")
        self.assertNotIn("DTLAUNCH_FR_TRIGGER", env["seen"])  # the hook took it: its children do not wait on it
        self.assertNotIn("PYTHONPATH", env["seen"])  # and its folder: the script sees torchrun's PYTHONPATH
        self.assertEqual(raw["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1")  # torchrun's, as before
        for name in ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
            self.assertNotIn(name, raw)  # torch 2.15 warns about the older names

        mine = worker_env(TORCH_NCCL_TRACE_BUFFER_SIZE="64", TORCH_FR_DUMP_TEMP_FILE="/tmp/mine_",
                          PYTHONPATH="/somewhere")
        self.assertEqual(mine["raw"]["TORCH_NCCL_TRACE_BUFFER_SIZE"], "64")
        self.assertNotIn("TORCH_FR_BUFFER_SIZE", mine["raw"])
        self.assertEqual(mine["raw"]["TORCH_FR_DUMP_TEMP_FILE"], "/tmp/mine_")
        self.assertRegex(mine["raw"]["PYTHONPATH"], r"^/.*/python:/somewhere$")
        self.assertEqual(mine["seen"]["PYTHONPATH"], "/somewhere")

        off = worker_env(TORCH_FR_BUFFER_SIZE="0")["raw"]
        for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "DTLAUNCH_FR_TRIGGER"):
            self.assertNotIn(name, off)
        unwatched = worker_env("--hang_timeout=0")["raw"]
        for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE", "DTLAUNCH_FR_TRIGGER", "PYTHONPATH"):
            self.assertNotIn(name, unwatched)

    def steps(self, slow, steps):
        """dtlaunch over steps.py with 3 ranks: its stderr once the job ended (stopped by the test once
        a slow rank is named, when `slow` is a rank)."""
        stop = os.path.join(self.tmp, "stop")
        job = Running([DTLAUNCH, "--nproc_per_node=3", "--master_port", str(free_port()), "--hang_timeout=120",
                       "--log_dir", self.logs, "steps.py", str(slow), stop, str(steps)], self.run_env(),
                      cwd=self.tmp)
        try:
            if slow >= 0:
                job.wait_for(r"slow rank: rank", timeout=150, stream="err")
                # the live view marks it too
                top = subprocess.run([DTLAUNCH, "top", str(job.proc.pid), "--json"], env=self.run_env(),
                                     capture_output=True, text=True, timeout=30)
                self.slow_in_top = [r["rank"] for r in json.loads(top.stdout)["ranks"] if r["slow"]]
                open(stop, "w").close()
            r = job.finish(timeout=150)
        finally:
            if job.proc.poll() is None:
                job.proc.kill()
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stderr

    def test_a_rank_that_comes_late_to_every_collective_is_named_while_the_job_runs(self):
        err = self.steps(2, 100000)
        line = next(l for l in err.splitlines() if "slow rank:" in l)
        self.assertRegex(line, r"slow rank: rank 2 on \S+ arrives last at (\d+) of the last (\d+) collectives, "
                               r"1[3-9]\d ms after the next rank on average")
        last_at, of = map(int, re.search(r"at (\d+) of the last (\d+)", line).groups())
        self.assertGreaterEqual(last_at * 3, of * 2)
        self.assertEqual(err.count("slow rank:"), 1)  # one line, not one a sample
        self.assertEqual(self.slow_in_top, [2])

    def test_an_even_job_names_no_slow_rank(self):
        err = self.steps(-1, 160)  # every rank 0.15 s a step: about 25 s
        self.assertNotIn("slow rank", err)
        # the watch did look: every rank's arrival times were read
        for rank in range(3):
            times = glob.glob(os.path.join(self.logs, "*", "attempt_0", str(rank), "flight_recorder_times.json"))
            self.assertEqual(len(times), 1, err)
            with open(times[0]) as f:
                self.assertGreaterEqual(len(json.load(f)), 10)


if __name__ == "__main__":
    main()
