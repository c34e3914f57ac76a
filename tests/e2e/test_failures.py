"""Failures: the group stops, restarts with restarts left, and the summary names the root cause."""
import os
import re

from common import WORKER, LaunchTest, main

SUMMARY = re.compile(
    r"^(?P<border>={10,60})\n(?P<title>.+) FAILED\n-+\nFailures:\n(?P<others>(?:.|\n)*?)\n-+\n"
    r"Root Cause \(first observed failure\):\n\[(?P<idx>\d+)\]:\n"
    r"  time      : \d{4}-\d\d-\d\d_\d\d:\d\d:\d\d\n"
    r"  host      : (?P<host>.+)\n"
    r"  rank      : (?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)\n"
    r"  exitcode  : (?P<exitcode>-?\d+) \(pid: (?P<pid>\d+)\)\n"
    r"  error_file: (?P<error_file>.+)\n"
    r"(?:  peak_rss  : (?P<peak_rss>\d+(?:\.\d)? [KMG]iB)\n)?"
    r"  traceback : (?P<traceback>(?:.|\n)*?)\n(?P=border)$", re.M)


class Failures(LaunchTest):
    def summary(self, stderr):
        m = SUMMARY.search(stderr)
        self.assertIsNotNone(m, f"no failure summary in:\n{stderr}")
        return m

    def test_the_root_causes_exit_code_is_dtlaunchs_exit_code(self):
        r = self.launch("--nproc_per_node=3", "--master_port=0", *self.worker("exit", 3, 1))
        self.assertExitCode(r, 3)
        s = self.summary(r.stderr)
        self.assertEqual(s["title"], WORKER)
        self.assertEqual((s["rank"], s["local_rank"], s["exitcode"]), ("1", "1", "3"))
        self.assertEqual(s["others"], "  <NO_OTHER_FAILURES>")
        self.assertEqual(s["error_file"], "<N/A>")
        self.assertEqual(s["traceback"], "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
        self.assertEqual(s["host"], os.uname().nodename)

    def test_exit_code_138_is_preserved(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", *self.worker("exit", 138))
        self.assertExitCode(r, 138)

    def test_a_sigsegv_death_is_reported_by_signal_name(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", *self.worker("signal", 11, 0))
        self.assertExitCode(r, 128 + 11)
        s = self.summary(r.stderr)
        self.assertEqual((s["rank"], s["exitcode"]), ("0", "-11"))
        self.assertEqual(s["traceback"], f"Signal 11 (SIGSEGV) received by PID {s['pid']}")
        self.assertIn("failed with SIGSEGV; stopping the other workers", r.stderr)

    def test_the_error_file_content_is_in_the_summary(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", *self.worker("error-file", "loss is NaN", 1))
        self.assertExitCode(r, 1)
        s = self.summary(r.stderr)
        self.assertEqual(s["rank"], "1")
        self.assertRegex(s["error_file"], r"/attempt_0/1/error\.json$")
        self.assertEqual(s["traceback"], 'Traceback (most recent call last):\n    File "train.py", line 7, in <module>\n'
                                         "  RuntimeError: loss is NaN")

    def test_with_restarts_left_the_group_restarts_and_succeeds(self):
        r = self.launch("--nproc_per_node=3", "--master_port=0", "--max_restarts=2", *self.worker("fail-first", 1, 7))
        self.assertExitCode(r, 0)
        # the others may be stopped before they print in attempt 0
        self.assertIn("[default1]:attempt 0 rank 1", r.stdout)
        for rank in range(3):
            self.assertIn(f"[default{rank}]:attempt 1 rank {rank}", r.stdout)
        self.assertNotIn("attempt 2", r.stdout)
        self.assertIn("restarting the workers (1 of 2 restarts) after rank 1 failed", r.stderr)
        self.assertNotIn("FAILED", r.stderr)

    def test_when_restarts_run_out_the_last_failure_is_reported(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", "--max_restarts=2", *self.worker("exit", 4, 0))
        self.assertExitCode(r, 4)
        self.assertEqual(r.stderr.count("restarting the workers"), 2)
        self.assertEqual(r.stderr.count("FAILED"), 1)

    def test_a_worker_that_cannot_be_executed_is_a_failure_with_the_reason(self):
        script = os.path.join(self.tmp, "bad.sh")
        with open(script, "w") as f:
            f.write("#!/nonexistent/interpreter\n")
        os.chmod(script, 0o755)
        r = self.launch("--nproc_per_node=1", "--master_port=0", "--no_python", script)
        self.assertExitCode(r, 127)
        self.assertIn(f"[default0]:dtlaunch: cannot execute {script}: No such file or directory", r.stderr)


if __name__ == "__main__":
    main()
