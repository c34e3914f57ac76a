"""torchrun's expiration timers (TORCHELASTIC_ENABLE_FILE_TIMER=1), against torch's own
FileTimerClient, under torch 2.15's torchrun (the oracle venv) and dtlaunch, and under Debian's
torch 1.13 where it has the client: a rank that overruns `expires(after=2)` gets the client's
signal, and dtlaunch's failure summary names the timer."""
import os
import signal
import subprocess
import unittest

from common import DTLAUNCH, LaunchTest, free_port, main

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
PYTHONS = [p for p in (os.path.join(VENV, "bin", "python"), "/usr/bin/python3") if os.path.exists(p)]
TORCHRUN = os.path.join(VENV, "bin", "torchrun")

SCRIPT = '''
import os, signal, sys, time
import torch.distributed.elastic.timer as timer

timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"], signal=signal.SIGKILL))
rank = int(os.environ["RANK"])
with timer.expires(after=2, scope="train_step"):
    time.sleep(float(sys.argv[1]) if rank == 1 else 0.1)
print(f"done rank {rank}", flush=True)
'''


def has_client(python):
    return subprocess.run([python, "-c", "from torch.distributed.elastic.timer import FileTimerClient"],
                          capture_output=True, timeout=120).returncode == 0


class FileTimers(LaunchTest):
    def setUp(self):
        super().setUp()
        self.script = os.path.join(self.tmp, "timed.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def job(self, launcher, python, sleep):
        env = self.env(PYTHON_EXEC=python, OMP_NUM_THREADS="1", TORCHELASTIC_ENABLE_FILE_TIMER="1")
        nproc = "--nproc_per_node=2" if launcher == DTLAUNCH else "--nproc-per-node=2"
        return subprocess.run([launcher, nproc, "--master_port", str(free_port()), self.script, str(sleep)], env=env,
                              capture_output=True, text=True, timeout=120, cwd=self.tmp)

    def test_an_overrun_timer_kills_its_rank_and_the_summary_names_it(self):
        ran = False
        for python in PYTHONS:
            if not has_client(python):
                continue
            ran = True
            with self.subTest(python=python):
                r = self.job(DTLAUNCH, python, 60)
                self.assertEqual(r.returncode, 128 + signal.SIGKILL, r.stderr)
                self.assertIn("[default0]:done rank 0", r.stdout)
                self.assertNotIn("done rank 1", r.stdout)
                self.assertRegex(r.stderr, r"expiration timer train_step of rank 1 \(pid \d+\) expired: sending SIGKILL")
                root = r.stderr.split("Root Cause")[1]
                self.assertIn("rank      : 1", root)
                self.assertIn("expired timer train_step (FileTimerClient): SIGKILL sent", root)
        if not ran:
            self.skipTest("no torch with FileTimerClient")

    def test_timers_released_in_time_fire_nothing(self):
        for python in [p for p in PYTHONS if has_client(p)][:1] or self.skipTest("no torch with FileTimerClient"):
            r = self.job(DTLAUNCH, python, 0.5)
            self.assertExitCode(r, 0)
            self.assertNotIn("expired", r.stderr)

    @unittest.skipUnless(os.path.exists(TORCHRUN), f"no torchrun at {TORCHRUN} (scripts/parity/make_venv.sh)")
    def test_torchrun_does_the_same_to_the_rank_and_then_kills_itself(self):
        # The oracle: torch 2.15's FileTimerServer signals the worker, then its own agent process
        # with the same signal (file_based_local_timer.py, _run_watchdog); dtlaunch ends the job
        # with the rank's failure instead.
        r = self.job(TORCHRUN, os.path.join(VENV, "bin", "python"), 60)
        self.assertEqual(r.returncode, -signal.SIGKILL, r.stderr[-2000:])
        self.assertIn("done rank 0", r.stdout)
        self.assertNotIn("done rank 1", r.stdout)


# A worker that writes what no FileTimerClient would to the FIFO: escape sequences, a carriage return
# that would forge a line of dtlaunch's, 2000 lines in all; then it waits for dtlaunch to read them.
GARBAGE = r'''
import os, time
with open(os.environ["TORCHELASTIC_TIMER_FILE"], "w") as fifo:
    fifo.write("\x1b[2J\x1b]0;owned\x07\rdtlaunch: all is well\n")
    for i in range(1999):
        fifo.write(f"garbage {i}\n")
time.sleep(1)
print("wrote", flush=True)
'''


class WhatWorkersWrite(LaunchTest):
    """What a worker writes to the FIFO, and what is at TORCHELASTIC_TIMER_FILE before the start;
    Debian's python3 writes the requests, without torch."""

    def job(self, script, **env):
        path = os.path.join(self.tmp, "worker.py")
        with open(path, "w") as f:
            f.write(script)
        return self.launch("--nproc_per_node=1", "--standalone", path,
                           env=self.env(PYTHON_EXEC="/usr/bin/python3", TORCHELASTIC_ENABLE_FILE_TIMER="1", **env))

    def test_garbage_in_the_fifo_is_shown_printable_three_times_then_counted(self):
        r = self.job(GARBAGE)
        self.assertExitCode(r, 0)
        self.assertIn("wrote", r.stdout)
        self.assertNotIn("\x1b", r.stderr)
        self.assertNotIn("\r", r.stderr)
        lines = [x for x in r.stderr.splitlines() if "FileTimerClient request" in x]
        self.assertEqual(lines, [
            "dtlaunch: warning: expiration timers: not a FileTimerClient request: "
            "\\x1b[2J\\x1b]0;owned\\x07\\rdtlaunch: all is well",
            "dtlaunch: warning: expiration timers: not a FileTimerClient request: garbage 0",
            "dtlaunch: warning: expiration timers: not a FileTimerClient request: garbage 1 (more such lines are "
            "counted, not shown)",
            "dtlaunch: warning: expiration timers: 1997 more lines that are not FileTimerClient requests"], r.stderr)

    def test_a_file_at_the_variable_s_path_is_replaced_as_torch_does_and_said(self):
        given = os.path.join(self.tmp, "timers")
        with open(given, "w") as f:
            f.write("a user's file\n")
        r = self.job("print('ran', flush=True)\n", TORCHELASTIC_TIMER_FILE=given)
        self.assertExitCode(r, 0)
        self.assertIn(f"dtlaunch: warning: TORCHELASTIC_TIMER_FILE={given} is a regular file already there: dtlaunch "
                      "deletes it and makes the timers' FIFO in its place, as torch's FileTimerServer does\n", r.stderr)
        self.assertFalse(os.path.exists(given))  # the FIFO went with the job, as torch's does

    def test_a_folder_at_the_variable_s_path_is_one_line_and_exit_2_before_anything_starts(self):
        folder = os.path.join(self.tmp, "timers")
        os.mkdir(folder)
        r = self.job("print('ran', flush=True)\n", TORCHELASTIC_TIMER_FILE=folder)
        self.assertExitCode(r, 2)
        self.assertEqual(r.stderr, f"dtlaunch: error: TORCHELASTIC_TIMER_FILE={folder} names a folder: the workers' "
                         "expiration timers need a FIFO there (name a path that is not there yet, or unset it for "
                         "one in the run's log folder)\n")
        self.assertEqual(r.stdout, "")
        self.assertTrue(os.path.isdir(folder))


if __name__ == "__main__":
    main()
