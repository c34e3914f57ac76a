"""Hangs, with real torch (gloo on CPU) from the oracle venv ($DTL_ACCELERATE_VENV, else
~/.cache/dtlaunch/venv-accelerate, which scripts/parity/make_venv.sh makes with py-spy): one rank
sleeps, spins, or hangs in atexit after its traceback while the others wait in all_reduce; the watch
finds it, reads every rank's stack with py-spy, names the suspect, and --on_hang=fail restarts."""
import glob
import json
import os
import re
import subprocess
import sys
import unittest

from common import DTLAUNCH, LaunchTest, Running, free_port, main
from test_fanout_loopback import two_loopback_hosts

try:
    import seccomp  # noqa: F401 (Debian's python3-seccomp: no_ptrace.py denies ptrace with it)
    HAVE_SECCOMP = True
except ImportError:
    HAVE_SECCOMP = False
NO_PTRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no_ptrace.py")

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
PYTHON = os.path.join(VENV, "bin", "python")

SCRIPT = '''
import atexit, datetime, os, sys, threading, time
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def stuck():
    # STUCK_S at most; sooner once the file STUCK_UNTIL names exists (the test says when it has read)
    until, end = os.environ.get("STUCK_UNTIL"), time.monotonic() + float(os.environ.get("STUCK_S", "3600"))
    while time.monotonic() < end and not (until and os.path.exists(until)):
        time.sleep(0.1)


def spin():
    while True:
        pass


def say_the_collective_timed_out():
    # What torch's NCCL watchdog does when a collective times out (ProcessGroupNCCL's
    # broadcastDumpSignal): its global rank, 4 bytes, under exception_dump in the job's store.
    time.sleep(2)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=30))
    store.set("exception_dump", (0).to_bytes(4, "little"))


@record
def main():
    mode = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
    print(f"ready rank {rank}", flush=True)
    if rank == int(os.environ.get("STUCK_RANK", "1")) and (mode == "sleep" or (mode == "first-attempt" and first)):
        stuck()
    if rank == 1 and mode in ("spin", "watchdog"):
        spin()
    if rank == 0 and mode == "watchdog":
        threading.Thread(target=say_the_collective_timed_out, daemon=True).start()
    if rank == 1 and mode == "atexit":
        atexit.register(stuck)
        raise RuntimeError("rank 1 gave up")
    if mode == "compute":
        end = time.monotonic() + float(sys.argv[2])
        while time.monotonic() < end:
            pass
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"done rank {rank} {t.item():g}", flush=True)
    dist.destroy_process_group()


main()
'''


@unittest.skipUnless(os.path.exists(os.path.join(VENV, "bin", "py-spy")) and os.path.exists(PYTHON),
                     f"no venv with torch and py-spy at {VENV} (scripts/parity/make_venv.sh)")
