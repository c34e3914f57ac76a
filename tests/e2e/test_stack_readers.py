"""The stack readers under attack: a py-spy that never ends, floods, prints garbage or fails holds
nothing up, costs no memory, is named for what it did, and is gone with the job; where ptrace is
denied, a rank whose Python never loaded dtlaunch's faulthandler hook is not signalled (it would die
of the signal), and says why it has no stack."""
import os
import re
import signal
import subprocess
import time
import unittest

from common import DTLAUNCH, LaunchTest, Running, main, poll_until, tagged_pids

try:
    import seccomp  # noqa: F401
    HAVE_SECCOMP = True
except ImportError:
    HAVE_SECCOMP = False
NO_PTRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no_ptrace.py")

# Two Python ranks that print once and sleep: a hang in which no rank waits for another.
SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(3600)\n"


def python_workers(tag):
    """This test's Python processes now."""
    found = []
    for pid in tagged_pids(tag):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith("python"):
                    found.append(pid)
        except OSError:
            pass
    return found


class StackReaders(LaunchTest):
    def setUp(self):
        super().setUp()
        self.script = os.path.join(self.tmp, "sleeper.py")
        with open(self.script, "w") as f:
            f.write(SLEEPER)
        self.pids = os.path.join(self.tmp, "reader-pids")

    def reader(self, body):
        """A stand-in for py-spy that logs its cgroup, then its pid (so a pid logged has its cgroup
        written whole), then does `body`."""
        path = os.path.join(self.tmp, "py-spy")
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\ncat /proc/$$/cgroup > {self.pids}.cgroup.$$\necho $$ >> {self.pids}\n{body}\n")
        os.chmod(path, 0o755)
        return path

    def reader_pids(self):
        try:
            with open(self.pids) as f:
                return [int(line) for line in f if line.strip()]
        except OSError:
            return []

    def readers_gone(self, timeout=5):
        return poll_until(lambda: not any(os.path.exists(f"/proc/{p}") and self.state(p) != "Z"
                                          for p in self.reader_pids()), timeout)

    @staticmethod
    def state(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"

    def start_job(self, reader_body, *flags):
        env = self.env(PYTHON_EXEC="/usr/bin/python3", DTLAUNCH_PY_SPY=self.reader(reader_body))
        return self.start("--nproc_per_node=2", "--master_port=0", "--hang_timeout=2", *flags, self.script, env=env)

    def test_a_reader_that_closes_its_output_and_runs_on_is_named_at_its_deadline_and_killed(self):
        job = self.start_job("exec >&- 2>&-\nsleep 600", "--on_hang=fail", "--shutdown_timeout=2")
        started = time.monotonic()
        job.wait_for(r"\(no stack: py-spy did not finish within 10 s\)", timeout=40, stream="err")
        self.assertLess(time.monotonic() - started, 30)
        r = job.finish(timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertTrue(self.readers_gone(), f"readers left: {self.reader_pids()}")

    def test_sigterm_during_a_reading_ends_dtlaunch_at_once_and_the_readers_with_it(self):
        job = self.start_job("exec >&- 2>&-\nsleep 600")
        self.assertTrue(poll_until(lambda: len(self.reader_pids()) == 2, 30), "no reader started")
        with open(f"{self.pids}.cgroup.{self.reader_pids()[0]}") as f:
            reader_cgroup = f.read()
        with open(f"/proc/{python_workers(self.tag)[0]}/cgroup") as f:
            self.assertEqual(reader_cgroup, f.read(), "the readers run in the job's cgroup, as the workers do")
        job.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        r = job.finish(timeout=20)
        self.assertLess(time.monotonic() - stopped, 5, r.stderr)
        self.assertEqual(r.returncode, 143, r.stderr)
        self.assertTrue(self.readers_gone(), f"readers left: {self.reader_pids()}")

    def test_a_flooding_reader_is_cut_off_and_costs_dtlaunch_no_memory(self):
        job = self.start_job("exec yes 0123456789abcdef0123456789abcdef")
        job.wait_for(r"\(no stack: py-spy printed more than a stack's worth: cut off\)", timeout=60,
                     stream="err")
        with open(f"/proc/{job.proc.pid}/status") as f:
            peak_kib = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))
        self.assertLess(peak_kib, 128 * 1024, "dtlaunch's peak RSS")
        job.proc.send_signal(signal.SIGTERM)
        self.assertEqual(job.finish(timeout=20).returncode, 143)
        self.assertTrue(self.readers_gone())

    def test_garbage_and_a_failing_reader_are_each_named_for_what_they_did(self):
        job = self.start_job("echo 'this is not json'")
        job.wait_for(r"\(no stack: py-spy's output is not a stack \(17 bytes\)\)", timeout=40, stream="err")
        job.proc.send_signal(signal.SIGTERM)
        job.finish(timeout=20)
        job = self.start_job("echo 'Error: Failed to open process 7: Permission denied' >&2; exit 1")
        job.wait_for(r"\(no stack: py-spy exited 1: Error: Failed to open process 7: Permission denied\)",
                     timeout=40, stream="err")
        job.proc.send_signal(signal.SIGTERM)
        r = job.finish(timeout=20)
        self.assertIn("dtlaunch: no suspect: no rank is known to be off; ranks 0-1 without a stack", r.stderr)


@unittest.skipUnless(HAVE_SECCOMP, "no python3-seccomp: ptrace cannot be denied here")
class HookNotLoaded(LaunchTest):
    def test_a_rank_without_the_hook_is_not_signalled_under_a_report_or_dtlaunch_stacks(self):
        script = os.path.join(self.tmp, "sleeper.py")
        with open(script, "w") as f:
            f.write(SLEEPER)
        isolated = os.path.join(self.tmp, "python-isolated")
        with open(isolated, "w") as f:
            f.write('#!/bin/sh\nexec /usr/bin/python3 -I "$@"\n')  # -I: no PYTHONPATH, so no hook
        os.chmod(isolated, 0o755)
        env = self.env(PYTHON_EXEC=isolated, DTLAUNCH_PY_SPY="")
        job = Running(["/usr/bin/python3", NO_PTRACE, DTLAUNCH, "--nproc_per_node=2", "--master_port=0",
                       "--hang_timeout=2", "--on_hang=report", script], env)
        job.wait_for(r"\(no stack: dtlaunch's faulthandler hook is not loaded in it \(python -I", timeout=40,
                     stream="err")
        stacks = subprocess.run([DTLAUNCH, "stacks", str(job.proc.pid)], env=env, capture_output=True, text=True,
                                timeout=30)
        self.assertEqual(stacks.returncode, 0, stacks.stderr)
        self.assertEqual(stacks.stdout.count("dtlaunch's faulthandler hook is not loaded in it"), 1, stacks.stdout)
        self.assertEqual(len(python_workers(self.tag)), 2, "a worker died of the stacks signal")
        job.proc.send_signal(signal.SIGTERM)
        r = job.finish(timeout=30)
        self.assertEqual(r.returncode, 143, r.stderr)
        self.assertNotRegex(r.stderr, r"failed with SIG")


if __name__ == "__main__":
    main()
