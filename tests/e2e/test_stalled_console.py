"""A console that stops reading (a paused pager, a terminal on Ctrl-S, a pipe nobody drains) holds up
the workers' output, never dtlaunch's supervision: signals and failures are handled while it is stalled,
and once it reads again every line arrives whole and in order."""
import fcntl
import os
import re
import select
import signal
import subprocess
import termios
import time

from common import DTLAUNCH, LaunchTest, main, tagged_pids


class StalledConsole(LaunchTest):
    def setUp(self):
        super().setUp()
        # stdout: a pipe this test leaves unread until the end; stderr: read as it arrives
        self.proc = subprocess.Popen([DTLAUNCH, "--nproc_per_node=2", "--master_port=0",
                                      *self.worker("lines", 10**12)],
                                     env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(self.stop)  # also when setUp fails, which skips tearDown
        self.err = b""
        self.wait_until(self.console_is_full, "dtlaunch's stdout pipe never filled up")

    def stop(self):
        if self.proc.returncode is None:  # drain() not reached: a failed test
            self.proc.kill()
            self.proc.communicate()

    def tearDown(self):
        self.stop()
        super().tearDown()

    def wait_until(self, condition, what, timeout=30):
        deadline = time.monotonic() + timeout
        while not condition():
            self.assertLess(time.monotonic(), deadline, what)
            time.sleep(0.01)

    def console_is_full(self):
        if self.proc.poll() is not None:
            self.fail(f"dtlaunch exited ({self.proc.returncode}) before its console filled up: "
                      f"{self.proc.stderr.read().decode(errors='replace')}")
        size = fcntl.fcntl(self.proc.stdout, fcntl.F_GETPIPE_SZ)
        unread = int.from_bytes(fcntl.ioctl(self.proc.stdout, termios.FIONREAD, b"\0\0\0\0"), "little")
        # The pipe's pages are not always filled to the last byte when a write blocks (61 413 of
        # 65 536 bytes seen), so a writer thread asleep in pipe_write counts too.
        return unread >= size - 4096 or (unread >= size // 2 and self.stdout_writer_blocked())

    def stdout_writer_blocked(self):
        task = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/wchan") as f:
                    if int(tid) != self.proc.pid and "pipe_write" in f.read():
                        return True
            except OSError:
                pass
        return False

    def wait_for_stderr(self, text, timeout=15):
        """Reads only stderr: stdout stays stalled."""
        deadline = time.monotonic() + timeout
        while text.encode() not in self.err:
            left = deadline - time.monotonic()
            self.assertGreater(left, 0, f"no {text!r} on stderr while stdout was stalled; stderr:\n"
                                        f"{self.err.decode(errors='replace')}")
            if select.select([self.proc.stderr], [], [], left)[0]:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
                self.assertTrue(chunk, "dtlaunch closed stderr")
                self.err += chunk

    def workers(self):
        """{rank: pid} of the running test workers (not dtlaunch, not its guard)."""
        found = {}
        for pid in tagged_pids(self.tag):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
                if b"RANK" in env and pid != self.proc.pid:
                    found[int(env[b"RANK"])] = pid
            except OSError:
                pass
        return found

    def drain(self):
        """Reads the console at last; every line must be whole and each rank's lines consecutive
        (a worker stopped mid-write may leave its last line cut short, but never a torn one)."""
        out, err = self.proc.communicate(timeout=60)
        self.err += err
        lines = out.decode().split("\n")
        self.assertEqual(lines[-1], "")
        by_rank = {}
        for line in lines[:-1]:
            m = re.match(r"^\[default(\d)\]:(.*)$", line)
            self.assertIsNotNone(m, f"foreign line: {line[:200]!r}")
            by_rank.setdefault(int(m.group(1)), []).append(m.group(2))
        self.assertTrue(by_rank and set(by_rank) <= {0, 1}, by_rank.keys())  # on a busy machine one rank may fill it alone
        for rank, got in by_rank.items():
            for n, text in enumerate(got[:-1], start=1):
                self.assertEqual(text, f"r{rank} line {n}", "line lost, torn or out of order")
            self.assertTrue(f"r{rank} line {len(got)}".startswith(got[-1]), f"torn last line: {got[-1]!r}")
        return self.proc.returncode

    def test_sigterm_stops_the_workers_while_the_console_is_stalled(self):
        self.proc.send_signal(signal.SIGTERM)
        self.wait_for_stderr("received SIGTERM, stopping the workers")
        self.wait_until(lambda: not self.workers(), "workers still running after SIGTERM")
        self.assertEqual(self.drain(), 128 + signal.SIGTERM)

    def test_a_worker_failure_is_handled_while_the_console_is_stalled(self):
        self.wait_until(lambda: len(self.workers()) == 2, "the two workers did not start")
        workers = self.workers()
        os.kill(workers[1], signal.SIGKILL)
        self.wait_for_stderr(f"worker rank 1 (local_rank 1, pid {workers[1]}) failed with SIGKILL; "
                             "stopping the other workers")
        self.wait_for_stderr("Root Cause")
        self.assertFalse(self.workers())
        self.assertEqual(self.drain(), 128 + signal.SIGKILL)
        self.assertIn("exitcode  : -9 (pid:", self.err.decode())


if __name__ == "__main__":
    main()
