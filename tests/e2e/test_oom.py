"""A rank killed by the kernel's out-of-memory killer is named so, with the limit it hit and its peak
RSS; a SIGKILL from outside is told apart. A real memory cgroup (v1, or v2 where the controller is
delegated) is made under the test's own, dtlaunch runs in it, and it is removed afterwards."""
import os
import re
import signal
import subprocess
import unittest

from common import DTLAUNCH, LaunchTest, main, poll_until, rank_pids

LIMIT = 400 << 20
# Rank 1 fills 2 GiB, 64 MiB at a time, touching every page; rank 0 waits.
HOG = """import os, sys, time
print("up", flush=True)
if os.environ["RANK"] == "1" and sys.argv[1:] == ["hog"]:
    chunks = []
    for _ in range(32):
        chunks.append(bytearray(b"x") * (64 << 20))
time.sleep(120)
"""


def own_memory_cgroup():
    """(folder, v2) of this process's memory cgroup where a child cgroup can be made, else None."""
    with open("/proc/self/cgroup") as f:
        lines = [line.rstrip("\n").split(":", 2) for line in f]
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            for m in mounts:
                sep = m.index("-")
                if m[sep + 1] == "cgroup" and "memory" in m[sep + 3].split(","):
                    return os.path.join(m[4], path.lstrip("/")), False
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "":
            for m in mounts:
                sep = m.index("-")
                if m[sep + 1] == "cgroup2":
                    folder = os.path.join(m[4], path.lstrip("/"))
                    try:
                        with open(os.path.join(folder, "cgroup.subtree_control")) as f:
                            if "memory" in f.read().split():
                                return folder, True
                    except OSError:
                        pass
    return None


@unittest.skipUnless(os.geteuid() == 0, "making a memory cgroup needs root")
class OomKill(LaunchTest):
    def setUp(self):
        super().setUp()
        own = own_memory_cgroup()
        if own is None:
            self.skipTest("no memory cgroup to make one under (v1 memory, or v2 with memory delegated)")
        parent, self.v2 = own
        self.cgroup = os.path.join(parent, "dtl-oom-" + self.tag[:12])
        try:
            os.mkdir(self.cgroup)
        except OSError as e:
            self.skipTest(f"cannot make a memory cgroup under {parent}: {e}")
        self.addCleanup(self.remove_cgroup)
        files = {"memory.max": LIMIT, "memory.swap.max": 0} if self.v2 else {
            "memory.limit_in_bytes": LIMIT, "memory.memsw.limit_in_bytes": LIMIT}
        for name, value in files.items():
            if os.path.exists(os.path.join(self.cgroup, name)):
                with open(os.path.join(self.cgroup, name), "w") as f:
                    f.write(str(value))
        self.script = os.path.join(self.tmp, "hog.py")
        with open(self.script, "w") as f:
            f.write(HOG)

    def remove_cgroup(self):
        # once every process of the test is gone (tearDown checked), the empty cgroup goes
        poll_until(lambda: self.empty(), 10)
        os.rmdir(self.cgroup)

    def empty(self):
        with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
            return not f.read().strip()

    def start_in_cgroup(self, *args):
        """dtlaunch, moved into the cgroup before it starts."""
        command = f'echo $$ > {self.cgroup}/cgroup.procs && exec "$@"'
        return subprocess.Popen(["/bin/sh", "-c", command, "sh", DTLAUNCH, *map(str, args)],
                                env=self.env(PYTHON_EXEC="/usr/bin/python3"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def test_a_rank_the_oom_killer_took_is_named_so_with_the_limit_and_its_peak_rss(self):
        job = self.start_in_cgroup("--nproc_per_node=2", "--master_port=0", "--hang_timeout=0", self.script, "hog")
        _, err = job.communicate(timeout=120)
        self.assertEqual(job.returncode, 137, err)
        self.assertRegex(err, r"worker rank 1 \(local_rank 1, pid \d+\) failed with SIGKILL, killed by the kernel's "
                              r"out-of-memory killer; stopping the other workers")
        root = err.split("Root Cause (first observed failure):")[1]
        self.assertIn("exitcode  : -9", root)
        self.assertRegex(root, r"traceback : Signal 9 \(SIGKILL\) received by PID \d+: killed by the kernel's "
                               r"out-of-memory killer \(its memory cgroup's limit of 400 MiB was reached, "
                               + re.escape(self.cgroup) + r", peak RSS \d+ MiB\)")
        peak = int(re.search(r"peak_rss  : (\d+) MiB", root).group(1))
        self.assertTrue(300 <= peak <= 400, peak)

    def test_a_sigkill_from_outside_is_told_apart_from_the_oom_killer(self):
        job = self.start_in_cgroup("--nproc_per_node=2", "--master_port=0", "--hang_timeout=0", self.script)
        self.assertTrue(poll_until(lambda: len(rank_pids(self.tag, "python")) == 2, 30), "the ranks did not start")
        os.kill(rank_pids(self.tag, "python")[1], signal.SIGKILL)
        _, err = job.communicate(timeout=60)
        self.assertEqual(job.returncode, 137, err)
        root = err.split("Root Cause (first observed failure):")[1]
        self.assertRegex(root, r"traceback : Signal 9 \(SIGKILL\) received by PID \d+: the SIGKILL came from outside "
                               r"dtlaunch \(the kernel's out-of-memory killer killed nothing in its memory cgroup\)")
        self.assertRegex(root, r"peak_rss  : \d+ [KM]iB")



if __name__ == "__main__":
    main()
