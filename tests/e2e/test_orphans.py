"""No orphans when dtlaunch is SIGKILLed, alone or with its whole process group (`timeout -s KILL`,
`kill -9 -PGID`, a CI runner), whatever the workers left behind: a plain child, a double fork, a
child in a process group of its own, one that ignores SIGTERM, and (with the job's cgroup) one in
a session of its own. Twenty trials each: a race would show."""
import os
import shutil
import signal

from common import DTLAUNCH, LaunchTest, Running, main

TRIALS = 20

# One worker's descendants of every kind, then its cgroup on a "ready" line.
DESCENDANTS = r"""
sleep 1000 &                           # plain
( sleep 1001 & )                       # double fork: adopted as its parent exits
set -m; sleep 1002 & set +m            # a process group of its own (bash job control)
( trap '' TERM; exec sleep 1003 ) &    # ignores SIGTERM
if [ "$1" = session ]; then setsid sleep 1004 & fi
echo "ready $(grep '^0::' /proc/self/cgroup)"
wait
"""


def cgroup2_mounts():
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if " - cgroup2 " in line]


def own_cgroup2_dir():
    """This process's folder in the cgroup2 hierarchy."""
    with open("/proc/self/cgroup") as f:
        own = [line.strip()[3:] for line in f if line.startswith("0::")][0]
    return cgroup2_mounts()[0] + own.rstrip("/")


class Orphans(LaunchTest):
    def start_job(self, *flags, kinds="group"):
        tmpdir = os.path.join(self.tmp, "tmp")
        os.makedirs(tmpdir, exist_ok=True)
        args = [DTLAUNCH, "--nproc_per_node=2", "--master_port=0", *flags, "--no_python", "/bin/bash", "-c",
                DESCENDANTS, "bash", kinds]
        # in a process group of its own, to be killed as a whole
        run = Running(args, self.env(TMPDIR=tmpdir), start_new_session=True)
        run.wait_for(r"^\[default\d\]:ready ", count=2)
        return run, tmpdir

    def kill_and_check(self, run, tmpdir, whole_group, folders_left=0):
        if whole_group:
            os.killpg(run.proc.pid, signal.SIGKILL)
        else:
            run.proc.kill()
        run.proc.wait(timeout=10)
        self.assert_no_leftovers()  # the guard, a fork of dtlaunch, carries the tag and is waited for too
        left = [os.path.join(d, n) for d, dirs, files in os.walk(tmpdir) for n in dirs + files]
        self.assertEqual(len(os.listdir(tmpdir)), folders_left,
                         f"the run's temporary folder was left behind: {left}\nstderr:\n{run.err.decode(errors='replace')}")
        shutil.rmtree(tmpdir)
        run.finish()

    def trials(self, *flags, whole_group, kinds="group"):
        for trial in range(TRIALS):
            with self.subTest(trial=trial):
                run, tmpdir = self.start_job(*flags, kinds=kinds)
                self.kill_and_check(run, tmpdir, whole_group)

    def require_job_cgroup(self):
        run, tmpdir = self.start_job()
        in_cgroup = b"/dtlaunch-" in run.out
        self.kill_and_check(run, tmpdir, whole_group=False)
        if not in_cgroup:
            self.skipTest("no job cgroup here (no cgroup v2 to write to: not root, no delegation)")

    def test_a_sigkill_of_dtlaunchs_process_group_leaves_nothing_with_the_job_cgroup(self):
        self.require_job_cgroup()
        self.trials(whole_group=True, kinds="session")

    def test_a_sigkill_of_dtlaunch_alone_leaves_nothing_with_the_job_cgroup(self):
        self.require_job_cgroup()
        self.trials(whole_group=False, kinds="session")

    def test_without_a_cgroup_a_sigkill_of_dtlaunchs_process_group_leaves_nothing(self):
        self.trials("--job_cgroup=0", whole_group=True)

    def test_without_a_cgroup_a_sigkill_of_dtlaunch_alone_leaves_nothing(self):
        self.trials("--job_cgroup=0", whole_group=False)

    def test_a_dtlaunch_inside_a_dtlaunch_is_killed_and_its_cgroup_removed_with_the_outer_one(self):
        self.require_job_cgroup()
        mounts = cgroup2_mounts()
        for trial in range(5):
            with self.subTest(trial=trial):
                tmpdir = os.path.join(self.tmp, "tmp")
                os.makedirs(tmpdir, exist_ok=True)
                inner = [DTLAUNCH, "--nproc_per_node=2", "--master_port=0", "--no_python", "/bin/bash", "-c",
                         DESCENDANTS, "bash", "session"]
                run = Running([DTLAUNCH, "--master_port=0", "--no_python", *inner], self.env(TMPDIR=tmpdir),
                              start_new_session=True)
                run.wait_for(r"^\[default0\]:\[default\d\]:ready ", count=2)
                paths = {line.split("0::", 1)[1] for line in run.out.decode().splitlines() if "0::" in line}
                self.assertTrue(all(p.count("/dtlaunch-") == 2 for p in paths), paths)  # nested
                # the inner guard, in the outer job's cgroup, dies with it: its folder stays (docs/limits.md)
                self.kill_and_check(run, tmpdir, whole_group=True, folders_left=1)
                outer = {p.rsplit("/dtlaunch-", 1)[0] for p in paths}
                self.assertFalse([m + p for m in mounts for p in outer if os.path.exists(m + p)],
                                 "a job cgroup was left behind")

    def test_a_job_cgroup_left_by_a_killed_dtlaunch_whose_pid_comes_again_is_taken_over(self):
        # A dtlaunch SIGKILLed with its guard leaves dtlaunch-<pid>; pids wrap (pid_max is 32768 on
        # many machines), and the next dtlaunch with that pid must still get a cgroup of its own.
        self.require_job_cgroup()
        parent = own_cgroup2_dir()
        with open("/proc/sys/kernel/ns_last_pid") as f:
            first = int(f.read()) + 1000
        stale = {pid: os.path.join(parent, f"dtlaunch-{pid}") for pid in range(first, first + 200)}
        for path in stale.values():
            os.makedirs(path, exist_ok=True)
        self.addCleanup(lambda: [os.rmdir(p) for p in stale.values() if os.path.isdir(p)])
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(first - 1))  # the next process made here gets pid `first`, or one soon after
        except OSError as e:
            self.skipTest(f"cannot choose the next pid here: {e}")
        run, tmpdir = self.start_job(kinds="session")
        self.assertIn(run.proc.pid, stale, "dtlaunch's pid fell outside the stale cgroups' range")
        self.assertIn(f"/dtlaunch-{run.proc.pid}\n".encode(), run.out, "the workers are not in the job's cgroup")
        self.kill_and_check(run, tmpdir, whole_group=True)

    def test_the_job_cgroup_is_removed_after_a_normal_run(self):
        r = self.launch("--master_port=0", "--no_python", "/bin/sh", "-c", "grep '^0::' /proc/self/cgroup")
        self.assertExitCode(r, 0)
        path = r.stdout.split("0::", 1)[1].strip()
        if "/dtlaunch-" not in path:
            self.skipTest("no job cgroup here")
        mounts = cgroup2_mounts()
        self.assertTrue(mounts)
        self.assertFalse(any(os.path.exists(m + path) for m in mounts), "the job's cgroup was left behind")


if __name__ == "__main__":
    main()
