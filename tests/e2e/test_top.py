"""`dtlaunch top`: driven in tmux as a person would (Debian's tmux, scripts/setup.sh installs it) on one
node and across two nodes in network namespaces; one snapshot as text or JSON without a terminal;
from the terminal where the ssh fan-out runs. Each rank's row is checked against the processes
themselves: the pids, a spinning rank's CPU, a rank's resident memory."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import unittest

from common import DTLAUNCH, LaunchTest, Running, free_port, main
from netns import Network, build_for_tests, why_no_netns
from test_fanout_loopback import two_loopback_hosts

# Rank 1 spins, rank 2 holds 200 MiB; every rank says it is ready, then waits for the stop file.
WORKER = r"""
import os, sys, time
rank, stop = int(os.environ["RANK"]), sys.argv[1]
held = bytearray(200 << 20) if rank % 4 == 2 else b""
for i in range(0, len(held), 4096):
    held[i] = 1
print(f"ready rank {rank}", flush=True)
while not os.path.exists(stop):
    if rank % 4 == 1:
        end = time.monotonic() + 0.1
        while time.monotonic() < end:
            pass
    else:
        time.sleep(0.1)
"""

# RANK HOST PID DOING CPU% RSS GPU GPU% GMEM RST QUIET (commands/top_screen.cc)
ROW = re.compile(r"^\s*(\d+)\*?\s+(\S+)\s+(\d+)\s+(.+?)\s+([\d.]+|-)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)$")


def rows(screen):
    """{rank: {host, pid, doing, cpu, rss, gpu}} from top's screen or text."""
    found = {}
    for line in screen.splitlines():
        m = ROW.match(line)
        if m:
            found[int(m.group(1))] = {"host": m.group(2), "pid": int(m.group(3)), "doing": m.group(4),
                                      "cpu": None if m.group(5) == "-" else float(m.group(5)),
                                      "rss": m.group(6), "gpu": m.group(7)}
    return found


def mebibytes(text):
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}
    return float(text[:-1]) * units[text[-1]]


def worker_pids(dtlaunch_pid):
    """The workers of a dtlaunch: its children, the orphan guard aside (it runs dtlaunch itself)."""
    with open(f"/proc/{dtlaunch_pid}/task/{dtlaunch_pid}/children") as f:
        kids = [int(p) for p in f.read().split()]
    return {p for p in kids if os.path.realpath(f"/proc/{p}/exe") != os.path.realpath(DTLAUNCH)}


class Tmux:
    """A tmux server of the test's own (its socket in the test's folder), one 80x24 window running
    `command`, then `TOP_EXIT=<code>`; stopped by its pid."""

    def __init__(self, tmp, env, command):
        self.socket = os.path.join(tmp, "tmux.sock")
        self.env = env
        quoted = " ".join(shlex.quote(str(c)) for c in command)
        subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24",
                        "-s", "top", f"{quoted}; echo TOP_EXIT=$?; sleep 120"], env=env, check=True, timeout=30)
        self.pid = int(self.tmux("display-message", "-p", "#{pid}").strip())

    def tmux(self, *args):
        return subprocess.run(["tmux", "-S", self.socket, *args], env=self.env, capture_output=True, text=True,
                              timeout=30, check=True).stdout

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "top")

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "top", *keys)

    def wait_for(self, what, test, timeout=30):
        """The screen once `test(screen)` holds; fails with the last screen after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if test(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            time.sleep(0.1)

    def stop(self):
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{self.pid}") and time.monotonic() < deadline:
            time.sleep(0.05)


@unittest.skipUnless(shutil.which("tmux"), "no tmux (scripts/setup.sh installs it)")
class TopBase(LaunchTest):
    def setUp(self):
        super().setUp()
        self.runtime = os.path.join(self.tmp, "run")  # a folder of the test's own for the jobs' sockets
        os.mkdir(self.runtime, 0o700)
        self.stop_file = os.path.join(self.tmp, "stop")
        self.script = os.path.join(self.tmp, "worker.py")
        with open(self.script, "w") as f:
            f.write(WORKER)
        self.screens = []

    def tearDown(self):
        # before the base class looks for leftovers: the workers end, the terminals go
        self.release()
        for t in self.screens:
            t.stop()
        super().tearDown()

    def release(self):
        with open(self.stop_file, "w"):
            pass

    def top_env(self):
        return self.env(XDG_RUNTIME_DIR=self.runtime, PYTHON_EXEC="python3", TERM="xterm")

    def tmux(self, *command):
        t = Tmux(self.tmp, self.top_env(), command)
        self.screens.append(t)
        return t

    def check_rows(self, found, pids):
        """Every rank's row names its worker; the spinning ranks run, the 200 MiB ones hold it."""
        self.assertEqual({r["pid"] for r in found.values()}, pids)
        for rank, r in found.items():
            if rank % 4 == 1:
                self.assertEqual(r["doing"], "running")
                self.assertGreater(r["cpu"], 30)
            if rank % 4 == 2:
                self.assertGreaterEqual(mebibytes(r["rss"]), 200)