class Hangs(LaunchTest):
    def setUp(self):
        super().setUp()
        self.script = os.path.join(self.tmp, "hang.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)
        self.logs = os.path.join(self.tmp, "logs")

    def run_job(self, mode, *flags, extra=(), timeout=120, nproc=2, **env):
        return self.launch(f"--nproc_per_node={nproc}", "--master_port", free_port(), "--log_dir", self.logs, *flags,
                           self.script, mode, *extra, env=self.env(PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1", **env),
                           timeout=timeout)

    def reports(self):
        found = []
        for path in sorted(glob.glob(os.path.join(self.logs, "*", "attempt_*", "hang_*.json"))):
            with open(path) as f:
                found.append(json.load(f))
        return found

    def test_a_sleeping_rank_is_the_suspect_with_every_rank_s_stack_and_fail_ends_the_job(self):
        r = self.run_job("sleep", "--hang_timeout=5", "--on_hang=fail")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("dtlaunch: hang: no rank printed for ", r.stderr)
        self.assertRegex(r.stderr, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): stuck \(hang\.py:\d+\)")
        self.assertRegex(r.stderr, r"  rank 0:\n    thread MainThread\n      all_reduce \(.*distributed_c10d\.py:\d+\)")
        self.assertRegex(r.stderr, r"  rank 1:\n    thread MainThread\n      stuck \(hang\.py:\d+\)")
        self.assertIn("stacks (py-spy):", r.stderr)
        self.assertIn("hang: no rank printed for", r.stderr.split("Root Cause")[1])  # the summary's traceback
        [report] = self.reports()
        self.assertEqual(report["suspect"], 1)
        self.assertEqual([x["doing"] for x in report["ranks"]], ["in a collective", "blocked"])

    def test_ranks_with_one_stack_are_one_block(self):
        r = self.run_job("sleep", "--hang_timeout=4", "--on_hang=fail", nproc=3)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"  ranks 0,2:\n    thread MainThread\n      all_reduce \(")
        self.assertIn("dtlaunch: suspect rank 1", r.stderr)

    def test_a_spinning_rank_is_the_suspect_while_the_others_wait(self):
        r = self.run_job("spin", "--hang_timeout=5", "--on_hang=fail")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): spin \(hang\.py:\d+\)")
        self.assertIn("rank 1 ran while the others waited", r.stderr)
        [report] = self.reports()
        self.assertEqual(report["ranks"][1]["doing"], "running")

    def test_a_traceback_then_a_hang_in_atexit_ends_with_the_exception_as_root_cause(self):
        r = self.run_job("atexit", "--hang_timeout=5", "--on_hang=fail")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): stuck \(hang\.py:\d+\)")
        root = r.stderr.split("Root Cause")[1]
        self.assertIn("rank      : 1", root)
        self.assertIn("RuntimeError: rank 1 gave up", root)

    def test_a_hang_of_the_first_attempt_only_is_restarted_and_the_job_succeeds(self):
        r = self.run_job("first-attempt", "--hang_timeout=5", "--on_hang=fail", "--max_restarts=1")
        self.assertExitCode(r, 0)
        self.assertIn("dtlaunch: suspect rank 1", r.stderr)
        self.assertEqual(sorted(line for line in r.stdout.splitlines() if "done rank" in line),
                         ["[default0]:done rank 0 2", "[default1]:done rank 1 2"])

    def test_report_prints_one_report_per_hang_and_the_job_goes_on(self):
        r = self.run_job("sleep", "--hang_timeout=4", STUCK_S="12")
        self.assertExitCode(r, 0)
        self.assertEqual(r.stderr.count("dtlaunch: hang: "), 1, r.stderr)
        self.assertIn("dtlaunch: suspect rank 1", r.stderr)
        self.assertEqual(len(self.reports()), 1)

    def test_ranks_that_compute_quietly_for_several_timeouts_raise_no_alarm(self):
        r = self.run_job("compute", "--hang_timeout=2", "--on_hang=fail", extra=("8",))
        self.assertExitCode(r, 0)
        self.assertNotIn("hang", r.stderr)
        self.assertEqual(self.reports(), [])

    def test_dtlaunch_stacks_prints_every_rank_s_stack_now_and_the_job_goes_on(self):
        # A folder of this test's own for the jobs' sockets: no other test's job is seen here.
        runtime = os.path.join(self.tmp, "run")
        os.mkdir(runtime, 0o700)
        release = os.path.join(self.tmp, "release")
        env = self.env(PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1", STUCK_S="120", STUCK_UNTIL=release,
                       XDG_RUNTIME_DIR=runtime)
        job = Running([DTLAUNCH, "--nproc_per_node=2", "--master_port", str(free_port()), self.script, "sleep"], env)
        # both out of init_process_group: rank 0 may still be meeting rank 1's gloo when rank 1 prints
        job.wait_for(r"ready rank [01]", count=2)
        r = subprocess.run([DTLAUNCH, "stacks"], env=env, capture_output=True, text=True, timeout=60)
        self.assertExitCode(r, 0)
        self.assertIn(f"dtlaunch: the stacks of 2 ranks on ", r.stdout)
        self.assertIn(f"(pid {job.proc.pid}):", r.stdout)
        self.assertRegex(r.stdout, r"  rank 0:\n    thread MainThread\n      all_reduce \(")
        self.assertRegex(r.stdout, r"  rank 1:\n    thread MainThread\n      stuck \(hang\.py:\d+\)")
        # by pid too; a pid that is no job of this user's is refused
        self.assertExitCode(subprocess.run([DTLAUNCH, "stacks", str(job.proc.pid)], env=env, capture_output=True,
                                           text=True, timeout=60), 0)
        other = subprocess.run([DTLAUNCH, "stacks", "1"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(other.returncode, 1)
        self.assertEqual(other.stderr, "dtlaunch stacks: error: no dtlaunch job of yours with pid 1 on this machine\n")
        open(release, "w").close()
        done = job.finish(timeout=120)
        self.assertExitCode(done, 0)
        self.assertEqual(os.listdir(os.path.join(runtime, "dtlaunch")), [])  # the socket went with the job
        none = subprocess.run([DTLAUNCH, "stacks"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(none.returncode, 1)
        self.assertEqual(none.stderr, "dtlaunch stacks: error: no dtlaunch job of yours runs on this machine\n")

    def test_nccl_s_word_in_the_store_is_a_hang_at_once_whatever_the_silence(self):
        # The watchdog's key, set 2 s in, long before the 60 s of silence would tell
        r = self.run_job("watchdog", "--hang_timeout=60", "--on_hang=fail", timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("dtlaunch: hang: rank 0's NCCL watchdog timed out a collective (exception_dump in the store)\n",
                      r.stderr)
        self.assertRegex(r.stderr, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): spin \(hang\.py:\d+\)")
        self.assertIn("hang: rank 0's NCCL watchdog timed out a collective", r.stderr.split("Root Cause")[1])
        [report] = self.reports()
        self.assertEqual(report["suspect"], 1)
        self.assertIn("NCCL watchdog", report["cause"])

    def two_nodes(self, mode, *flags, runtime=None, **env):
        """Nodes 0 and 1 of a static job on loopback, 2 ranks each; rank 3, on node 1, is the stuck one."""
        port = free_port()
        nodes = []
        for node in (0, 1):
            extra = {"XDG_RUNTIME_DIR": runtime} if runtime and node == 1 else {}
            args = ["--nnodes=2", f"--node_rank={node}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                    f"--master_port={port}", "--log_dir", os.path.join(self.logs, str(node)), *flags, self.script, mode]
            nodes.append(Running([DTLAUNCH, *args], self.env(PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1", STUCK_RANK="3",
                                                             **extra, **env)))
        return nodes

    def test_two_nodes_one_report_on_the_host_names_the_rank_on_the_other_and_fail_ends_both(self):
        nodes = self.two_nodes("sleep", "--hang_timeout=5", "--on_hang=fail")
        host, other = [n.finish(timeout=120) for n in nodes]
        self.assertEqual(host.returncode, 1, host.stderr)
        self.assertEqual(other.returncode, 1, other.stderr)
        # the host prints the job's report: every rank of both nodes, one block for the three waiting
        self.assertEqual(host.stderr.count("dtlaunch: hang: "), 1, host.stderr)
        self.assertRegex(host.stderr, r"  ranks 0-2:\n    thread MainThread\n      all_reduce \(")
        self.assertRegex(host.stderr, r"  rank 3:\n    thread MainThread\n      stuck \(hang\.py:\d+\)")
        self.assertRegex(host.stderr, r"dtlaunch: suspect rank 3 on \S+ \(pid \d+\): stuck \(hang\.py:\d+\)")
        # the other node says where the report is, and fails its rank 3 as the host decided
        self.assertNotIn("dtlaunch: hang: ", other.stderr)
        self.assertIn("the job's report comes from the node hosting the rendezvous", other.stderr)
        root = host.stderr.split("Root Cause")[1]
        self.assertIn("rank      : 3 (local_rank: 1)", root)
        self.assertRegex(root, r"hang: no rank printed for [5-9] s")
        [path] = glob.glob(os.path.join(self.logs, "0", "*", "attempt_0", "hang_*.json"))
        with open(path) as f:
            report = json.load(f)
        self.assertEqual(report["suspect"], 3)
        self.assertEqual([x["rank"] for x in report["ranks"]], [0, 1, 2, 3])

    def test_two_nodes_a_first_attempt_hang_restarts_both_and_the_job_succeeds(self):
        nodes = self.two_nodes("first-attempt", "--hang_timeout=5", "--on_hang=fail", "--max_restarts=1")
        for r in [n.finish(timeout=150) for n in nodes]:
            self.assertExitCode(r, 0)

    def test_dtlaunch_stacks_on_the_other_node_prints_every_node_s_ranks(self):
        runtime = os.path.join(self.tmp, "run")
        os.mkdir(runtime, 0o700)
        release = os.path.join(self.tmp, "release")
        nodes = self.two_nodes("sleep", runtime=runtime, STUCK_S="120", STUCK_UNTIL=release)
        for n in nodes:
            n.wait_for(r"ready rank \d", count=2)
        r = subprocess.run([DTLAUNCH, "stacks"], env=self.env(XDG_RUNTIME_DIR=runtime), capture_output=True, text=True,
                           timeout=60)
        self.assertExitCode(r, 0)
        self.assertIn("dtlaunch: the stacks of 4 ranks on 2 nodes:\n", r.stdout)  # with one host name: loopback
        self.assertRegex(r.stdout, r"  ranks 0-2:\n    thread MainThread\n      all_reduce \(")
        self.assertRegex(r.stdout, r"  rank 3:\n    thread MainThread\n      stuck \(hang\.py:\d+\)")
        open(release, "w").close()
        for done in [n.finish(timeout=120) for n in nodes]:
            self.assertExitCode(done, 0)

    def test_dtlaunch_stacks_where_the_fan_out_runs_prints_every_host_s_ranks(self):
        # Two hosts through ssh's stand-in (test_fanout_loopback.py), each agent on this machine.
        ssh, hostfile = two_loopback_hosts(self.tmp)
        runtime = os.path.join(self.tmp, "run")
        os.mkdir(runtime, 0o700)
        release = os.path.join(self.tmp, "release")
        env = self.env(PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1", STUCK_RANK="3", STUCK_S="120", STUCK_UNTIL=release,
                       XDG_RUNTIME_DIR=runtime,
                       FAKE_SSH_LOG=os.path.join(self.tmp, "ssh.log"))
        fanout = Running([DTLAUNCH, "--hostfile", hostfile, "--ssh_command", ssh, "--remote_dtlaunch",
                          os.path.realpath(DTLAUNCH), "--master_port", str(free_port()), self.script, "sleep"], env)
        fanout.wait_for(r"ready rank \d", count=4)
        r = subprocess.run([DTLAUNCH, "stacks", str(fanout.proc.pid)], env=env, capture_output=True, text=True,
                           timeout=90)
        self.assertExitCode(r, 0)
        self.assertIn("dtlaunch: the stacks of 4 ranks on ", r.stdout)
        self.assertRegex(r.stdout, r"  ranks 0-2:\n    thread MainThread\n      all_reduce \(")
        self.assertRegex(r.stdout, r"  rank 3:\n    thread MainThread\n      stuck \(hang\.py:\d+\)")
        open(release, "w").close()
        self.assertExitCode(fanout.finish(timeout=120), 0)

    @unittest.skipUnless(HAVE_SECCOMP, "no python3-seccomp: ptrace cannot be denied here")
    def test_without_ptrace_the_stacks_come_from_faulthandler_and_a_user_s_sitecustomize_still_runs(self):
        site = os.path.join(self.tmp, "site")
        os.mkdir(site)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.write(1, b'user sitecustomize ran\\n')\n")
        env = self.env(PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1", PYTHONPATH=site)
        r = subprocess.run([sys.executable, NO_PTRACE, DTLAUNCH, "--nproc_per_node=2", "--master_port", str(free_port()),
                            "--log_dir", self.logs, "--hang_timeout=5", "--on_hang=fail", self.script, "sleep"],
                           env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("dtlaunch: info: ptrace is not allowed here (Operation not permitted): a hung Python rank's "
                      "stack comes from its faulthandler", r.stderr)
        self.assertIn("  stacks (faulthandler):\n", r.stderr)
        self.assertRegex(r.stderr, r"  rank 0:\n    thread MainThread\n      all_reduce \(torch/distributed/distributed_c10d\.py:\d+\)")
        self.assertRegex(r.stderr, r"  rank 1:\n    thread MainThread\n      stuck \(hang\.py:\d+\)")
        self.assertRegex(r.stderr, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): stuck \(hang\.py:\d+\)")
        self.assertEqual(r.stdout.count("]:user sitecustomize ran"), 2, r.stdout)  # the workers chain it
        [report] = self.reports()
        self.assertEqual({x["stack_by"] for x in report["ranks"]}, {"faulthandler"})

    def test_names_a_rank_chose_reach_the_terminal_printable_and_the_json_as_they_are(self):
        # A file name with an OSC sequence and a thread name with a screen clear and a carriage return
        # that would forge a line of dtlaunch's, both of the rank's making; py-spy reads them.
        thread = "\x1b[2J\rdtlaunch: all is well"
        script = os.path.join(self.tmp, "names.py")
        with open(script, "w") as f:
            f.write("import sys, threading, time\n"
                    f"threading.Thread(target=time.sleep, args=(3600,), name={thread!r}, daemon=True).start()\n"
                    "print('ready', flush=True)\n"
                    "exec(compile('import time\\ndef stuck():\\n    time.sleep(3600)\\n', 'evil\\x1b]0;owned\\x07.py', "
                    "'exec'))\n"
                    "stuck()\n")
        r = self.launch("--nproc_per_node=1", "--standalone", "--log_dir", self.logs, "--hang_timeout=3",
                        "--on_hang=fail", script, env=self.env(PYTHON_EXEC=PYTHON), timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        for raw in ("\x1b", "\x07", "\r"):
            self.assertNotIn(raw, r.stderr)
        self.assertIn("    thread \\x1b[2J\\rdtlaunch: all is well\n", r.stderr)
        self.assertIn("    thread MainThread\n      stuck (evil\\x1b]0;owned\\x07.py:3)\n      <module> (names.py:5)\n",
                      r.stderr)
        # one rank, waiting for none: no suspect (no rank is seen waiting for it)
        self.assertIn("dtlaunch: no suspect: no rank is known to be off; rank 0 blocked where its stack does not say\n",
                      r.stderr)
        # The headline and the failure summary say the same number of seconds.
        headline = re.search(r"dtlaunch: hang: no rank printed for (\d+) s \(--hang_timeout=3\)", r.stderr)
        summary = re.search(r"hang: no rank printed for (\d+) s \(no suspect: the lowest rank stands for the job\)",
                            r.stderr.split("Root Cause")[1])
        self.assertEqual(headline.group(1), summary.group(1), r.stderr)
        [report] = self.reports()
        self.assertIn(f"thread {thread}", report["ranks"][0]["stack"])

    def test_a_rank_that_never_imported_threading_has_its_main_thread_named(self):
        # py-spy 0.4 gives no thread name then; the main thread is told by its thread id.
        runtime = os.path.join(self.tmp, "run")
        os.mkdir(runtime, 0o700)
        script = os.path.join(self.tmp, "plain.py")
        with open(script, "w") as f:
            f.write("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
        env = self.env(PYTHON_EXEC="/usr/bin/python3", DTLAUNCH_PY_SPY=os.path.join(VENV, "bin", "py-spy"),
                       XDG_RUNTIME_DIR=runtime)
        job = Running([DTLAUNCH, "--nproc_per_node=1", "--standalone", script], env)
        try:
            job.wait_for("ready")
            r = subprocess.run([DTLAUNCH, "stacks"], env=env, capture_output=True, text=True, timeout=60)
            self.assertExitCode(r, 0)
            self.assertIn("  rank 0:\n    thread MainThread\n      <module> (plain.py:3)\n", r.stdout)
        finally:
            job.proc.terminate()
            job.finish()

    def test_hang_timeout_0_turns_the_watch_off(self):
        r = self.run_job("sleep", "--hang_timeout=0", "--on_hang=fail", STUCK_S="8")
        self.assertExitCode(r, 0)
        self.assertNotIn("hang", r.stderr)


if __name__ == "__main__":
    main()
