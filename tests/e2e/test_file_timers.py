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


if __name__ == "__main__":
    main()
