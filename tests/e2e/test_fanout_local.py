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
