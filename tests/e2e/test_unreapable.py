"""A worker that no signal ends: it waits on a FUSE mount that never answers (fuse_stall.py), and
once a signal has come it is in uninterruptible sleep (D), as on a hung NFS mount or in a GPU driver
call. dtlaunch must not wait for it for ever: kReapLimit (10 s) after SIGKILL it names the pid and
its state, restarts nothing, and ends with the job's failure. Root only (mount)."""
import os
import re
import subprocess
import sys
import time
import unittest

from common import HERE, LaunchTest, Running, free_port, main, poll_until

SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
print(f"ready rank {rank}", flush=True)
if rank == 1:
    os.stat(sys.argv[1] + "/never")  # the FUSE server reads the request and never answers
time.sleep(1)
sys.exit(3)
"""


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@unittest.skipUnless(os.geteuid() == 0 and os.path.exists("/dev/fuse"), "needs root and /dev/fuse (mount)")
class Unreapable(LaunchTest):
    def setUp(self):
        super().setUp()
        self.mount = os.path.join(self.tmp, "stall")
        os.mkdir(self.mount)
        self.fuse = Running([sys.executable, os.path.join(HERE, "fuse_stall.py"), self.mount], self.env())
        self.fuse.wait_for(r"^mounted$", timeout=10)
        self.script = os.path.join(self.tmp, "worker.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def tearDown(self):
        # Ending the server (by its pid) aborts the connection: the stuck worker ends, then no
        # process of the test may be left.
        self.fuse.proc.kill()
        self.fuse.proc.wait(timeout=10)
        subprocess.run(["umount", "-l", self.mount], check=False)
        super().tearDown()

    def test_a_worker_in_d_state_is_named_and_dtlaunch_ends_with_the_job_s_failure_without_restarting(self):
        started = time.monotonic()
        r = self.launch("--nproc_per_node=2", "--master_port", free_port(), "--shutdown_timeout=1", "--max_restarts=2",
                        self.script, self.mount, timeout=60)
        took = time.monotonic() - started
        self.assertExitCode(r, 3)  # rank 0's code: the root cause
        m = re.search(r"worker rank 1 \(local_rank 1, pid (\d+)\) could not be reaped 10s after SIGKILL: "
                      r"it is in uninterruptible sleep \(D\)", r.stderr)
        self.assertTrue(m, r.stderr)
        self.assertEqual(state(int(m.group(1))), "D")  # still there after dtlaunch ended: the pid it named
        self.assertIn("not restarting: 1 process(es) of the last attempt could not be reaped", r.stderr)
        self.assertEqual(r.stdout.count("ready rank 1"), 1, r.stdout)  # one attempt only
        self.assertLess(took, 45, r.stderr)  # bounded: about 1 s + 1 s of grace + 10 s
        self.fuse.proc.kill()
        self.assertTrue(poll_until(lambda: state(int(m.group(1))) is None, 10), "the stuck worker never ended")


if __name__ == "__main__":
    main()
