"""The ssh fan-out's stopping rules with a fake ssh on this machine (no root, no sshd): the fake runs
the remote command with `sh -c`, and holds the host named `late` until the test releases it, so a
Ctrl-C lands while that host is still connecting. test_fanout.py covers the real OpenSSH."""
import os
import resource
import signal
import subprocess
import time

from common import DTLAUNCH, LaunchTest, Running, free_port, main

FAKE_SSH = """#!/bin/sh
# ssh's arguments end with the host and the remote command
for a; do host=$cmd; cmd=$a; done
if [ "$host" = late ] && [ "$FAKE_MODE" = hang ]; then
  exec sleep 120  # connecting forever, deaf to the end of its input
elif [ "$host" = late ]; then
  i=0
  while [ ! -e "$FAKE_DIR/release" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
  if [ "$FAKE_MODE" = unreachable ]; then
    echo "ssh: connect to host late port 22: Connection timed out" >&2
    exit 255
  fi
else
  touch "$FAKE_DIR/started"
fi
exec sh -c "$cmd"
"""

# An --ssh_command wrapper that does not exec ssh: a child it leaves (a helper, OpenSSH's
# ControlPersist master) outlives it, holding the channel's pipes. "hang" never answers; "answer"
# runs the remote command and exits with its code; "daemon" leaves its child in a session of its own.
WRAPPER_SSH = """#!/bin/sh
for a; do host=$cmd; cmd=$a; done
if [ "$FAKE_MODE" = daemon ]; then
  setsid sh -c 'echo $$ >> "$FAKE_DIR/children"; exec sleep 120' &
else
  sh -c 'echo $$ >> "$FAKE_DIR/children"; exec sleep 120' &
fi
if [ "$FAKE_MODE" = hang ]; then sleep 120; exit 1; fi
touch "$FAKE_DIR/started"
sh -c "$cmd"
exit $?
"""


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class FanoutStop(LaunchTest):
    def setUp(self):
        super().setUp()
        self.ssh = os.path.join(self.tmp, "fakessh")
        with open(self.ssh, "w") as f:
            f.write(FAKE_SSH)
        os.chmod(self.ssh, 0o755)
        hello = subprocess.run([DTLAUNCH, "fanout-node"], input="", capture_output=True, text=True, timeout=30)
        # A node that answers as this dtlaunch, then ignores the end of its input (a hung host).
        self.stubborn = os.path.join(self.tmp, "stubborn")
        with open(self.stubborn, "w") as f:
            f.write(f"#!/bin/sh\necho '{hello.stdout.splitlines()[0]}'\nexec sleep 120\n")
        os.chmod(self.stubborn, 0o755)

    def ctrl_c_while_late_connects(self, remote, mode, grace=0):
        job = Running([DTLAUNCH, "--ssh_command", self.ssh, "--hosts", "127.0.0.1:1,late:1", "--remote_dtlaunch",
                       remote, "--shutdown_timeout", str(grace), "--no_python", "true"],
                      self.env(FAKE_DIR=self.tmp, FAKE_MODE=mode), cwd=self.tmp)
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(self.tmp, "started")) and time.monotonic() < deadline:
            time.sleep(0.02)  # the fake ssh says so by a file: nothing of a host reaches the console yet
        job.proc.send_signal(signal.SIGINT)
        job.wait_for("stopping 2 hosts", stream="err")
        open(os.path.join(self.tmp, "release"), "w").close()
        return job

    def test_a_host_that_never_answers_fails_the_preflight_with_exit_2_as_every_preflight_failure(self):
        r = Running([DTLAUNCH, "--ssh_command", self.ssh, "--hosts", "127.0.0.1:1,late:1", "--remote_dtlaunch",
                     DTLAUNCH, "--no_python", "true"], self.env(FAKE_DIR=self.tmp, FAKE_MODE="hang"),
                    cwd=self.tmp).finish(timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("dtlaunch: error: host late: no answer in 30 s (preflight; nothing was started)\n", r.stderr)

    def test_ctrl_c_while_a_host_is_connecting_exits_130_without_a_preflight_error(self):
        r = self.ctrl_c_while_late_connects(DTLAUNCH, "unreachable").finish(timeout=40)
        self.assertExitCode(r, 130)
        self.assertNotIn("error", r.stderr)

    def test_a_host_that_answers_after_ctrl_c_is_still_killed_after_the_grace_period(self):
        t0 = time.monotonic()
        r = self.ctrl_c_while_late_connects(self.stubborn, "answer").finish(timeout=40)
        self.assertExitCode(r, 130)
        self.assertLess(time.monotonic() - t0, 30)  # --shutdown_timeout 0 + ssh's 10 s, not the node's 120

    def test_ctrl_c_ends_the_ssh_of_a_host_still_connecting_at_once(self):
        # Nothing runs there yet: no grace period (--shutdown_timeout + 10 s) to wait for.
        t0 = time.monotonic()
        r = self.ctrl_c_while_late_connects(DTLAUNCH, "hang", grace=20).finish(timeout=60)
        self.assertExitCode(r, 130)
        self.assertLess(time.monotonic() - t0, 10)


    def test_hosts_past_the_soft_descriptor_limit_all_start(self):
        # Three pipes a host: with the usual soft limit of 1024, about 300 hosts were the most; the
        # launcher raises it to the hard one (ssh gets the limit it had). Here 30 hosts under 64.
        hosts = ",".join(f"127.0.0.{i + 1}:1" for i in range(30))
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        r = Running([DTLAUNCH, "--ssh_command", self.ssh, "--hosts", hosts, "--remote_dtlaunch", DTLAUNCH,
                     "--master_port", str(free_port()),
                     "--no_python", "true"], self.env(FAKE_DIR=self.tmp, FAKE_MODE="-"), cwd=self.tmp,
                    preexec_fn=limit).finish(timeout=120)
        self.assertExitCode(r, 0)

    def wrapper(self):
        path = os.path.join(self.tmp, "wrapssh")
        with open(path, "w") as f:
            f.write(WRAPPER_SSH)
        os.chmod(path, 0o755)
        return path

    def children(self):
        path = os.path.join(self.tmp, "children")
        deadline = time.monotonic() + 10
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        with open(path) as f:
            return [int(line) for line in f.read().split()]

    def test_ctrl_c_ends_a_wrapper_ssh_and_the_child_it_leaves_every_time(self):
        wrapper = self.wrapper()
        for trial in range(10):
            with self.subTest(trial=trial):
                for name in ("children", "started"):
                    if os.path.exists(os.path.join(self.tmp, name)):
                        os.unlink(os.path.join(self.tmp, name))
                job = Running([DTLAUNCH, "--ssh_command", wrapper, "--hosts", "127.0.0.1", "--no_python", "true"],
                              self.env(FAKE_DIR=self.tmp, FAKE_MODE="hang"), cwd=self.tmp)
                child = self.children()
                t0 = time.monotonic()
                job.proc.send_signal(signal.SIGINT)
                r = job.finish(timeout=30)
                self.assertExitCode(r, 130)
                self.assertLess(time.monotonic() - t0, 10)
                deadline = time.monotonic() + 5
                while any(alive(pid) for pid in child) and time.monotonic() < deadline:
                    time.sleep(0.02)
                self.assertEqual([pid for pid in child if alive(pid)], [])

    def test_a_child_a_wrapper_ssh_leaves_holding_the_pipes_neither_holds_the_job_nor_outlives_it(self):
        r = Running([DTLAUNCH, "--ssh_command", self.wrapper(), "--hosts", "127.0.0.1", "--remote_dtlaunch", DTLAUNCH,
                     "--master_port", str(free_port()), "--no_python", "true"],
                    self.env(FAKE_DIR=self.tmp, FAKE_MODE="answer"), cwd=self.tmp).finish(timeout=60)
        self.assertExitCode(r, 0)
        child = self.children()
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in child) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual([pid for pid in child if alive(pid)], [])  # it was in the wrapper's process group

    def test_a_child_in_a_session_of_its_own_holding_the_pipes_is_waited_for_two_seconds_at_most(self):
        # OpenSSH's ControlPersist master keeps stderr open; it is no process of dtlaunch's to end.
        t0 = time.monotonic()
        r = Running([DTLAUNCH, "--ssh_command", self.wrapper(), "--hosts", "127.0.0.1", "--remote_dtlaunch", DTLAUNCH,
                     "--master_port", str(free_port()), "--no_python", "sh", "-c", "exit 3"],
                    self.env(FAKE_DIR=self.tmp, FAKE_MODE="daemon"), cwd=self.tmp).finish(timeout=60)
        took = time.monotonic() - t0
        for pid in self.children():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.assertExitCode(r, 3)
        self.assertLess(took, 30)

    def test_a_host_that_ends_right_after_its_hello_fails_the_preflight_at_once(self):
        hello = subprocess.run([DTLAUNCH, "fanout-node"], input="", capture_output=True, text=True,
                               timeout=30).stdout.splitlines()[0]
        ssh = os.path.join(self.tmp, "quickssh")
        with open(ssh, "w") as f:
            f.write("#!/bin/sh\nfor a; do host=$cmd; cmd=$a; done\n"
                    f"if [ \"$host\" = quick ]; then echo '{hello}'; exit 0; fi\n"
                    "sleep 1\nexec sh -c \"$cmd\"\n")
        os.chmod(ssh, 0o755)
        t0 = time.monotonic()
        r = Running([DTLAUNCH, "--ssh_command", ssh, "--hosts", "127.0.0.1,quick", "--remote_dtlaunch", DTLAUNCH,
                     "--master_port", str(free_port()), "--no_python", "true"], self.env(), cwd=self.tmp).finish(timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("dtlaunch: error: host quick: ended after its hello with exit code 0, before the job started "
                      "(preflight; nothing was started)\n", r.stderr)
        self.assertLess(time.monotonic() - t0, 20)

    def test_sigusr1_from_slurm_reaches_the_workers_of_every_host_and_stops_nothing(self):
        done = os.path.join(self.tmp, "done")
        script = ("trap 'echo checkpoint rank $RANK' USR1; echo ready rank $RANK; i=0; "
                  f"while [ ! -e {done} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done")
        job = Running([DTLAUNCH, "--ssh_command", self.ssh, "--hosts", "127.0.0.1:1,127.0.0.2:1", "--remote_dtlaunch",
                       DTLAUNCH, "--master_port", str(free_port()), "--no_python", "sh", "-c", script],
                      self.env(FAKE_DIR=self.tmp, FAKE_MODE="-"), cwd=self.tmp)
        job.wait_for(r"ready rank \d$", count=2)
        job.proc.send_signal(signal.SIGUSR1)
        job.wait_for(r"^127\.0\.0\.1: \[default0\]:checkpoint rank 0$")
        job.wait_for(r"^127\.0\.0\.2: \[default0\]:checkpoint rank 1$")
        open(done, "w").close()
        self.assertExitCode(job.finish(timeout=60), 0)

    def test_more_hosts_than_the_descriptor_limit_allows_are_refused_before_any_starts(self):
        hosts = ",".join(f"127.0.0.{i + 1}:1" for i in range(40))
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        r = Running([DTLAUNCH, "--ssh_command", self.ssh, "--hosts", hosts, "--no_python", "true"],
                    self.env(FAKE_DIR=self.tmp, FAKE_MODE="-"), cwd=self.tmp, preexec_fn=limit).finish(timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("40 hosts need about 184 open files, and `ulimit -n` allows 64", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "started")))

    def test_a_hostfile_that_is_a_fifo_nobody_writes_is_refused_after_five_seconds(self):
        fifo = os.path.join(self.tmp, "hostfile")
        os.mkfifo(fifo)
        r = self.launch("--hostfile", fifo, "--no_python", "true", timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"--hostfile: cannot read {fifo}: it is a pipe that nothing wrote to in 5 s", r.stderr)


class WithoutHosts(LaunchTest):
    def test_a_filter_or_an_empty_host_list_without_hosts_is_refused_not_ignored(self):
        # deepspeed --include localhost:1 picks a GPU of this machine; ignored, the job took them all.
        for args, where in ((["deepspeed", "--include", "localhost:1"], "--include"), (["--exclude", "a"], "--exclude"),
                            (["--hosts", ""], "--hosts"), (["--hostfile", " "], "--hostfile")):
            r = self.launch(*args, "--no_python", "true", timeout=30)
            self.assertExitCode(r, 2)
            self.assertRegex(r.stderr, rf"^dtlaunch: error: {where}[ =:][^\n]*\n$")

if __name__ == "__main__":
    main()