class TopOneNode(TopBase):
    def start_job(self):
        job = Running([DTLAUNCH, "--nproc_per_node=4", "--fake_gpus=4", "--master_port", str(free_port()),
                       self.script, self.stop_file], self.top_env())
        job.wait_for(r"ready rank \d", count=4)
        return job

    def test_in_tmux_every_rank_shows_refreshes_every_second_and_q_quits_while_the_job_goes_on(self):
        job = self.start_job()
        pids = worker_pids(job.proc.pid)
        t = self.tmux(DTLAUNCH, "top")
        screen = t.wait_for("four ranks, rank 1 running", lambda s: len(rows(s)) == 4 and
                            rows(s)[1]["doing"] == "running" and (rows(s)[1]["cpu"] or 0) > 30)
        self.check_rows(rows(screen), pids)
        self.assertRegex(screen, r"world 4 +nodes 1 +attempt 0 +restarts left 0 +up 0:00:\d\d +run none")
        self.assertEqual({r["gpu"] for r in rows(screen).values()}, {"fake"})
        self.assertIn("q quits", screen)
        self.assertTrue(all(len(line) <= 80 for line in screen.splitlines()))
        up = re.search(r"up (\S+)", screen).group(1)
        t.wait_for("the next refresh", lambda s: re.search(r"up (\S+)", s) and re.search(r"up (\S+)", s).group(1) != up)
        t.keys("q")
        t.wait_for("top to quit", lambda s: "TOP_EXIT=0" in s)
        self.assertIsNone(job.proc.poll())  # the job goes on
        self.release()
        self.assertExitCode(job.finish(timeout=60), 0)

    def test_top_sees_the_job_end_and_says_so(self):
        job = self.start_job()
        t = self.tmux(DTLAUNCH, "top", job.proc.pid)
        t.wait_for("four ranks", lambda s: len(rows(s)) == 4)
        self.release()
        self.assertExitCode(job.finish(timeout=60), 0)
        screen = t.wait_for("top to end", lambda s: "TOP_EXIT=0" in s)
        self.assertIn(f"dtlaunch top: the job of pid {job.proc.pid} ended", screen)

    def test_without_a_terminal_top_prints_one_snapshot_as_text_or_json(self):
        job = self.start_job()
        pids = worker_pids(job.proc.pid)
        text = subprocess.run([DTLAUNCH, "top"], env=self.top_env(), capture_output=True, text=True, timeout=30)
        self.assertExitCode(text, 0)
        self.assertIn("RANK HOST", text.stdout)
        self.assertEqual({r["pid"] for r in rows(text.stdout).values()}, pids)
        self.assertTrue(all(len(line) <= 80 for line in text.stdout.splitlines()))
        r = subprocess.run([DTLAUNCH, "top", "--json", str(job.proc.pid)], env=self.top_env(), capture_output=True,
                           text=True, timeout=30)
        self.assertExitCode(r, 0)
        snapshot = json.loads(r.stdout)
        self.assertEqual(snapshot["world_size"], 4)
        self.assertEqual([x["rank"] for x in snapshot["ranks"]], [0, 1, 2, 3])
        self.assertEqual({x["pid"] for x in snapshot["ranks"]}, pids)
        self.assertEqual({x["gpu"]["fake"] for x in snapshot["ranks"]}, {True})
        self.assertEqual({x["slow"] for x in snapshot["ranks"]}, {False})
        self.assertGreater(snapshot["ranks"][1]["cpu_percent"], 30)
        self.assertGreaterEqual(snapshot["ranks"][2]["rss_bytes"], 200 << 20)
        # a pid that is no job of this user's, and words that are no option
        other = subprocess.run([DTLAUNCH, "top", "1"], env=self.top_env(), capture_output=True, text=True, timeout=30)
        self.assertEqual((other.returncode, other.stderr),
                         (1, "dtlaunch top: error: no dtlaunch job of yours with pid 1 on this machine\n"))
        bad = subprocess.run([DTLAUNCH, "top", "--color"], env=self.top_env(), capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(bad.returncode, 2)
        self.assertTrue(bad.stderr.startswith(
            "dtlaunch top: error: expected the pid of a dtlaunch, --json or --once, got --color\n"), bad.stderr)
        self.release()
        self.assertExitCode(job.finish(timeout=60), 0)

    def test_where_the_fan_out_runs_top_shows_every_host_s_ranks(self):
        ssh, hostfile = two_loopback_hosts(self.tmp)
        env = self.top_env()
        env["FAKE_SSH_LOG"] = os.path.join(self.tmp, "ssh.log")
        fanout = Running([DTLAUNCH, "--hostfile", hostfile, "--ssh_command", ssh, "--remote_dtlaunch",
                          os.path.realpath(DTLAUNCH), "--master_port", str(free_port()), self.script, self.stop_file],
                         env)
        fanout.wait_for(r"ready rank \d", count=4)
        r = subprocess.run([DTLAUNCH, "top", "--json", str(fanout.proc.pid)], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertExitCode(r, 0)
        snapshot = json.loads(r.stdout)
        self.assertEqual([x["rank"] for x in snapshot["ranks"]], [0, 1, 2, 3])
        self.assertEqual(snapshot["nodes"], 2)
        self.assertEqual(snapshot["missing"], "")
        # the relay keeps its ssh for the next ask: the text snapshot comes from it
        text = subprocess.run([DTLAUNCH, "top", "--once", str(fanout.proc.pid)], env=env, capture_output=True,
                              text=True, timeout=60)
        self.assertExitCode(text, 0)
        self.assertEqual(sorted(rows(text.stdout)), [0, 1, 2, 3])
        self.release()
        self.assertExitCode(fanout.finish(timeout=60), 0)


NET = Network("ab", name="top")


@unittest.skipIf(why_no_netns(), why_no_netns())
class TopTwoNodes(TopBase):
    @classmethod
    def setUpClass(cls):
        build_for_tests(NET)

    @classmethod
    def tearDownClass(cls):
        NET.delete()

    def test_in_tmux_on_the_node_that_does_not_host_every_node_s_ranks_show(self):
        port = free_port()
        nodes = {}
        for rank, node in enumerate("ab"):
            nodes[node] = Running(NET.exec_argv(node, [
                DTLAUNCH, "--nnodes=2", f"--node_rank={rank}", "--nproc_per_node=4", f"--master_addr={NET.addr['a']}",
                f"--master_port={port}", f"--local_addr={NET.addr[node]}", self.script, self.stop_file]),
                self.top_env())
        for n in nodes.values():
            n.wait_for(r"ready rank \d", count=4)
        pids = worker_pids(nodes["a"].proc.pid) | worker_pids(nodes["b"].proc.pid)
        t = self.tmux(*NET.exec_argv("b", [DTLAUNCH, "top", nodes["b"].proc.pid]))
        screen = t.wait_for("eight ranks, the spinning ones running", lambda s: len(rows(s)) == 8 and all(
            rows(s)[r]["doing"] == "running" and (rows(s)[r]["cpu"] or 0) > 30 for r in (1, 5)))
        self.check_rows(rows(screen), pids)
        self.assertRegex(screen, r"world 8 +nodes 2 +attempt 0")
        t.keys("q")
        t.wait_for("top to quit", lambda s: "TOP_EXIT=0" in s)
        self.release()
        for n in nodes.values():
            self.assertExitCode(n.finish(timeout=60), 0)


if __name__ == "__main__":
    main()
